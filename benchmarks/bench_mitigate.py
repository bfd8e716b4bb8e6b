"""One mitigate job of the demo, phase by phase: main's code before this change vs now, side by side.

The job is the demo's mitigate lens in its label-noise cell of replicate 0 (studies/demo.yaml: digits
LeNet, 5% flipped labels, λ ∈ {1, 10}, fixed epoch 10, 4 LiRA shadow models per recipe, 1 evaluation
and 1 selection seed, norms batch/none, 20 epochs, one torch thread), run as a study runs it: the
plain runs on the evaluation seed (batch and none, seed 0) arrive finished (in a study from the shared
job; here trained once beforehand with mitigate's hook), and the lens trains the other 5 BN runs
together (one grouped network, padded to 8 with 3 throw-away twins), selects λ, trains and attacks the
shadow models of 3 recipes and draws its figure.

Ways:

- ``before``: the grouped engine as on main: the γ/σ regularizer's batch σ (a variance per BN channel
  and step) computed for every member of a network in which any model is regularized — plain BN's
  run and the twins too, whose penalty is then multiplied by λ = 0 or never read;
- ``after``: only for the regularized models (:attr:`bnmem.train.ensemble_grouped.GroupedLeNet.penalized`).

Both ways run in one process, alternating, ``--repeats`` times (after one untimed warm-up job: imports,
first-call costs); each phase's best CPU time counts (this machine is shared; a one-thread job's CPU
time is its wall time on an idle machine). Every json, npy, npz and model file the two ways write is
compared byte for byte; the last line says whether they are identical.

First, robust to a loaded machine: the job's grouped BN network alone, milliseconds per training step
each way (40 steps, best of ``max(3, --repeats)``); then the whole job phase by phase.

Usage::

    .venv/bin/python benchmarks/bench_mitigate.py [--repeats 2] [--steps-only] [--lira-together]

``--lira-together`` also times what was tried and not adopted: two LiRA recipes' shadow models (plain BN
and BN + λ) trained as one grouped network of 8 instead of two of 4. The models are bitwise the same,
but the grouped engine's cost is linear in its members here, so it saves nothing measurable.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import functools
import importlib
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterator

from bnmem.data import load_dataset
from bnmem.lenses import mitigate
from bnmem.lenses.runs import train_runs
from bnmem.train.ensemble_grouped import GroupedLeNet

# (label, module, function): the phases timed; indented labels are parts of the one above.
PHASES = (
    ("variant runs (5 BN runs together)", "bnmem.lenses.runs", "train_fresh_together"),
    ("  of which: subset accuracies (hook)", "bnmem.train.ensemble_runs", "subset_accuracies"),
    ("  of which: γ/σ statistics (hook)", "bnmem.measure.gamma_sigma", "gamma_sigma_stats"),
    ("selection (validation predictions)", "bnmem.lenses.mitigate", "_select"),
    ("LiRA, 3 recipes", "bnmem.shadow.evaluate", "run_shadow_norm"),
    ("  of which: shadow training", "bnmem.shadow.training", "train_shadow_models"),
    ("  of which: queries", "bnmem.shadow.query", "query_models"),
    ("  of which: attacks", "bnmem.shadow.evaluate", "attack_norm"),
    ("privacy-utility figure", "bnmem.figures.privacy_utility", "plot_privacy_utility"),
)
# Modules that imported a timed function by name: their reference is wrapped too.
ALIASES = {"train_fresh_together": ("bnmem.lenses.mitigate",), "gamma_sigma_stats": ("bnmem.lenses.mitigate",),
           "run_shadow_norm": ("bnmem.shadow",), "train_shadow_models": ("bnmem.shadow.evaluate",),
           "query_models": ("bnmem.shadow.evaluate",), "plot_privacy_utility": ("bnmem.lenses.mitigate",)}


def _config() -> mitigate.MitigateConfig:
    """The demo's mitigate job in digits-lenet-flip0.05-r0, as the study plans it."""
    from bnmem.study.run import load_study, build_jobs

    job = next(j for j in build_jobs(load_study("studies/demo.yaml"))[1] if j.id == "digits-lenet-flip0.05-r0/mitigate")
    return mitigate.MitigateConfig.model_validate(job.config)


def _instrument(spent: dict[str, float]) -> None:
    """Wrap every phase's function so that its CPU seconds add up in ``spent``."""
    for label, module, name in PHASES:
        mod = importlib.import_module(module)
        fn = getattr(mod, name)

        @functools.wraps(fn)
        def timed(*a: Any, _fn: Callable = fn, _label: str = label, **k: Any) -> Any:
            t0 = time.process_time()
            try:
                return _fn(*a, **k)
            finally:
                spent[_label] += time.process_time() - t0

        for m in (module, *ALIASES.get(name, ())):
            setattr(importlib.import_module(m), name, timed)


