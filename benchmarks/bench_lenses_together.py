"""Per lens: its runs trained one by one (the plain trainer, ``train_run``) vs together through the ensemble
engine (``train_fresh_together``), side by side in one process.

Cases (digits, 5% label noise, a 10% validation split, batch 64, lr 0.05, SGD momentum 0.9, weight decay
5e-4, one torch thread; model seeds 0 and 1, as a decisive-study cell trains them):

- ``gamma-sigma-lenet`` / ``gamma-sigma-resnet20``: the gamma-sigma lens's BN runs with its per-epoch hook
  (γ/σ statistics; the outliers' and everyone's push on every γ and the gradient norms of claim 7, every
  epoch), LeNet and ResNet-20 (the decisive study runs the lens on both);
- ``lenet-training`` / ``resnet20-training``: the same runs without the hook (the engine's own share; the
  trainer's per-epoch subset accuracies stay);
- ``memorize-per-norm``: memorize's per-norm runs (BN at lr 0.05, no norm at lr 0.1: each norm's selected
  learning rate), with the plain trainer's per-epoch subset accuracies;
- ``gamma-sigma-lenet-2-replicates`` / ``lenet-training-2-replicates``: the gamma-sigma runs of two
  replicates of the setting (different data) in one network (``train_runs_together(datasets=...)``; no study
  job does this yet), with and without the hook;
- ``shared``: one shared job of the demo's label-noise cell (BN, every lens's hook: memorize, gradnorms,
  gamma-sigma, mitigate), the job :mod:`bnmem.study.share` runs.

(mitigate's runs: ``benchmarks/bench_runs_together.py``.) Each case alternates the two ways ``--repeats``
times; the best CPU time of each counts (this machine is shared; a one-thread run's CPU time is its wall time
on an idle machine). One line per case: ``<case>: one by one X s (hooks H), together Y s (hooks H'),
ratio=R`` (above 1: together is faster); H is the CPU time inside the lenses' per-epoch hooks, which run on
each model either way, so the engine can only shorten the rest.

Measured (``--epochs 10 --repeats 2``, this 2-core machine at load ~12, CPU seconds one by one / together,
of which the hooks): gamma-sigma-lenet 6.2 / 5.8 (hooks 4.6 / 4.6), ratio 1.07; lenet-training 1.3 / 1.2,
1.11; gamma-sigma-resnet20 72.8 / 73.7 (hooks 63.0 / 63.8), 0.99; resnet20-training 9.4 / 9.1, 1.03;
memorize-per-norm 2.5 / 2.3, 1.08; gamma-sigma-lenet-2-replicates 10.5 / 8.8 (hooks 7.8 / 7.4), 1.20;
lenet-training-2-replicates 2.7 / 1.4, 2.00; shared 11.7 / 11.3 (hooks 10.3 / 10.3), 1.03. The hooks are
most of every lens's time (claim 7's push pass: 3.0 s per ResNet-20 model and epoch against 0.31 s of
training), and two LeNet runs fill only half of a network of 4 (throw-away twins pad it; two replicates
fill it: 2.00).

Usage::

    .venv/bin/python benchmarks/bench_lenses_together.py [--epochs 5] [--repeats 2] [--cases gamma-sigma-lenet ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.lenses.runs import PendingRun, train_fresh_together, train_run
from bnmem.threads import torch_threads

SEEDS = [0, 1]
DATA = DataConfig(dataset="digits", label_noise=0.05, val_fraction=0.1, seed=0)


def _recipe(epochs: int, lr: float = 0.05) -> TrainConfig:
    return TrainConfig(epochs=epochs, batch_size=64, lr=lr, momentum=0.9, weight_decay=5e-4, threads=1)


# CPU seconds spent inside the lenses' per-epoch hooks (the measurements, per model either way).
HOOK_CPU = [0.0]


def _timed(hook: Callable | None) -> Callable | None:
    if hook is None:
        return None

    def timed(epoch: int, model: Any) -> dict | None:
        c0 = time.process_time()
        try:
            return hook(epoch, model)
        finally:
            HOOK_CPU[0] += time.process_time() - c0

    return timed


def _train(runs: list[tuple[ModelConfig, PendingRun]], together: bool, ds: Any = None) -> None:
    """Train the runs (grouped by model config) one by one or together, as the lenses do (hooks timed)."""
    ds = load_dataset(DATA) if ds is None else ds
    runs = [(mc, dataclasses.replace(r, make_hook=(lambda m=r.make_hook: _timed(m())) if r.make_hook else None))
            for mc, r in runs]
    if together:
        for key in dict.fromkeys((mc.arch, mc.norm) for mc, _ in runs):
            group = [(mc, r) for mc, r in runs if (mc.arch, mc.norm) == key]
            assert len(train_fresh_together(group[0][0], ds, [r for _, r in group])) == len(group)
    for mc, r in runs:
        train_run(mc, ds, r.train, r.seed, r.job, r.make_hook)  # one by one, or read back


def _gamma_sigma(arch: str, hooks: bool) -> Callable[[int, Path, bool], None]:
    def run(epochs: int, out: Path, together: bool) -> None:
        from bnmem.lenses.gamma_sigma import GammaSigmaConfig, measure_hook

        cfg = GammaSigmaConfig(data=DATA, arch=arch, seeds=SEEDS, train=_recipe(epochs))
        ds = load_dataset(DATA)
        _train([(cfg.model("batch"), PendingRun(s, cfg.train, out / f"seed{s}",
                                                (lambda s=s: measure_hook(cfg, ds, None, s)) if hooks else None))
                for s in SEEDS], together)

    return run


def _replicates(arch: str, hooks: bool, n: int = 2) -> Callable[[int, Path, bool], None]:
    """gamma-sigma's runs of ``n`` replicates of the setting (replicate r: data seed r, model seeds 1000r and
    1000r + 1), one by one or all in one network (``train_runs_together(datasets=...)``: each run on its own
    replicate's data)."""

    def run(epochs: int, out: Path, together: bool) -> None:
        from bnmem.lenses.gamma_sigma import GammaSigmaConfig, measure_hook
        from bnmem.train.ensemble_runs import train_runs_together

        runs = []
        for r in range(n):
            data = DATA.model_copy(update={"seed": r})
            cfg = GammaSigmaConfig(data=data, arch=arch, seeds=[1000 * r, 1000 * r + 1], train=_recipe(epochs))
            ds = load_dataset(data)
            runs += [(cfg, ds, s, _timed(measure_hook(cfg, ds, None, s)) if hooks else None) for s in cfg.seeds]
        mc = runs[0][0].model("batch")
        if together:
            train_runs_together(mc, runs[0][1], [c.train for c, *_ in runs], [s for _, _, s, _ in runs],
                                [out / f"run{k}" for k in range(len(runs))], [h for *_, h in runs],
                                datasets=[d for _, d, _, _ in runs])
        else:
            for k, (cfg, ds, s, h) in enumerate(runs):
                train_run(mc, ds, cfg.train, s, out / f"run{k}", (lambda h=h: h) if h else None)

    return run


def _memorize_per_norm(epochs: int, out: Path, together: bool) -> None:
    _train([(ModelConfig(arch="lenet", norm=norm), PendingRun(s, _recipe(epochs, lr), out / norm / f"seed{s}"))
            for norm, lr in (("batch", 0.05), ("none", 0.1)) for s in SEEDS], together)


def _shared(epochs: int, out: Path, together: bool) -> None:
    from bnmem.study.run import load_study, build_jobs
    from bnmem.study.share import _seed_hook

    at = [e for e in (1, 2, 3, 4, 5, 10, 20) if e <= epochs]
    study = load_study("studies/demo.yaml", [f"train.epochs={epochs}", f"lenses.mitigate.fixed_epoch={min(10, epochs)}",
                                              f"lenses.gradnorms.at={at}", "grid.seeds=[0, 1]"])
    job = next(j for j in build_jobs(study)[1] if j.id == "digits-lenet-flip0.05-r0/_shared/batch")
    shared = job.at(out).work
    ds = load_dataset(shared.trains.data)
    train = shared.trains.train
    mc = ModelConfig(arch=shared.trains.arch, norm="batch")
    _train([(mc, PendingRun(s, train, out / "_runs" / f"seed{s}", lambda s=s: _seed_hook(shared, ds, s)))
            for s in shared.seeds], together, ds)


CASES: dict[str, Callable[[int, Path, bool], None]] = {
    "gamma-sigma-lenet": _gamma_sigma("lenet", True),
    "lenet-training": _gamma_sigma("lenet", False),
    "gamma-sigma-resnet20": _gamma_sigma("resnet20", True),
    "resnet20-training": _gamma_sigma("resnet20", False),
    "memorize-per-norm": _memorize_per_norm,
    "gamma-sigma-lenet-2-replicates": _replicates("lenet", True),
    "lenet-training-2-replicates": _replicates("lenet", False),
    "shared": _shared,
}


def _cpu(fn: Callable[[int, Path, bool], None], epochs: int, together: bool) -> tuple[float, float]:
    """The way's CPU seconds, and those spent in the hooks."""
    out = Path(tempfile.mkdtemp(prefix="bench-lenses-"))
    try:
        HOOK_CPU[0] = 0.0
        c0 = time.process_time()
        with torch_threads(1):
            fn(epochs, out, together)
        return time.process_time() - c0, HOOK_CPU[0]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    args = ap.parse_args()
    import torch._dynamo  # noqa: F401  - the first SGD optimizer imports it (seconds): not either way's cost

    load_dataset(DATA)  # warm the dataset cache and the kernels' first calls out of both ways' times
    lines = []
    for case in args.cases:
        best = {False: (float("inf"), 0.0), True: (float("inf"), 0.0)}
        for r in range(args.repeats):
            for together in (False, True):
                t, hooks = _cpu(CASES[case], args.epochs, together)
                print(f"  {case} repeat {r}: {'together  ' if together else 'one by one'} cpu {t:6.1f} s "
                      f"(hooks {hooks:5.1f} s)", flush=True)
                best[together] = min(best[together], (t, hooks))
        (one, one_hooks), (tog, tog_hooks) = best[False], best[True]
        lines.append(f"{case}: one by one {one:.1f} s (hooks {one_hooks:.1f}), together {tog:.1f} s "
                     f"(hooks {tog_hooks:.1f}), ratio={one / tog:.2f}")
    print(f"{len(SEEDS)} seeds x {args.epochs} epochs, best of {args.repeats} (CPU time):")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
