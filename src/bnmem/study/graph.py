"""A study's jobs as one dependency graph, which every executor runs (local worker processes as soon as a job
is ready; one local worker and Ray level by level): no barrier between stages.

Each job starts as soon as what it reads has been written, the costliest chain first
(:mod:`bnmem.executors.graph`). The edges are what each job reads that another writes:

* a shared-training job (``<cell>/_shared/<norm>``) writes finished ``<norm>/seed<k>`` runs into the
  folders of the lenses it serves (memorize, gradnorms, gamma-sigma, mitigate of its cell): each of those
  lens jobs runs after it. Only after: if it failed, the lens trains the run itself;
* a lens whose cell work has tasks (lira: :class:`~bnmem.shadow.work.ShadowWork`, built once per cell from the
  config :func:`~bnmem.study.run.build_jobs` validated) gives its own tasks: a per-norm cell's recipe selection,
  training chunks, query chunks, each needing the one before and listed from what is on disk when it is
  ready; the lens job itself runs after the last (failed or not: it retries what is missing and reports the
  failure);
* a per-norm cell's lens jobs (and a lira cell's first phase) run after their setting's recipe selection
  (``<cell-r0>/_recipe``, :mod:`bnmem.study.recipes`), which they read;
* theory, and every lens job of a cell that has no shared run or selection to read, need nothing.

No lens reads another lens's folder, and a cell reads nothing of another cell but its setting's selection, so
these are all the edges.
Jobs fix their own threads and seeds: the results are the same bytes whichever executor runs the graph, and
in whichever order (tests/test_study_graph.py).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from bnmem.executors.graph import Task
from bnmem.study.run import Job, run_job

# What a study's local worker processes import once, in the fork server (bnmem.executors.local), instead of
# once per worker (~5 of the ~6.5 CPU seconds of a worker's imports; workers still import sklearn, which
# loads pandas and pyarrow, whose jemalloc starts a background thread: no fork after that). A module
# here must start no thread besides the BLAS pools (tests/test_local_executor.py checks).
WORKER_PRELOAD = (
    "bnmem.cli",  # the `bnmem` script each worker runs as its main module
    "torch", "torch._dynamo",  # torch.optim's first optimizer imports torch._dynamo
    "scipy.stats", "scipy.special", "scipy.integrate", "matplotlib.pyplot",
    "bnmem.study.run", "bnmem.lenses.runs", "bnmem.train.ensemble_runs", "bnmem.data.sources",
    "bnmem.measure.gamma_push", "bnmem.measure.gradnorms", "bnmem.figures.memorization", "bnmem.figures.roc",
    "bnmem.figures.privacy_utility", "bnmem.figures.gradnorms", "bnmem.figures.gamma_sigma",
)


def study_tasks(jobs: list[Job], todo: list[Job], estimate: bool = True) -> list[Task]:
    """The graph of the unfinished jobs ``todo`` (of ``jobs``, bound to the run directory): their cell works'
    tasks and their order, read from the works alone.

    A finished job has no task; what waits for it may start at once. ``estimate``: rank the tasks by the jobs'
    estimated seconds (:func:`bnmem.study.cost.estimate_seconds`, which times a few training steps: ~6 CPU
    seconds, most of them torch's first optimizer); False: every job costs 1 (a graph run level by level
    runs every ready job anyway; the ranks then only order those of one level).
    """
    from bnmem.study.cost import estimate_seconds

    est = estimate_seconds(jobs) if estimate else {}
    pending_ids = {j.id for j in todo}
    needs = {j.id: tuple(a for a in j.after if a in pending_ids) for j in jobs}  # e.g. the setting's recipes
    writers: dict[Path, list[str]] = {}  # a job's folder -> unfinished jobs that write runs into it
    for j in todo:
        for folder in j.work.writes_into():
            writers.setdefault(Path(folder), []).append(j.id)
    tasks = []
    for j in todo:
        cost, after = est.get(j.id, 1.0), list(writers.get(Path(j.work.out), []))
        chain = j.work.tasks(j.id, cost)
        if chain:
            if needs[j.id]:  # the cell's first phase lists its work from the selection: after it
                chain[0] = replace(chain[0], after=(*chain[0].after, *needs[j.id]))
            tasks += chain
            after.append(chain[-1].id)
            cost *= j.work.lens_share
        else:
            after += needs[j.id]
        tasks.append(Task(j.id, run_job, [j], after=tuple(after), cost=cost))
    return tasks


def run_graph(jobs: list[Job], todo: list[Job], executor: Any, resources: dict[str, Any],
              name: str, level_by_level: bool = False) -> list[dict[str, Any]]:
    """Run the unfinished jobs ``todo`` (of ``jobs``, bound to the run directory) as one graph over ``executor``,
    under one progress bar over every job and chunk; ``level_by_level``: as any executor's default ``run_graph``
    does (every ready job, a barrier, the jobs that became ready...), whatever ``executor`` would do.

    Returns:
        The summary of each job of ``todo`` that ran, in the order of ``todo``; after a full disk (no further
        job starts, those running finish) the jobs not started have none.
    """
    from bnmem.executors.base import Executor

    # Local worker processes start each job as soon as it is ready, the highest rank first: only there do the
    # estimated seconds decide what runs when. One local worker and Ray run the graph level by level.
    eager = not level_by_level and executor.name == "local" and getattr(executor, "workers", 1) > 1
    runner = partial(Executor.run_graph, executor) if level_by_level else executor.run_graph
    results = runner(study_tasks(jobs, todo, estimate=eager), desc=f"{name}: jobs and chunks", resources=resources,
                     stop=lambda summary: bool(summary.get("disk_full")))
    return [{"id": j.id, **results[j.id][0]} for j in todo if results.get(j.id)]
