"""A study's graph level by level vs each job as soon as it is ready: wall time and worker utilization, same
local workers.

Runs one study twice into fresh temporary directories with the local executor and ``--workers`` worker
processes: once level by level (``run_study(..., graph=False)``: a barrier after every level of the graph,
as one worker and Ray run it; before issue 37 the comparison was with a barrier after every stage and every
lira phase) and once as a graph (``graph=True``: each job as soon as what it reads is written, costliest
chain first). Every job is timed where it runs; *utilization* is the jobs' summed seconds over
(wall seconds x workers), and *ideal* is the summed seconds / workers (no idle worker). It then checks that
the two runs wrote the same bytes (json/csv/npy/npz/pt; DONE and environment.json record timing only).

On a machine others use too, the wall times mix the schedule with their load (a worker idling at a
barrier lends its core to them, and the jobs it waits for then run faster). So each run is also
*replayed* on idle workers: its measured job seconds, scheduled as that run schedules them (the stage
path's maps one after another, each job to the first free worker; the graph through the real
:class:`~bnmem.executors.graph.JobGraph`). The replay isolates what the schedule alone costs.

The default study is studies/demo.yaml made smaller (one replicate, 5 epochs, 8 shadow models; override
with ``--set``). On a shared machine the load average is printed so a reader can judge the contention.

Measured with bnmem 0.1.0 on the 2-core development machine, shared with other work (load average 1.4-3.1),
the default (demo.yaml with one replicate: 3 cells, 34 jobs and chunks, 5 epochs): stages 136.9 s wall,
utilization 0.86; graph 133.8 s, utilization 0.95 (its jobs took 8% longer under the load of the moment);
results identical (441 files). With the same job seconds on idle workers, stages 135.8 s and graph 120.9 s
(ideal 117.5 s): the schedule alone is 1.12x faster (1.22x with the graph run's seconds: 159.1 vs 130.5 s).
The whole demo (``--set grid.replicates=3``: 9 cells, 100 jobs and chunks, load average 1.9-2.1): stages
335.1 s wall, utilization 0.96; graph 322.5 s, utilization 0.99 (1.04x); results identical (1713 files);
with the same job seconds 334.4 vs 321.1 s, ideal 320.6 s. Its stages were already nearly full: the
demo's time is in its jobs (641 s of job time on 2 workers), not at the barriers.

Usage::

    .venv/bin/python benchmarks/bench_study_graph.py [--study studies/demo.yaml] [--workers 2] [--set KEY=VALUE ...]

The last line reads ``speedup=X utilization_stages=U1 utilization_graph=U2 replay_speedup=R`` (stage wall /
graph wall, measured and replayed).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from bnmem.executors.graph import JobGraph, Task
from bnmem.executors.local import LocalExecutor
from bnmem.study import load_study, run_study

ROOT = Path(__file__).resolve().parents[1]
SMALLER = ["grid.replicates=1", "train.epochs=5", "lenses.lira.shadow_models=8", "lenses.mitigate.lira_models=4",
           "lenses.mitigate.fixed_epoch=3",
           "lenses.gradnorms.at=[1,2,5]"]
RESULTS = (".json", ".csv", ".npy", ".npz", ".pt")


def timed(fn: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Run a job and add the seconds it took where it ran, and what names it in either run (its spec)."""
    t0 = time.perf_counter()
    out = fn(spec)
    key = json.dumps({k: v for k, v in spec.items() if k != "progress"}, sort_keys=True, default=str)
    return {**out, "bench_seconds": time.perf_counter() - t0, "bench_key": key}


