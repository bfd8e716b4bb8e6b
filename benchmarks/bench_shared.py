"""The demo's shared training jobs, before/after side by side: CPU seconds per job and per hook.

A shared job (:mod:`bnmem.study.share`) trains one cell's seeds of one norm with every
lens's per-epoch hook. This runs the demo's flip cell (``digits-lenet-flip0.05-r0``,
studies/demo.yaml as it is) BN then no-norm shared job in a fresh process per way,
the ways alternating ``--repeats`` times; each way's best CPU time counts (the
development machine is shared). Ways:

* ``before``: glibc's malloc defaults;
* ``after``: :func:`bnmem.allocator.keep_freed_memory`, as every study job now calls it.

Per job: CPU seconds (user + system of the job, imports and the dataset load not
counted), its system seconds and minor page faults, and the CPU seconds of each hook
(claim 7's push pass, the gradient norms' batch and eval definitions, the per-epoch
subset accuracies, the γ/σ statistics, the hand-out to the lens folders); the rest
is the grouped network's training. The last lines say whether both ways wrote
byte-identical lens files (every file but the DONE markers, which hold seconds) and
``ratio_<norm>=X`` (before / after).

Run: ``.venv/bin/python benchmarks/bench_shared.py [--repeats 2]``
"""

from __future__ import annotations

import argparse
import collections
import filecmp
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CELL = "digits-lenet-flip0.05-r0"
NORMS = ("batch", "none")
STUDY = Path(__file__).resolve().parents[1] / "studies" / "demo.yaml"


def _timed(spent: collections.Counter, mod, name: str, label) -> None:
    """Wrap ``mod.name`` to add its CPU seconds to ``spent[label(*args, **kwargs)]``."""
    fn = getattr(mod, name)

    def wrapped(*a, **k):
        t0 = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            spent[label(*a, **k)] += time.process_time() - t0

    setattr(mod, name, wrapped)


def child(way: str, out: Path) -> None:
    """One way in this process: both shared jobs, one JSON line per job."""
    import torch

    import bnmem.lenses.gamma_sigma as gsl
    import bnmem.lenses.gradnorms as gnl
    import bnmem.lenses.mitigate as mit
    import bnmem.study.share as share
    import bnmem.train.ensemble_runs as er
    from bnmem.allocator import keep_freed_memory
    from bnmem.study.run import load_study, build_jobs

    torch.set_num_threads(1)
    if way == "after":
        keep_freed_memory()
    spent: collections.Counter = collections.Counter()
    _timed(spent, gsl, "gamma_pushes", lambda *a, **k: "push pass")
    _timed(spent, gnl, "per_sample_grad_norms", lambda *a, **k: f"gradnorms {k['definition']}")
    _timed(spent, er, "subset_accuracies", lambda *a, **k: "subset accuracies")
    _timed(spent, gsl, "gamma_sigma_stats", lambda *a, **k: "γ/σ statistics")
    _timed(spent, mit, "gamma_sigma_stats", lambda *a, **k: "γ/σ statistics")
    _timed(spent, share, "give_run", lambda *a, **k: "hand-out")
    _, jobs = build_jobs(load_study(STUDY))
    from bnmem.data import load_dataset

    for norm in NORMS:
        job = next(j for j in jobs if j.id == f"{CELL}/_shared/{norm}")
        load_dataset(job.work.trains.data)  # imports, reads the raw digits once: not the job's cost
        spent.clear()
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
        share.run_shared_training(job.at(out).work)
        total, r1 = time.process_time() - t0, resource.getrusage(resource.RUSAGE_SELF)
        print(json.dumps({"norm": norm, "cpu": total, "sys": r1.ru_stime - r0.ru_stime,
                          "faults": r1.ru_minflt - r0.ru_minflt, "hooks": dict(spent)}), flush=True)


def _same_files(a: Path, b: Path) -> tuple[int, list[str]]:
    """Files compared and those that differ (or exist on one side only), DONE markers left out."""
    files = {p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.name != "DONE"}
    other = {p.relative_to(b) for p in b.rglob("*") if p.is_file() and p.name != "DONE"}
    differ = sorted(str(p) for p in files ^ other)
    differ += sorted(str(p) for p in files & other if not filecmp.cmp(a / p, b / p, shallow=False))
    return len(files | other), differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", choices=("before", "after"))
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.child:
        return child(args.child, Path(args.out))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    best: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for way in (("before", "after") if r % 2 == 0 else ("after", "before")):
                out = Path(tmp) / way
                shutil.rmtree(out, ignore_errors=True)
                lines = subprocess.run([sys.executable, __file__, "--child", way, "--out", str(out)], env=env,
                                       check=True, capture_output=True, text=True).stdout.splitlines()
                for rec in map(json.loads, (ln for ln in lines if ln.startswith("{"))):
                    key = (way, rec["norm"])
                    if key not in best or rec["cpu"] < best[key]["cpu"]:
                        best[key] = rec
        n, differ = _same_files(Path(tmp) / "before", Path(tmp) / "after")
    for norm in NORMS:
        b, a = best[("before", norm)], best[("after", norm)]
        print(f"shared job {CELL}/{norm}: CPU s    before {b['cpu']:6.2f}   after {a['cpu']:6.2f}")
        for k in sorted(set(b["hooks"]) | set(a["hooks"]), key=lambda k: -b["hooks"].get(k, 0.0)):
            print(f"  {k:22s}          {b['hooks'].get(k, 0.0):6.2f}          {a['hooks'].get(k, 0.0):6.2f}")
        rest = {w: r["cpu"] - sum(r["hooks"].values()) for w, r in (("b", b), ("a", a))}
        print(f"  {'training and the rest':22s}          {rest['b']:6.2f}          {rest['a']:6.2f}")
        print(f"  {'system time':22s}          {b['sys']:6.2f}          {a['sys']:6.2f}")
        print(f"  {'minor page faults':22s}       {b['faults']:9d}       {a['faults']:9d}")
    print(f"lens files of both ways: {n} compared, {'byte-identical' if not differ else 'DIFFERENT: ' + ', '.join(differ)}")
    print(f"best of {args.repeats} per way, fresh process each, 1 thread")
    print(" ".join(f"ratio_{norm}={best[('before', norm)]['cpu'] / best[('after', norm)]['cpu']:.2f}" for norm in NORMS))


if __name__ == "__main__":
    main()
