"""Check the accelerator path end to end, and measure it: one call of at most 8 minutes on one H100/H200.

On a CUDA machine (``python benchmarks/gpu_check.py --json gpu-check.json``):

(a) one training step of every many-models engine against one-by-one training on the device, in float64:
    ResNet-20, DenseNet and the fast pair (vmap; grouped where it exists), BN; every parameter and BN
    buffer must agree to 1e-9;
(b) (only with ``--checks b``: about 3 minutes) a small CIFAR-shaped study with every lens, BN vs none, end
    to end through the real data loader and ``run_study``;
(c) training images/s per GPU, CIFAR-shaped (3x32x32) synthetic data, batch 256, 2,048 images per model,
    one epoch after a warm-up run: ResNet-20 and the fast pair, BN and no norm, one model after another
    (4 models) against the engines (vmap and grouped convolutions over stacked models, with the chunk the
    memory sizing chooses, at most 96 models), each in bf16 autocast and float32, plus the memory-format
    variants (vmap channels_last on, one by one channels_last off) and, with ``--compile``,
    ``train.compile`` one by one and grouped for the BN networks; each run's sized chunk, its estimated
    and its peak GPU memory; the winner per architecture and norm (what
    :data:`bnmem.train.ensemble.ACCELERATOR_METHOD` should record). Variants run in priority order (each
    variant over the four networks, then the next) and none starts after ``--throughput-budget`` seconds
    (default 200), so the call fits its 8 minutes;
(d) one CIFAR-10-sized LiRA cell with 64 shadow models per arm (BN and none; 50,000 training and 10,000
    test images in torchvision's on-disk format with synthetic content, written by this script: the
    device machine cannot download, so **accuracy is not measured here**) through ``bnmem run`` in this
    process (``--workers 1``) from studies/cifar10-fast.yaml with ``train.device`` set to the device, at
    ``--cell-epochs`` epochs (default 2) and the query views ``--cell-views`` (default identity and
    flip): the cell's wall time, the training time per shadow model and epoch (the training chunks' DONE
    markers), the rest per shadow model (queries, attacks, figures, loading), the peak GPU memory. The
    preset's full cell (16 epochs, 18 views) then takes roughly 128 x (16 x the training per model and
    epoch + 9 x the rest per model), counting the rest as queries proportional to the views (an upper
    estimate: the attacks and loading do not grow with the views).

``--json FILE`` writes (c)'s rows and (d)'s numbers (``benchmarks/docs_numbers.py --gpu-cell FILE`` records
them in docs/numbers.json with their source). ``--device cpu`` runs (a), (c) and (d) at tiny sizes (8x8
images, a few models; tests/test_gpu_check.py runs it), so the script cannot rot without a GPU. Prints one
line per check or measurement and exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bnmem.config import ModelConfig, TrainConfig
from bnmem.data.dataset import OutlierDataset

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "studies" / "cifar10-fast.yaml"


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


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_gib(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None


def _reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# ---------------------------------------------------------------- (a)


def check_one_step(device: str, tiny: bool) -> bool:
    """(a) every engine vs the plain trainer, one step, float64."""
    from bnmem.train.ensemble import train_models
    from bnmem.train.trainer import seeded_model, train_model

    n = 8 if tiny else 64
    ds = synthetic(n, 8, (3, 8, 8) if tiny else (3, 32, 32), 10, torch.float64)
    cfg = TrainConfig(epochs=1, batch_size=n, lr=0.05, device=device, threads=1)
    seeds, idx = [0, 1], [np.arange(n)] * 2
    ok = True
    for arch, methods in (("resnet20", ("vmap", "grouped")), ("densenet", ("vmap",)),
                          ("fastnet", ("vmap", "grouped"))):
        mc = ModelConfig(arch=arch, norm="batch")
        refs = [train_model(seeded_model(mc, ds, s).to(torch.float64), ds, cfg, s, train_idx=idx[k], measure=False,
                            progress=False).model for k, s in enumerate(seeds)]
        for method in methods:
            got = train_models(mc, ds, cfg, seeds, idx, method=method, progress=False)
            err = max((a.double() - b.double()).abs().max().item() for ref, mod in zip(refs, got)
                      for a, b in zip(ref.state_dict().values(), mod.state_dict().values()) if a.is_floating_point())
            good = err <= 1e-9
            ok &= good
            print(f"(a) {arch} BN, {method} engine vs one by one: one float64 step, max |diff| {err:.2e} "
                  f"{'ok' if good else 'FAIL'}", flush=True)
    return ok


# ---------------------------------------------------------------- (b)


def write_cifar10(root: Path, n_train: int, n_test: int, seed: int = 0) -> None:
    """CIFAR-10 files in torchvision's on-disk layout (pickled batches), with learnable class prototypes,
    so checks (b) and (d) go through bnmem's real CIFAR loader."""
    import pickle

    rng = np.random.default_rng(seed)
    protos = rng.integers(0, 256, (10, 3072))
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
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

    write_cifar10(out / "data-b", n_train=80 if tiny else 2000, n_test=40 if tiny else 500)
    epochs = 1 if tiny else 3
    study = Study.model_validate({
        "name": "gpu-check", "data": {"dataset": "cifar10", "data_root": str(out / "data-b")}, "arch": "resnet20",
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
          f"report written: {'ok' if ok else 'FAIL'}", flush=True)
    return ok


# ---------------------------------------------------------------- (c)

# (method, precision, channels_last): the variants measured per architecture and norm, the core ones (every
# method at bf16 and float32) first, so that a run cut short by the time budget still has them.
VARIANTS = [
    ("sequential", "bf16", "auto"), ("vmap", "bf16", "auto"), ("grouped", "bf16", "auto"),
    ("sequential", "float32", "auto"), ("vmap", "float32", "auto"), ("grouped", "float32", "auto"),
    ("vmap", "bf16", "on"), ("sequential", "bf16", "off"),
]
CASES = [("resnet20", "batch"), ("fastnet", "batch"), ("fastnet", "none"), ("resnet20", "none")]
# Models per engine run in (c): the sizing's chunk, at most this many (enough to fill a GPU with these
# networks; the run stays a few seconds). One by one: 4 models.
MAX_MODELS = 96


def _plan(device: str, compile_too: bool) -> list[tuple[str, str, str, str, str, str]]:
    """(arch, norm, method, precision, channels_last, compile) in the order they are measured: each variant
    over the four networks before the next variant."""
    rows = [v for v in VARIANTS if device != "cpu" or v[1] == "float32"]  # bf16 on the CPU: tests/test_precision
    out = [(a, n, m, p, c, "off") for m, p, c in rows for a, n in CASES]
    if compile_too:  # compilation takes about a minute per network (expected): BN only
        out += [(a, "batch", m, "bf16", "auto", "default") for m in ("sequential", "grouped")
                for a in ("resnet20", "fastnet")]
    return out


def _timed_run(mc: ModelConfig, ds: OutlierDataset, cfg: TrainConfig, k: int, method: str, device: str) -> float:
    """Seconds to train k models for one epoch over ds (after the caller's warm-up)."""
    from bnmem.train.ensemble import train_models

    idx = [np.arange(ds.n_train)] * k
    _sync(device)
    t0 = time.perf_counter()
    train_models(mc, ds, cfg, list(range(k)), idx, method=method, progress=False)
    _sync(device)
    return time.perf_counter() - t0


def measure_throughput(device: str, tiny: bool, compile_too: bool, budget_s: float) -> list[dict]:
    """(c) training images/s per GPU: one by one vs the engines, per architecture, norm and precision; variants
    not started within ``budget_s`` seconds are listed as skipped."""
    from bnmem.train import ensemble, sizing
    from bnmem.train.precision import autocast_dtype
    from bnmem.train.trainer import seeded_model

    shape = (3, 8, 8) if tiny else (3, 32, 32)
    n = 16 if tiny else 2048
    batch = 16 if tiny else 256
    ds = synthetic(n, 8, shape, 10, torch.float32)
    warm = synthetic(batch * 2, 8, shape, 10, torch.float32, seed=1)
    dev = torch.device(device)
    rows: list[dict] = []
    started = time.perf_counter()
    for arch, norm, method, precision, layout, compiled in _plan(device, compile_too):
        mc = ModelConfig(arch=arch, norm=norm)
        label = (f"{arch:8} {norm:5} {method:10} {precision:7} channels_last={layout:4}"
                 + ("" if compiled == "off" else f" compile={compiled}"))
        key = {"arch": arch, "norm": norm, "method": method, "precision": precision, "channels_last": layout,
               "compiled": compiled}
        if time.perf_counter() - started > budget_s:
            print(f"(c) {label}: skipped (the check's time budget for (c), {budget_s:.0f} s, is spent)")
            rows.append({**key, "skipped": True})
            continue
        cfg = TrainConfig(epochs=1, batch_size=batch, lr=0.02, device=device, threads=1, precision=precision,
                          channels_last=layout, compile=compiled)
        try:
            template = seeded_model(mc, ds, 0).to(dev)
            if method == "sequential":
                k, chunk, est = (2 if tiny else 4), 1, None
            else:
                engine = ensemble.grouped_engine(template) if method == "grouped" else None
                chunk = ensemble._max_chunk(dev, template, shape, cfg, torch.float32, method,
                                            engine or ensemble.GroupedLeNet)
                k = 2 if tiny else max(2, min(chunk, MAX_MODELS))
                est = sizing.model_bytes(template, shape, batch, torch.float32, cfg.optimizer, cfg.momentum,
                                         autocast_dtype(cfg, dev))
            if not tiny:  # cuDNN's algorithm choice, the allocator's first blocks, compilation
                _timed_run(mc, warm, cfg, k, method, device)
            _reset_peak(device)
            seconds = _timed_run(mc, ds, cfg, k, method, device)
        except Exception as e:  # a variant that fails on this device is reported, not fatal
            print(f"(c) {label}: FAILED ({type(e).__name__}: {str(e).splitlines()[0][:160]})", flush=True)
            rows.append({**key, "error": str(e)[:500]})
            continue
        peak = _peak_gib(device)
        per_net = min(k, chunk)
        row = {**key, "models": k, "chunk": chunk, "images_per_s": k * n / seconds, "seconds": seconds,
               "peak_gib": peak, "estimated_gib": None if est is None else est.total * per_net / 2**30}
        rows.append(row)
        mem = "" if peak is None else f", peak {peak:.2f} GiB"
        if est is not None and peak is not None:
            mem += f" (estimated {row['estimated_gib']:.2f} GiB for {per_net} models)"
        print(f"(c) {label}: {row['images_per_s']:,.0f} images/s ({k} models x {n} images, sized chunk {chunk}"
              f"{mem})", flush=True)
    for arch, norm in CASES:
        got = {(r["method"], r["precision"], r["channels_last"], r["compiled"]): r["images_per_s"]
               for r in rows if r["arch"] == arch and r["norm"] == norm and "images_per_s" in r}
        one = [v for (m, *_), v in got.items() if m == "sequential"]
        if not got or not one:
            print(f"(c) {arch} {norm}: no verdict (one by one or every engine missing)")
            continue
        best = max(got, key=got.get)
        print(f"(c) {arch} {norm}: best {best[0]} ({best[1]}, channels_last={best[2]}, compile={best[3]}) "
              f"{got[best]:,.0f} images/s = {got[best] / max(one):.2f}x the best one by one ({max(one):,.0f})",
              flush=True)
    return rows


# ---------------------------------------------------------------- (d)


def check_lira_cell(device: str, tiny: bool, out: Path, epochs: int, views: list[str]) -> dict | None:
    """(d) one CIFAR-10-sized LiRA cell with 64 shadow models per arm from the preset, through ``bnmem run``."""
    import yaml

    from bnmem.cli import main as bnmem_main

    n_train, n_test = (40, 20) if tiny else (50_000, 10_000)
    models = 4 if tiny else 64  # LiRA needs at least 4
    write_cifar10(out / "data-d", n_train=n_train, n_test=n_test, seed=1)
    study = yaml.safe_load(PRESET.read_text())
    study["data"]["data_root"] = str(out / "data-d")
    study["train"].update({"epochs": epochs, "device": device})
    if tiny:
        study["train"].update({"batch_size": 8, "precision": "float32"})
    study["lenses"]["lira"].update({"shadow_models": models, "chunk_size": models, "epochs": epochs,
                                    "views": views})
    # One cell of one recipe: the preset's lira cell as the paper's protocol (fair arms add each setting's
    # recipe selection and a second cell of the same size; the check times the shadow models, not the selection).
    study["grid"]["recipes"] = ["shared"]
    path = out / "gpu-lira-cell.yaml"
    path.write_text(yaml.safe_dump(study))
    run_dir = out / "lira-cell"
    _reset_peak(device)
    t0 = time.perf_counter()
    code = bnmem_main(["run", str(path), "--out", str(run_dir), "--workers", "1", "--quiet"])
    _sync(device)
    seconds = time.perf_counter() - t0
    chunks = [json.loads(p.read_text()) for p in sorted(run_dir.glob("*/lira/*/shadow/*/DONE"))]
    trained = sum(len(c["models"]) for c in chunks)
    if code != 0 or trained != 2 * models:
        print(f"(d) CIFAR-10 LiRA cell on {device}: FAIL (exit {code}, {trained} of {2 * models} shadow models "
              f"trained)")
        for err in sorted(run_dir.glob("**/ERROR.txt")):
            print("\n".join(err.read_text().splitlines()[-12:]))
        return None
    per_model: dict[str, float] = {}
    for c in chunks:
        per_model[c["norm"]] = per_model.get(c["norm"], 0.0) + c["seconds"] / models
    peak = _peak_gib(device)
    result = {
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device,
        "arch": study["arch"], "preset": str(PRESET.relative_to(ROOT)), "train_examples": n_train,
        "test_examples": n_test, "epochs": epochs, "views": views, "batch_size": study["train"]["batch_size"],
        "precision": study["train"].get("precision", "float32"), "shadow_models_per_norm": models,
        "train_s_per_shadow_model": per_model,
        "train_s_per_shadow_model_epoch": {k: v / epochs for k, v in per_model.items()},
        "cell_wall_s": seconds, "all_in_s_per_shadow_model": seconds / (2 * models),
        "rest_s_per_shadow_model": (seconds - sum(per_model.values()) * models) / (2 * models), "peak_gib": peak,
        "accuracy_measured": False, "data": "synthetic, torchvision's CIFAR-10 on-disk format",
        "torch": torch.__version__,
    }
    mem = "" if peak is None else f"; peak GPU memory {peak:.2f} GiB"
    print(f"(d) CIFAR-10-sized LiRA cell ({n_train:,} training images, synthetic: accuracy not measured; "
          f"{study['arch']}, BN and none, {models} shadow models per arm, {epochs} epoch{'s' if epochs > 1 else ''}, "
          f"views {','.join(views)}) via `bnmem run` on {device}: ok in {seconds:.1f} s; training "
          + ", ".join(f"{k} {v / epochs:.2f} s per shadow model and epoch" for k, v in per_model.items())
          + f"; all-in {result['all_in_s_per_shadow_model']:.2f} s per shadow model{mem}", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (tiny sizes)")
    parser.add_argument("--out", type=Path, default=None, help="where checks (b) and (d) write (default: temp)")
    parser.add_argument("--json", type=Path, default=None, help="write (c)'s rows and (d)'s numbers to this file")
    parser.add_argument("--checks", default="acd", help="which checks to run, e.g. acd (default), abcd, d")
    parser.add_argument("--compile", action="store_true",
                        help="(c) also measures train.compile for the BN networks, one by one and grouped (minutes)")
    parser.add_argument("--throughput-budget", type=float, default=200,
                        help="(c) starts no measurement after this many seconds (default 200)")
    parser.add_argument("--cell-epochs", type=int, default=2, help="(d)'s epochs per shadow model (default 2)")
    parser.add_argument("--cell-views", default="identity,flip", help="(d)'s query views (default identity,flip)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run with --device cpu for the tiny CPU version", file=sys.stderr)
        return 2
    tiny = args.device == "cpu"
    torch.set_num_threads(1)
    started = time.perf_counter()
    record: dict = {"source": "python benchmarks/gpu_check.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                    "date": datetime.date.today().isoformat(), "torch": torch.__version__,
                    "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device}
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        ok = True
        if "a" in args.checks:
            ok &= check_one_step(args.device, tiny)
        if "b" in args.checks:
            ok &= check_study(args.device, tiny, out)
        if "c" in args.checks:
            record["throughput"] = measure_throughput(args.device, tiny, args.compile, args.throughput_budget)
        if "d" in args.checks:
            cell = check_lira_cell(args.device, tiny, out, 1 if tiny else args.cell_epochs,
                                   args.cell_views.split(","))
            ok &= cell is not None
            if cell is not None:
                record.update(cell)  # flat: benchmarks/docs_numbers.py --gpu-cell reads these keys
    record["check_wall_s"] = time.perf_counter() - started
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"gpu_check: {'all checks passed' if ok else 'a check FAILED'} in {record['check_wall_s']:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
