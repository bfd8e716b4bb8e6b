"""Check the accelerator path end to end, and measure it.

On a CUDA machine (``python benchmarks/gpu_check.py``):

(a) one training step of the vmap ensemble against the plain trainer, ResNet-20
    and DenseNet with BN, in float64: every parameter and BN buffer must agree
    to 1e-9;
(b) a small CIFAR-shaped synthetic study (every lens, BN vs none) end to end on
    the device, through the same ``run_study`` as on the CPU;
(c) shadow models per second for ResNet-20 on CIFAR-shaped data: the ensemble
    engine (vmap) against one model after another, and the chunk size the
    ensemble's memory sizing chose;
(d) one CIFAR-10 LiRA cell at CIFAR-10's full size (50,000 training and 10,000
    test images in torchvision's on-disk format, synthetic content: the device
    machine cannot download) through the command line, ``bnmem run`` with
    ``--set train.device=cuda``: BN and no norm, ResNet-20, crop-flip training
    and its 18 query views; the time per shadow model (training, from the
    chunks' DONE markers, and all-in: the cell's wall time over its models).
    ``--json FILE`` writes (d)'s numbers for docs/numbers.json.

``--device cpu`` runs the same three checks at tiny sizes (the test suite runs
it), so the script itself cannot rot on machines without a GPU. Prints one line
per check and exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bnmem.config import ModelConfig, TrainConfig
from bnmem.data.dataset import OutlierDataset


def synthetic(n_train: int, n_test: int, shape: tuple[int, int, int], classes: int, dtype: torch.dtype,
              seed: int = 0) -> OutlierDataset:
    """A CIFAR-shaped dataset of class-dependent Gaussian images (learnable, no download)."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(classes, *shape, generator=g)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, classes, (n,), generator=g)
        return (protos[y] + 0.8 * torch.randn(n, *shape, generator=g)).to(dtype), y

    x_tr, y_tr = draw(n_train)
    x_te, y_te = draw(n_test)
    return OutlierDataset(name="synthetic-cifar", x_train=x_tr, y_train=y_tr, y_train_orig=y_tr.numpy().copy(),
                          is_noisy=np.zeros(n_train, bool), is_ood=np.zeros(n_train, bool), x_test=x_te,
                          y_test=y_te, num_classes=classes, input_shape=shape, mean=np.zeros(shape[0]),
                          std=np.ones(shape[0]), seed=seed)


def check_one_step(device: str, tiny: bool) -> bool:
    """(a) vmap ensemble vs plain trainer, one epoch of one step, float64."""
    from bnmem.train.ensemble import train_models
    from bnmem.train.trainer import seeded_model, train_model

    n = 16 if tiny else 128
    ds = synthetic(n, 8, (3, 32, 32), 10, torch.float64)
    cfg = TrainConfig(epochs=1, batch_size=n, lr=0.05, device=device, threads=1)
    seeds = [0, 1]
    idx = [np.arange(n)] * len(seeds)
    ok = True
    for arch in ("resnet20", "densenet"):
        mc = ModelConfig(arch=arch, norm="batch")
        got = train_models(mc, ds, cfg, seeds, idx, method="vmap", progress=False)
        for k, s in enumerate(seeds):
            ref = train_model(seeded_model(mc, ds, s).to(torch.float64), ds, cfg, s, train_idx=idx[k],
                              measure=False, progress=False).model
            err = max((a.double() - b.double()).abs().max().item()
                      for (name, a), b in zip(ref.state_dict().items(), got[k].state_dict().values())
                      if a.is_floating_point())
            good = err <= 1e-9
            ok &= good
            print(f"(a) {arch} model {k}: one float64 step, vmap ensemble vs plain trainer: max |diff| "
                  f"{err:.2e} {'ok' if good else 'FAIL'}")
    return ok


