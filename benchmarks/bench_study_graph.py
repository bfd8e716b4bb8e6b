"""A study stage by stage vs as a dependency graph: wall time and worker utilization, same local workers.

Runs one study twice into fresh temporary directories with the local executor and ``--workers`` worker
processes: once stage by stage (``run_study(..., graph=False)``: a barrier after every stage and every
lira phase) and once as a graph (``graph=True``: each job as soon as what it reads is written, costliest
chain first). Every job is timed where it runs; *utilization* is the jobs' summed seconds over
(wall seconds x workers), and *ideal* is the summed seconds / workers (no idle worker). It then checks that
the two runs wrote the same bytes (json/csv/npy/npz/pt; DONE and environment.json record timing only).

The default study is studies/demo.yaml made smaller (one replicate, 5 epochs, 8 shadow models; override
with ``--set``). On a shared machine the load average is printed so a reader can judge the contention.

Usage::

    .venv/bin/python benchmarks/bench_study_graph.py [--study studies/demo.yaml] [--workers 2] [--set KEY=VALUE ...]

The last line reads ``speedup=X utilization_stages=U1 utilization_graph=U2`` (stage wall / graph wall).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from bnmem.executors.graph import Task
from bnmem.executors.local import LocalExecutor
from bnmem.study import load_study, run_study

ROOT = Path(__file__).resolve().parents[1]
SMALLER = ["grid.replicates=1", "train.epochs=5", "lenses.lira.shadow_models=8", "lenses.mitigate.lira_models=4",
           "lenses.gradnorms.at=[1,2,5]"]
RESULTS = (".json", ".csv", ".npy", ".npz", ".pt")


def timed(fn: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Run a job and add the seconds it took where it ran."""
    t0 = time.perf_counter()
    out = fn(spec)
    return {**out, "bench_seconds": time.perf_counter() - t0}


class TimedExecutor(LocalExecutor):
    """The local executor, summing the seconds of every job it runs (maps and graphs alike)."""

    busy = 0.0
    jobs = 0

    def _count(self, summaries: list[dict[str, Any]]) -> None:
        for s in summaries:
            self.busy += float(s.get("bench_seconds", 0.0))
            self.jobs += 1

    def map(self, fn, specs, desc="jobs", resources=None):  # noqa: D102 - as LocalExecutor.map
        out = super().map(partial(timed, fn), specs, desc, resources)
        self._count(out)
        return out

    def run_graph(self, tasks, desc="jobs", resources=None, stop=None):  # noqa: D102 - as LocalExecutor
        tasks = [Task(t.id, partial(timed, t.fn), t.specs, t.deps, t.after, t.cost) for t in tasks]
        out = super().run_graph(tasks, desc, resources, stop)
        self._count([s for results in out.values() for s in results])
        return out


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in RESULTS and p.name != "environment.json" and not p.name.startswith(".")}


def _one(study: Any, out: Path, workers: int, graph: bool) -> tuple[float, float, int]:
    ex = TimedExecutor(progress=False, workers=workers)
    try:
        t0 = time.perf_counter()
        run_study(study, out, executor=ex, progress=False, graph=graph)
        wall = time.perf_counter() - t0
    finally:
        ex.close()
    return wall, ex.busy, ex.jobs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study", default=str(ROOT / "studies" / "demo.yaml"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--set", dest="overrides", action="append", default=None,
                   help="KEY=VALUE override (default: a smaller demo, see SMALLER)")
    args = p.parse_args()
    study = load_study(args.study, SMALLER if args.overrides is None else args.overrides)
    print(f"study {study.name} ({args.study}, overrides {args.overrides or SMALLER}); {args.workers} workers; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, graph in (("stages", False), ("graph", True)):
            wall, busy, jobs = _one(study, Path(tmp) / name, args.workers, graph)
            rows[name] = (wall, busy)
            print(f"{name:6s}: wall {wall:7.1f} s, {jobs} jobs, {busy:7.1f} s of job time (ideal wall "
                  f"{busy / args.workers:6.1f} s), utilization {busy / (wall * args.workers):.2f}; "
                  f"load average {os.getloadavg()[0]:.1f}")
        a, b = _files(Path(tmp) / "stages"), _files(Path(tmp) / "graph")
        same = a.keys() == b.keys() and all(a[k] == b[k] for k in a)
        print(f"results identical: {same} ({len(a)} files)")
    (ws, bs), (wg, bg) = rows["stages"], rows["graph"]
    print(f"speedup={ws / wg:.2f} utilization_stages={bs / (ws * args.workers):.2f} "
          f"utilization_graph={bg / (wg * args.workers):.2f}")


if __name__ == "__main__":
    main()
