"""A cell's finishing work, redone from its files: the attack evaluation of a lira norm, every lens figure
and the whole lira finishing job; seconds per call with this tree's code and with a git ref's (default ``main``), side by side in one run.

Both wall seconds and CPU seconds (user + sys of the process) are reported: on a shared machine the wall
clock counts other processes' time too, the CPU seconds are the work the call itself did.

Each piece is redone from what the lenses wrote (the lira norm directories, metrics.json, gradnorms.npz,
gamma_sigma.json), so no training runs; the ref's code is ``git archive``-d into a scratch directory and run in
a child process with the same inputs. Per figure the best of ``--repeat`` calls is reported (the machine may
be shared). Run::

    python benchmarks/bench_finishing.py runs/demo/digits-lenet-flip0.05-r0 [--ref main] [--repeat 3] \
        [--rounds 2] [--report runs/demo] [--theory runs/demo/theory]

``--theory`` also draws the toy-model figure (the study's theory.json gives the settings; the simulation is
rerun once per tree, untimed, about half a minute). The last line printed is a JSON summary: piece ->
{"before_s", "after_s", "ratio", "before_cpu_s", "after_cpu_s", "cpu_ratio"}.
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
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


class _Masks:
    """What plot_gradnorms reads of a dataset: its subset masks."""

    def __init__(self, z: Any) -> None:
        self._m = {"clean": z["is_clean"], "noisy": z["is_noisy"], "ood": z["is_ood"]}

    def masks(self) -> dict[str, np.ndarray]:
        return self._m


def _figures(cell: Path, scratch: Path) -> dict[str, Callable[[], None]]:
    """figure name -> a call that draws it into ``scratch`` from ``cell``'s files."""
    from types import SimpleNamespace

    from bnmem.attacks import spec as attack_spec
    from bnmem.figures.gallery import plot_gallery, plot_mem_distributions
    from bnmem.figures.gamma_sigma import plot_gamma_sigma
    from bnmem.figures.gradnorms import plot_gradnorms
    from bnmem.figures.memorization import plot_memorization
    from bnmem.figures.privacy_utility import plot_privacy_utility
    from bnmem.figures.roc import plot_lira_roc
    from bnmem.shadow.evaluate import attack_norm

    out: dict[str, Callable[[], None]] = {}
    lira = cell / "lira"
    norms = json.loads((lira / "config.json").read_text())["norms"]
    out["evaluation (attack_norm, one norm)"] = lambda: attack_norm(lira / norms[0])
    res = {n: attack_norm(lira / n) for n in norms}
    entries = {n: {"attacks": r["metrics"], "curves": r["curves"]} for n, r in res.items()}
    out["roc (plot_lira_roc)"] = lambda: plot_lira_roc(entries, scratch / "roc.png", attack_spec.default_attacks(),
                                                       title="bench")
    mem = {n: np.load(lira / n / "mem_scores.npz") for n in norms}
    key = sorted(k for k in mem[norms[0]].files if k.startswith("mem_"))[0]
    outl = np.load(lira / norms[0] / "is_noisy.npy") | np.load(lira / norms[0] / "is_ood.npy")
    dists = {"all": {n: mem[n][key] for n in norms}, "outliers": {n: mem[n][key][outl] for n in norms}}
    out["mem_scores (plot_mem_distributions)"] = lambda: plot_mem_distributions(dists, scratch / "d.png", "bench")
    rng = np.random.default_rng(0)
    rows = {n: [(rng.uniform(size=(8, 8, 1)), f"#{i} mem 0.99\ngiven 1, orig 2") for i in range(8)] for n in norms}
    out["mem_gallery (plot_gallery)"] = lambda: plot_gallery(rows, scratch / "g.png", title="bench")
    z = np.load(cell / "gradnorms" / "gradnorms.npz")
    gcfg = json.loads((cell / "gradnorms" / "config.json").read_text())
    ns = SimpleNamespace(definitions=gcfg["definitions"], at=gcfg["at"], norms=gcfg["norms"], seeds=gcfg["seeds"],
                         arch=gcfg["arch"], data=SimpleNamespace(**gcfg["data"]))
    out["gradnorms (plot_gradnorms)"] = lambda: plot_gradnorms(z["gradnorms"], ns, _Masks(z), scratch / "n.png")
    gs = json.loads((cell / "gamma-sigma" / "gamma_sigma.json").read_text())
    out["gamma_sigma (plot_gamma_sigma)"] = lambda: plot_gamma_sigma(gs, scratch / "s.png", title="bench")
    mz = json.loads((cell / "memorize" / "metrics.json").read_text())
    mm = {n: mz[n] for n in json.loads((cell / "memorize" / "config.json").read_text())["norms"]}
    out["memorization (plot_memorization)"] = lambda: plot_memorization(mm, scratch / "m.png", title="bench")
    mt = json.loads((cell / "mitigate" / "metrics.json").read_text())
    mkey = "noisy_acc" if mt["dataset"].get("n_noisy", 1) else "ood_acc"
    out["privacy_utility (plot_privacy_utility)"] = lambda: plot_privacy_utility(mt, scratch / "p.png", mkey,
                                                                                title="bench")
    return out