def write_cifar10(root: Path, n_train: int, n_test: int, seed: int = 0) -> None:
    """CIFAR-10 files in torchvision's on-disk layout (pickled batches), with learnable class prototypes,
    so check (b) goes through bnmem's real CIFAR loader."""
    import pickle

    rng = np.random.default_rng(seed)
    protos = rng.integers(0, 256, (10, 3072))
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = n_test if name == "test_batch" else n_train // 5
        y = rng.integers(0, 10, n)
        data = np.clip(protos[y] + rng.normal(0, 40, (n, 3072)), 0, 255).astype(np.uint8)
        with open(folder / name, "wb") as f:
            pickle.dump({b"batch_label": b"synthetic", b"data": data, b"labels": [int(v) for v in y]}, f, protocol=2)


def check_study(device: str, tiny: bool, out: Path) -> bool:
    """(b) a CIFAR-shaped study with every lens end to end on the device, through the real data loader and
    study runner; each failed job's error and the last lines of its traceback are printed."""
    from bnmem.errors import BnmemError
    from bnmem.report.build import build_report
    from bnmem.study import Study, run_study

    write_cifar10(out / "data", n_train=80 if tiny else 2000, n_test=40 if tiny else 500)
    epochs = 1 if tiny else 3
    study = Study.model_validate({
        "name": "gpu-check", "data": {"dataset": "cifar10", "data_root": str(out / "data")}, "arch": "resnet20",
        "train": {"epochs": epochs, "batch_size": 32 if tiny else 128, "device": device},
        "grid": {"norms": ["batch", "none"], "seeds": [0], "outliers": [{"label_noise": 0.05}]},
        "lenses": {"memorize": {}, "gradnorms": {"at": [1, epochs], "definitions": ["eval", "batch"]},
                   "gamma-sigma": {}, "mitigate": {"lambdas": [1.0], "fixed_epoch": epochs, "lira_models": 4},
                   "lira": {"shadow_models": 6 if tiny else 16, "views": ["identity"], "matched_fit": True},
                   "rmia": {}, "theory": {}},
    })
    t0 = time.perf_counter()
    try:
        result = run_study(study, out / "study", progress=False)
        failed, n_jobs = result.failed, len(result.jobs)
    except BnmemError as e:
        print(f"(b) {e}")
        failed, n_jobs = [{"id": "?"}], 0
    seconds = time.perf_counter() - t0
    for err in sorted((out / "study").glob("*/*/ERROR.txt")):
        print(f"(b) FAILED {err.parent.relative_to(out / 'study')}:\n" + "\n".join(err.read_text().splitlines()[-12:]))
    ok = not failed and build_report(out / "study").html.exists()
    print(f"(b) CIFAR-shaped study (every lens, BN vs none) on {device}: {n_jobs} jobs in {seconds:.1f} s, "
          f"report written: {'ok' if ok else 'FAIL'}")
    return ok


def measure_throughput(device: str, tiny: bool) -> None:
    """(c) shadow models/s, ensemble vs one by one, and the chunk size the memory sizing chose."""
    from bnmem.train import ensemble
    from bnmem.train.ensemble import train_models

    n = 32 if tiny else 2048
    k = 2 if tiny else 16
    ds = synthetic(n, 8, (3, 32, 32), 10, torch.float32)
    cfg = TrainConfig(epochs=1, batch_size=16 if tiny else 128, device=device, threads=1)
    mc = ModelConfig(arch="resnet20", norm="batch")
    seeds, idx = list(range(k)), [np.arange(n)] * k
    dev = torch.device(device)
    chunk = ensemble._max_chunk(dev, ds, cfg.batch_size, torch.float32, "vmap")
    rates = {}
    for method in ("vmap", "sequential"):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_models(mc, ds, cfg, seeds, idx, method=method, progress=False)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        rates[method] = k / (time.perf_counter() - t0)
    mem = f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB" if dev.type == "cuda" else ""
    print(f"(c) ResNet-20, {n} CIFAR-shaped examples, 1 epoch, {k} models on {device}: ensemble (vmap) "
          f"{rates['vmap']:.2f} models/s vs one by one {rates['sequential']:.2f} models/s "
          f"(ratio {rates['vmap'] / rates['sequential']:.2f}x); chunk sizing chose {chunk} models per chunk{mem}")


LIRA_CELL = {"arch": "resnet20", "shadow_models": 8, "epochs": 2, "batch_size": 256, "outliers": {"label_noise": 0.01}}