@contextlib.contextmanager
def _main_engine() -> Iterator[None]:
    """The grouped engine as on main: σ of every member whenever any member is regularized."""
    init = GroupedLeNet.__init__

    def every_member(self: GroupedLeNet, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        self.penalized = None
        self.lam = float(self.lams.max()) if self.kind == "batch" else 0.0

    GroupedLeNet.__init__ = every_member
    try:
        yield
    finally:
        GroupedLeNet.__init__ = init


def _variant_network(cfg: mitigate.MitigateConfig, ds: Any) -> tuple[list, list[float], int]:
    """The members, λ per member and twin count of the job's grouped BN network (as ``_train_chunk`` pads it)."""
    from bnmem.train.ensemble import GROUPED_MULTIPLE, _initial_model

    fresh = [(v, s) for v, s in mitigate.grouped_runs(cfg) if v.norm == "batch" and (v.lam > 0 or s not in cfg.seeds)]
    twins = [i % len(fresh) for i in range(-len(fresh) % GROUPED_MULTIPLE)]
    runs = fresh + [fresh[i] for i in twins]
    members = [_initial_model(cfg.model("batch"), ds, s, None, ds.x_train.device, ds.x_train.dtype) for _, s in runs]
    return members, [v.lam for v, _ in runs], len(twins)


def step_times(cfg: mitigate.MitigateConfig, repeats: int, steps: int = 40) -> dict[str, float]:
    """Milliseconds per training step of the job's grouped BN network, each way (best of ``repeats``)."""
    import copy

    import torch

    from bnmem.threads import torch_threads

    ds = load_dataset(cfg.data)
    members, lams, twins = _variant_network(cfg, ds)
    gen = torch.Generator().manual_seed(0)
    sels = [torch.randint(0, ds.n_train, (len(members), cfg.train.batch_size), generator=gen) for _ in range(steps)]
    with torch_threads(1), _main_engine():
        before = GroupedLeNet(copy.deepcopy(members), ds.x_train, ds.y_train, lams, cfg.train.gs_tau, twins=twins)
    after = GroupedLeNet(copy.deepcopy(members), ds.x_train, ds.y_train, lams, cfg.train.gs_tau, twins=twins)
    best = {"before": float("inf"), "after": float("inf")}
    with torch_threads(1):
        for _ in range(repeats):
            for way, engine in (("before", before), ("after", after)):
                t0 = time.process_time()
                for sel in sels:
                    engine.losses_and_grads(sel)
                best[way] = min(best[way], (time.process_time() - t0) / steps * 1000)
    return best


def lira_recipes_together(cfg: mitigate.MitigateConfig, repeats: int) -> dict[str, Any]:
    """Tried, not adopted: the shadow models of plain BN and of BN + λ (the first λ) as one grouped network of
    8 (per-model λ) instead of two networks of 4 (as :func:`bnmem.shadow.run_shadow_norm` trains each recipe).

    Returns:
        Best CPU seconds of each way and whether the 8 models are bitwise the same.
    """
    import numpy as np
    import torch

    from bnmem.attacks import keep_matrix
    from bnmem.threads import torch_threads
    from bnmem.train.ensemble import _fit, _initial_model, _write_back, train_models
    from bnmem.train.ensemble_optim import StackedOptimizer, weight_decay_by_name

    ds = load_dataset(cfg.data)
    keep = keep_matrix(cfg.lira_models, ds.n_train, cfg.keep_seed)
    idx = [np.flatnonzero(k) for k in keep]
    seeds = list(range(cfg.lira_models))
    mc, plain = cfg.model("batch"), cfg.train
    reg = plain.model_copy(update={"gs_reg": cfg.lambdas[0]})

    def apart() -> list:
        return train_models(mc, ds, plain, seeds, idx, progress=False) + train_models(mc, ds, reg, seeds, idx,
                                                                                      progress=False)

    def together() -> list:
        with torch_threads(1):
            models = [_initial_model(mc, ds, s, None, torch.device("cpu"), ds.x_train.dtype) for s in seeds + seeds]
            engine = GroupedLeNet(models, ds.x_train, ds.y_train, [0.0] * len(seeds) + [reg.gs_reg] * len(seeds),
                                  plain.gs_tau)
            opt = StackedOptimizer(engine.params, weight_decay_by_name(models[0], plain), plain)
            rows = [torch.as_tensor(a) for a in idx]
            _fit(engine, opt, rows + rows, seeds + seeds, plain, torch.device("cpu"), lambda *_: None)
            _write_back(engine, models)
        return [m.to(memory_format=torch.channels_last) for m in models]

    best, out = {"apart": float("inf"), "together": float("inf")}, {}
    for _ in range(repeats):
        for way, fn in (("apart", apart), ("together", together)):
            t0 = time.process_time()
            out[way] = fn()
            best[way] = min(best[way], time.process_time() - t0)
    same = all(torch.equal(a, b) for x, y in zip(out["apart"], out["together"])
               for a, b in zip(x.state_dict().values(), y.state_dict().values()))
    return {**best, "bitwise": same}


def _job(cfg: mitigate.MitigateConfig, plain: Path, out: Path, spent: dict[str, float], way: str) -> float:
    """Run the job into ``out`` (the plain runs copied from ``plain``); its CPU seconds."""
    shutil.rmtree(out, ignore_errors=True)
    for norm in cfg.norms:
        shutil.copytree(plain / norm / f"seed{cfg.seeds[0]}", out / norm / f"seed{cfg.seeds[0]}")
    spent.clear()
    t0 = time.process_time()
    if way == "before":
        with _main_engine():
            mitigate.run_mitigate(cfg, out, progress=False)
    else:
        mitigate.run_mitigate(cfg, out, progress=False)
    return time.process_time() - t0


def _same_files(a: Path, b: Path) -> tuple[int, list[str]]:
    """Files compared and those that differ (json/npy/npz/pt: every number the job writes)."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.suffix in (".json", ".npy", ".npz", ".pt")
                   and p.name != "environment.json")
    differ = [str(f) for f in files if not (b / f).exists() or not filecmp.cmp(a / f, b / f, shallow=False)]
    return len(files), differ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps-only", action="store_true", help="only the per-step times of the grouped BN network")
    ap.add_argument("--lira-together", action="store_true",
                    help="also time two LiRA recipes' shadow models as one network (tried, not adopted)")
    args = ap.parse_args()
    cfg = _config()
    ms = step_times(cfg, max(3, args.repeats))
    members, lams, twins = _variant_network(cfg, load_dataset(cfg.data))
    print(f"grouped BN network of the job ({len(members)} members: λ {lams}, the last {twins} throw-away twins), "
          f"ms per step, best of {max(3, args.repeats)}: before {ms['before']:.2f}, after {ms['after']:.2f}, "
          f"saved {ms['before'] - ms['after']:.2f}", flush=True)
    steps = cfg.train.epochs * (load_dataset(cfg.data).n_train // cfg.train.batch_size)
    print(f"  x {steps} steps per job: {steps * (ms['before'] - ms['after']) / 1000:.2f} s of CPU saved per job",
          flush=True)
    if args.lira_together:
        r = lira_recipes_together(cfg, args.repeats)
        print(f"LiRA shadow models of plain BN and BN + λ={cfg.lambdas[0]:g} ({cfg.lira_models} each), CPU s, best of "
              f"{args.repeats}: two networks of {cfg.lira_models} {r['apart']:.2f}, one of {2 * cfg.lira_models} "
              f"{r['together']:.2f}; models bitwise the same: {r['bitwise']}", flush=True)
    if args.steps_only:
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-mitigate-"))
    try:
        plain = tmp / "plain"
        train_runs(cfg, load_dataset(cfg.data), plain, hook=mitigate.hook, progress=False)
        spent: dict[str, float] = defaultdict(float)
        _instrument(spent)
        _job(cfg, plain, tmp / "warm-up", spent, "after")
        best: dict[str, dict[str, float]] = {w: defaultdict(lambda: float("inf")) for w in ("before", "after")}
        for r in range(args.repeats):
            for way in ("before", "after"):
                total = _job(cfg, plain, tmp / way, spent, way)
                print(f"repeat {r}: {way:6s} job cpu {total:6.2f} s", flush=True)
                for label, _, _ in PHASES:
                    best[way][label] = min(best[way][label], spent[label])
                best[way]["job total"] = min(best[way]["job total"], total)
        print(f"\nmitigate job, digits-lenet-flip0.05-r0, best of {args.repeats} (CPU seconds)")
        print(f"{'phase':40s} {'before':>8s} {'after':>8s} {'saved':>8s}")
        for label in [p[0] for p in PHASES] + ["job total"]:
            b, a = best["before"][label], best["after"][label]
            print(f"{label:40s} {b:8.2f} {a:8.2f} {b - a:8.2f}")
        n, differ = _same_files(tmp / "before", tmp / "after")
        print(f"outputs: {n} files compared, " + ("all byte-identical" if not differ else f"DIFFER: {differ}"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