class TimedExecutor(LocalExecutor):
    """The local executor, timing every job it runs (maps and graphs alike) and keeping what a replay needs:
    each map's job seconds in spec order, and each graph's tasks with their jobs' seconds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.maps: list[list[float]] = []
        self.graph: list[tuple[Task, list[float]]] = []
        self.map_keys: list[list[str]] = []  # each job's spec as text, to replay one run with the other's seconds
        self.graph_keys: list[list[str]] = []

    @property
    def busy(self) -> float:
        return sum(map(sum, self.maps)) + sum(sum(d) for _, d in self.graph)

    @property
    def jobs(self) -> int:
        return sum(map(len, self.maps)) + sum(len(d) for _, d in self.graph)

    def map(self, fn, specs, desc="jobs", resources=None):  # noqa: D102 - as LocalExecutor.map
        out = super().map(partial(timed, fn), specs, desc, resources)
        self.maps.append([float(s.get("bench_seconds", 0.0)) for s in out])
        self.map_keys.append([s.get("bench_key", "") for s in out])
        return out

    def run_graph(self, tasks, desc="jobs", resources=None, stop=None):  # noqa: D102 - as LocalExecutor
        timed_tasks = [Task(t.id, partial(timed, t.fn), t.specs, t.deps, t.after, t.cost) for t in tasks]
        out = super().run_graph(timed_tasks, desc, resources, stop)
        self.graph = [(t, [float(s.get("bench_seconds", 0.0)) for s in out.get(t.id, [])]) for t in tasks]
        self.graph_keys = [[s.get("bench_key", "") for s in out.get(t.id, [])] for t in tasks]
        return out


def replay_maps(maps: list[list[float]], workers: int) -> float:
    """Wall seconds of the maps one after another on idle workers (each job to the first free worker)."""
    total = 0.0
    for seconds in maps:
        free = [0.0] * workers
        for d in seconds:
            heapq.heapreplace(free, free[0] + d)
        total += max(free)
    return total


def replay_graph(graph: list[tuple[Task, list[float]]], workers: int) -> float:
    """Wall seconds of the graph on idle workers, scheduled by the real :class:`JobGraph` with the measured
    job seconds (a job a failure or a stop left unrun takes none)."""
    g = JobGraph([Task(t.id, t.fn, [{"s": d} for d in seconds], t.deps, t.after, t.cost) for t, seconds in graph])
    now, running = 0.0, []  # heap of (finish time, seq, task id, index)
    seq = 0
    while True:
        while len(running) < workers and (job := g.pop()) is not None:
            tid, i, _, spec = job
            heapq.heappush(running, (now + spec["s"], seq, tid, i))
            seq += 1
        if not running:
            return now
        now, _, tid, i = heapq.heappop(running)
        g.finish(tid, i, {})


def _cross(execs: dict[str, TimedExecutor], tmp: str, workers: int) -> str:
    """Both schedules replayed with the same job seconds (each run's in turn): the schedule's effect alone."""
    def norm(key: str) -> str:
        return key.replace(str(Path(tmp) / "stages"), "RUN").replace(str(Path(tmp) / "graph"), "RUN")

    st, gr = execs["stages"], execs["graph"]
    lines = []
    for source, ex in (("stage run", st), ("graph run", gr)):
        secs = {norm(k): d for keys, ds in ((ex.map_keys, ex.maps), (ex.graph_keys, [d for _, d in ex.graph]))
                for kk, dd in zip(keys, ds) for k, d in zip(kk, dd)}
        maps = [[secs.get(norm(k), 0.0) for k in keys] for keys in st.map_keys]
        graph = [(t, [secs.get(norm(k), 0.0) for k in keys]) for (t, _), keys in zip(gr.graph, gr.graph_keys)]
        missing = sum(norm(k) not in secs for keys in [*st.map_keys, *gr.graph_keys] for k in keys)
        a, b = replay_maps(maps, workers), replay_graph(graph, workers)
        lines.append(f"same seconds (the {source}'s, {len(secs)} jobs, {missing} unmatched): stages {a:.1f} s, "
                     f"graph {b:.1f} s, ideal {sum(secs.values()) / workers:.1f} s: schedule speedup {a / b:.2f}")
    return "\n".join(lines)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in RESULTS and p.name != "environment.json" and not p.name.startswith(".")}


def _one(study: Any, out: Path, workers: int, graph: bool) -> tuple[float, TimedExecutor]:
    ex = TimedExecutor(progress=False, workers=workers)
    try:
        t0 = time.perf_counter()
        run_study(study, out, executor=ex, progress=False, graph=graph)
        wall = time.perf_counter() - t0
    finally:
        ex.close()
    return wall, ex


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
    rows, replays, execs = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, graph in (("stages", False), ("graph", True)):
            wall, ex = _one(study, Path(tmp) / name, args.workers, graph)
            execs[name] = ex
            busy, jobs = ex.busy, ex.jobs
            rows[name] = (wall, busy)
            replays[name] = replay_graph(ex.graph, args.workers) if graph else replay_maps(ex.maps, args.workers)
            print(f"{name:6s}: wall {wall:7.1f} s, {jobs} jobs, {busy:7.1f} s of job time (ideal wall "
                  f"{busy / args.workers:6.1f} s), utilization {busy / (wall * args.workers):.2f}; "
                  f"load average {os.getloadavg()[0]:.1f}")
        a, b = _files(Path(tmp) / "stages"), _files(Path(tmp) / "graph")
        same = a.keys() == b.keys() and all(a[k] == b[k] for k in a)
        print(f"results identical: {same} ({len(a)} files)")
        print(_cross(execs, tmp, args.workers))
    (ws, bs), (wg, bg) = rows["stages"], rows["graph"]
    rs, rg = replays["stages"], replays["graph"]
    print(f"replay on {args.workers} idle workers with each run's measured job seconds (no other load): stages "
          f"{rs:.1f} s (utilization {bs / (rs * args.workers):.2f}), graph {rg:.1f} s (utilization "
          f"{bg / (rg * args.workers):.2f})")
    print(f"speedup={ws / wg:.2f} utilization_stages={bs / (ws * args.workers):.2f} "
          f"utilization_graph={bg / (wg * args.workers):.2f} replay_speedup={rs / rg:.2f}")


if __name__ == "__main__":
    main()