def check_lira_cell(device: str, tiny: bool, out: Path) -> dict | None:
    """(d) one CIFAR-10 LiRA cell through ``bnmem run --set train.device=DEVICE``; its time per shadow model."""
    import yaml

    n_train, n_test = (100, 40) if tiny else (50_000, 10_000)
    models, epochs = (4, 1) if tiny else (LIRA_CELL["shadow_models"], LIRA_CELL["epochs"])
    write_cifar10(out / "data", n_train=n_train, n_test=n_test, seed=1)
    study = {
        "name": "gpu-lira-cell", "data": {"dataset": "cifar10", "data_root": str(out / "data")},
        "arch": LIRA_CELL["arch"],
        "train": {"epochs": epochs, "batch_size": 32 if tiny else LIRA_CELL["batch_size"], "augment": "crop-flip"},
        "grid": {"norms": ["batch", "none"], "seeds": [0], "outliers": [LIRA_CELL["outliers"]]},
        "lenses": {"lira": {"shadow_models": models, "chunk_size": models, "epochs": epochs}},
    }
    path = out / "gpu-lira-cell.yaml"
    path.write_text(yaml.safe_dump(study))
    run_dir = out / "lira-cell"
    cmd = [sys.executable, "-m", "bnmem", "run", str(path), "--out", str(run_dir), "--workers", "1", "--quiet",
           "--set", f"train.device={device}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                         os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    chunks = [json.loads(p.read_text()) for p in sorted(run_dir.glob("*/lira/*/shadow/*/DONE"))]
    trained = sum(len(c["models"]) for c in chunks)
    ok = proc.returncode == 0 and trained == 2 * models
    if not ok:
        print(f"(d) CIFAR-10 LiRA cell on {device}: FAIL (exit {proc.returncode}, {trained} of {2 * models} "
              f"shadow models trained)\n{proc.stderr[-2000:]}")
        return None
    per_model = {c["norm"]: c["seconds"] / len(c["models"]) for c in chunks}
    result = {
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device,
        "arch": LIRA_CELL["arch"], "train_examples": n_train, "test_examples": n_test, "epochs": epochs,
        "batch_size": study["train"]["batch_size"], "shadow_models_per_norm": models,
        "train_s_per_shadow_model": per_model,
        "train_s_per_shadow_model_epoch": {k: v / epochs for k, v in per_model.items()},
        "cell_wall_s": seconds, "all_in_s_per_shadow_model": seconds / (2 * models),
        "torch": torch.__version__,
    }
    print(f"(d) CIFAR-10 LiRA cell ({n_train:,} training images, {LIRA_CELL['arch']}, BN and none, {models} shadow "
          f"models per norm, {epochs} epoch{'s' if epochs > 1 else ''}, 18 query views) via `bnmem run --set train.device={device}`: ok in "
          f"{seconds:.1f} s; training "
          + ", ".join(f"{k} {v:.2f} s per shadow model ({v / epochs:.2f} s per epoch)" for k, v in per_model.items())
          + f"; all-in {result['all_in_s_per_shadow_model']:.2f} s per shadow model")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (tiny sizes)")
    parser.add_argument("--out", type=Path, default=None, help="where the study of check (b) goes (default: temp)")
    parser.add_argument("--json", type=Path, default=None, help="write check (d)'s numbers to this file")
    parser.add_argument("--only", choices=["abc", "d"], default=None, help="run only checks a-c, or only d")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run with --device cpu for the tiny CPU version", file=sys.stderr)
        return 2
    tiny = args.device == "cpu"
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        ok = True
        if args.only != "d":
            ok &= check_one_step(args.device, tiny)
            ok &= check_study(args.device, tiny, out)
            measure_throughput(args.device, tiny)
        if args.only != "abc":
            cell = check_lira_cell(args.device, tiny, out)
            ok &= cell is not None
            if cell is not None and args.json:
                args.json.write_text(json.dumps(cell, indent=2) + "\n")
    print("gpu_check: all checks passed" if ok else "gpu_check: a check FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