def _report(run: Path, scratch: Path) -> Callable[[], None]:
    """``bnmem report`` of a copy of the study ``run`` (its *.pt files left out), with the power cache emptied."""
    import shutil

    from bnmem.report import power
    from bnmem.report.build import build_report

    copy = scratch / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("*.pt"))

    def build() -> None:
        getattr(power, "_exact_power_cached").cache_clear()  # else every call after the first reads the cache
        build_report(copy)

    return build


def _lira_finish(cell: Path, scratch: Path) -> Callable[[], None]:
    """The lira lens's finishing job: ``run_lira`` resumed on a copy of the cell's finished lira directory (its
    DONE removed; shadow models and queries are there, so it evaluates, writes metrics.json and draws). The
    copy is part of each call (the same for both trees)."""
    import shutil

    from bnmem.lenses.lira.config import LiraConfig
    from bnmem.lenses.lira.run import run_lira

    def finish() -> None:
        dst = scratch / "lira"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(cell / "lira", dst)
        (dst / "DONE").unlink()
        run_lira(LiraConfig(**json.loads((dst / "config.json").read_text())), dst, progress=False)

    return finish


def _theory(theory: Path, scratch: Path) -> Callable[[], None]:
    """The toy-model figure (``plot_theory``) of the settings in ``theory``/theory.json; the simulation and the
    counterfactual runs are done here, once, outside the timed calls."""
    from bnmem.figures.theory import plot_theory
    from bnmem.theory.config import TheoryConfig
    from bnmem.theory.summary import summarize
    from bnmem.theory.trajectories import counterfactual_runs, simulate

    cfg = TheoryConfig(**json.loads((theory / "theory.json").read_text())["config"])
    sim = simulate(cfg)
    runs = counterfactual_runs(cfg)
    summary = summarize(sim)
    return lambda: plot_theory(sim, summary, runs, scratch / "theory.png")


def _best(draw: Callable[[], None], repeat: int) -> tuple[float, float]:
    """Best-of-``repeat`` wall and CPU seconds of ``draw()`` (each minimum on its own), after one warm call
    (imports, font cache)."""
    draw()
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        draw()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu


def child(cell: Path, repeat: int, report: Path | None = None,
          theory: Path | None = None) -> dict[str, tuple[float, float]]:
    """Best-of-``repeat`` (wall, CPU) seconds per piece with the code on ``sys.path``."""
    with tempfile.TemporaryDirectory(prefix="bench-finishing-") as tmp:
        pieces = _figures(cell, Path(tmp))
        if theory is not None:
            pieces["theory (plot_theory)"] = _theory(theory, Path(tmp))
        pieces["lira finishing (run_lira resumed on a copy)"] = _lira_finish(cell, Path(tmp))
        if report is not None:
            pieces["report (build_report of the study)"] = _report(report, Path(tmp))
        return {name: _best(draw, repeat) for name, draw in pieces.items()}


def _run(src: Path, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), str(args.cell), "--child", "--repeat", str(args.repeat)]
    cmd += [] if args.report is None else ["--report", str(args.report)]
    cmd += [] if args.theory is None else ["--theory", str(args.theory)]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _best_of(runs: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per piece, the least wall and the least CPU seconds over the rounds' children."""
    return {name: (min(r[name][0] for r in runs), min(r[name][1] for r in runs)) for name in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cell", type=Path, help="a finished cell directory (lira, gradnorms, gamma-sigma, memorize, "
                                            "mitigate inside)")
    ap.add_argument("--ref", default="main", help="the git ref whose code is 'before'")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="alternate the ref's child and this tree's this often")
    ap.add_argument("--report", type=Path, default=None, help="also time `bnmem report` of this study run (a copy)")
    ap.add_argument("--theory", type=Path, default=None, help="also time the toy-model figure of this theory "
                                                              "directory's settings")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.cell, args.repeat, args.report, args.theory)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-finishing-ref-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.ref, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        # Rounds alternate the two trees, so a load that comes and goes on a shared machine weighs on both.
        rounds = [(_run(Path(tmp) / "src", args), _run(ROOT / "src", args)) for _ in range(args.rounds)]
    before, after = (_best_of([r[i] for r in rounds]) for i in (0, 1))
    summary = {}
    for name in after:
        (b, bc), (a, ac) = before[name], after[name]
        summary[name] = {"before_s": round(b, 3), "after_s": round(a, 3), "ratio": round(b / a, 2),
                         "before_cpu_s": round(bc, 3), "after_cpu_s": round(ac, 3), "cpu_ratio": round(bc / ac, 2)}
        print(f"{name:44s} {args.ref}: {b:6.2f} s ({bc:5.2f} CPU)   this tree: {a:6.2f} s ({ac:5.2f} CPU)   "
              f"x{b / a:.2f} (CPU x{bc / ac:.2f})")
    cpu_b = sum(before[n][1] for n in after if "(plot_" in n)
    cpu_a = sum(after[n][1] for n in after if "(plot_" in n)
    print(f"{'all figures (CPU s)':44s} {args.ref}: {cpu_b:6.2f}   this tree: {cpu_a:6.2f}   x{cpu_b / cpu_a:.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
