"""Runs trained one by one vs together (the grouped engine with per-epoch hooks): mitigate's BN runs, or a
study's shared runs of one norm.

``--case mitigate`` (default): the demo's mitigate cell: digits LeNet-BN, 5% label noise, a 10%
validation split, batch 64, lr 0.05, SGD momentum 0.9, one torch thread; the
runs the lens trains together (:func:`bnmem.lenses.mitigate.grouped_runs`):
λ ∈ {1, 10} on evaluation seeds 0 and 1, plus plain BN and both λ on selection
seed 2 (7 runs). Every run records what the lens records each epoch (the
subset accuracies) and the γ/σ hook at the fixed and last epoch.

``--case shared``: one job of the demo's shared training (``bnmem.study.share``) in the label-noise cell of
replicate 0, for ``--norm`` (batch or none): its 2 seeds with every lens's hook (memorize's subset accuracies,
gradnorms' per-sample gradient norms at epochs 1-5, 10, 20 in the eval and batch definitions, gamma-sigma's
γ/σ and pushes every epoch, mitigate's γ/σ), one by one (``train_run``, as before) or together
(``train_fresh_together``, as now); ``--no-hooks`` leaves out the lenses' hooks (the training alone).

Both ways run in one process, alternating, ``--repeats`` times; each way's best
time counts. Times are the process's CPU time by default (this machine is
shared; a one-thread run's CPU time is its wall time on an idle machine);
``--clock wall`` uses wall time. Both are printed.

Usage::

    .venv/bin/python benchmarks/bench_runs_together.py [--epochs 20] [--repeats 2]
    .venv/bin/python benchmarks/bench_runs_together.py --case shared --norm batch [--no-hooks]

The last line reads ``ratio=X``: one-by-one time over together time (above 1:
together is faster), with the time of each way before it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.lenses.mitigate import MitigateConfig, gamma_sigma_hook, grouped_runs
from bnmem.threads import torch_threads
from bnmem.train import seeded_model, train_model
from bnmem.train.ensemble_runs import train_runs_together


def _jobs(epochs: int) -> tuple[MitigateConfig, list[TrainConfig], list[int]]:
    cfg = MitigateConfig(data=DataConfig(dataset="digits", label_noise=0.05, val_fraction=0.1), arch="lenet",
                         norms=["batch", "none"], seeds=[0, 1], lambdas=[1.0, 10.0], fixed_epoch=min(10, epochs),
                         train=TrainConfig(epochs=epochs, batch_size=64, lr=0.05, momentum=0.9, threads=1))
    runs = [(v, s) for v, s in grouped_runs(cfg) if v.norm == "batch" and v.lam > 0 or s not in cfg.seeds]
    recipes = [cfg.train.model_copy(update={"gs_reg": v.lam}) for v, _ in runs]
    return cfg, recipes, [s for _, s in runs]


def one_by_one(epochs: int) -> None:
    cfg, recipes, seeds = _jobs(epochs)
    ds = load_dataset(cfg.data)
    mc = ModelConfig(arch="lenet", norm="batch")
    for recipe, seed in zip(recipes, seeds):
        hook = gamma_sigma_hook(ds, {cfg.fixed_epoch, epochs}, recipe.batch_size, cfg.data.seed)
        train_model(seeded_model(mc, ds, seed), ds, recipe, seed, on_epoch=hook, progress=False)


def together(epochs: int) -> None:
    cfg, recipes, seeds = _jobs(epochs)
    ds = load_dataset(cfg.data)
    hooks = [gamma_sigma_hook(ds, {cfg.fixed_epoch, epochs}, r.batch_size, cfg.data.seed) for r in recipes]
    train_runs_together(ModelConfig(arch="lenet", norm="batch"), ds, recipes, seeds, [None] * len(seeds), hooks)


def _shared_spec(norm: str, epochs: int, out: str):
    """The demo's shared job of ``norm`` in digits-lenet-flip0.05-r0, with ``epochs`` (gradnorms' checkpoints
    past them dropped), its folders under ``out``."""
    from bnmem.study.run import load_study, build_jobs

    study = load_study("studies/demo.yaml", [f"train.epochs={epochs}",
                                              f"lenses.mitigate.fixed_epoch={min(10, epochs)}",
                                              f"lenses.gradnorms.at={[e for e in (1, 2, 3, 4, 5, 10, 20) if e <= epochs]}"])
    job = next(j for j in build_jobs(study)[1] if j.id == f"digits-lenet-flip0.05-r0/_shared/{norm}")
    return job.at(Path(out)).work


def _shared(norm: str, hooks: bool, together_: bool):
    def run(epochs: int) -> None:
        import shutil
        import tempfile

        from bnmem.config import ModelConfig
        from bnmem.lenses.runs import PendingRun, train_fresh_together, train_run
        from bnmem.study.share import _seed_hook

        out = tempfile.mkdtemp(prefix="bench-shared-")
        try:
            spec = _shared_spec(norm, epochs, out)
            ds = load_dataset(spec.trains.data)
            mc = ModelConfig(arch=spec.trains.arch, norm=norm)
            train = spec.trains.train
            runs = [PendingRun(s, train, Path(out) / "_runs" / f"seed{s}",
                               (lambda s=s: _seed_hook(spec, ds, s)) if hooks else None) for s in spec.seeds]
            if together_:
                train_fresh_together(mc, ds, runs)
            for r in runs:
                train_run(mc, ds, train, r.seed, r.job, r.make_hook)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    return run


def _time(fn, epochs: int) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    with torch_threads(1):
        fn(epochs)
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--case", choices=("mitigate", "shared"), default="mitigate")
    ap.add_argument("--norm", choices=("batch", "none"), default="batch", help="--case shared: the norm")
    ap.add_argument("--no-hooks", action="store_true", help="--case shared: train without the lenses' hooks")
    args = ap.parse_args()
    import torch._dynamo  # noqa: F401  - the first SGD optimizer imports it (seconds): not either way's cost
    best = {"one by one": (float("inf"), float("inf")), "together": (float("inf"), float("inf"))}
    ways = ((("one by one", one_by_one), ("together", together)) if args.case == "mitigate" else
            (("one by one", _shared(args.norm, not args.no_hooks, False)),
             ("together", _shared(args.norm, not args.no_hooks, True))))
    for r in range(args.repeats):
        for name, fn in ways:
            wall, cpu = _time(fn, args.epochs)
            print(f"repeat {r}: {name:10s} wall {wall:7.1f} s  cpu {cpu:7.1f} s", flush=True)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    i = 0 if args.clock == "wall" else 1
    runs = len(_jobs(args.epochs)[2]) if args.case == "mitigate" else 2
    if args.case == "shared":
        print(f"shared {args.norm} job ({'with' if not args.no_hooks else 'without'} the lenses' hooks)")
    print(f"{runs} runs x {args.epochs} epochs, best of {args.repeats} ({args.clock} time): "
          f"one by one {best['one by one'][i]:.1f} s, together {best['together'][i]:.1f} s")
    print(f"ratio={best['one by one'][i] / best['together'][i]:.2f}")


if __name__ == "__main__":
    main()
