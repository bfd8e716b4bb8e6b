"""A study's jobs as a dependency graph, for local worker processes: no barrier between stages.

Run stage by stage (:func:`bnmem.study.execute._run_stages`), one worker idles at every barrier while the
other finishes the stage's longest job. Here each job starts as soon as what it reads has been written,
the costliest chain first (:mod:`bnmem.executors.graph`). The edges are what each job reads that
another writes:

* a shared-training job (``<cell>/_shared/<norm>``) writes finished ``<norm>/seed<k>`` runs into the
  folders of the lenses it serves (memorize, gradnorms, gamma-sigma, mitigate of its cell): each of those
  lens jobs runs after it. Only after: if it failed, the lens trains the run itself, as stage by stage;
* a lens with phases (lira) lists its recipe selection, training chunks and query chunks from what is
  on disk: training after the recipe (a per-norm cell's chunks carry the selected learning rate), queries
  after training (they load the trained models), each needing the one before; the lens job itself runs
  after its queries (failed or not: it retries what is missing and reports the failure, as stage by stage);
* theory, and every lens job of a cell that has no shared run, need nothing.

No lens reads another lens's folder, and a cell reads nothing of another cell, so these are all the edges.
Every job is the same function with the same spec as stage by stage, and jobs fix their own threads and
seeds: the results are byte-identical (tests/test_study_graph.py).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from bnmem.executors.graph import Task
from bnmem.lenses import registry
from bnmem.study.run import Job, phase_specs, run_job, run_phase_job
from bnmem.study.share import SHARED

# A lens with phases: the share of its estimated seconds each phase and the lens job itself take (what
# matters is only the order: a chain's rank is the sum of its parts). Recipe selection runs in per-norm cells.
PHASE_SHARE = {"recipe": 0.25, "train": 0.5, "query": 0.1}
LENS_SHARE_AFTER_PHASES = 0.15

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


def phase_task_id(job_id: str, phase: str) -> str:
    """The graph id of one phase of a lens job."""
    return f"{job_id}#{phase}"


def study_tasks(jobs: list[Job], todo: list[dict[str, Any]]) -> list[Task]:
    """The graph of the unfinished jobs ``todo`` (specs of ``jobs``): their phases and their order.

    A finished job has no task; what waits for it may start at once.
    """
    from bnmem.study.cost import estimate_seconds

    est = estimate_seconds(jobs)
    folder = {j.id: j.folder for j in jobs}
    writers: dict[str, list[str]] = {}  # lens folder -> unfinished shared jobs that write runs into it
    for s in todo:
        if s["lens"] == SHARED:
            for t in s["targets"]:
                writers.setdefault(t["folder"], []).append(s["id"])
    tasks = []
    for s in todo:
        cost, after = est.get(s["id"], 1.0), list(writers.get(folder[s["id"]], []))
        phases = registry.get(s["lens"]).phases if s["lens"] != SHARED else ()
        prev: str | None = None
        for phase in phases:
            share = PHASE_SHARE.get(phase, 0.1)
            if phase == "recipe" and s["config"].get("recipe") != "per-norm":
                share = 0.0  # nothing to select: the task lists no job
            tid = phase_task_id(s["id"], phase)
            tasks.append(Task(tid, run_phase_job, partial(phase_specs, s, phase), deps=(prev,) if prev else (),
                              cost=share * cost))
            prev = tid
        if prev:
            after.append(prev)
            cost *= LENS_SHARE_AFTER_PHASES
        tasks.append(Task(s["id"], run_job, [s], after=tuple(after), cost=cost))
    return tasks


def run_graph(jobs: list[Job], todo: list[dict[str, Any]], executor: Any, resources: dict[str, Any],
              name: str) -> list[dict[str, Any]]:
    """Run the unfinished jobs ``todo`` (specs of ``jobs``) as one graph over ``executor``, under one
    progress bar over every job and chunk.

    Returns:
        The summary of each job of ``todo`` that ran, in the order of ``todo``; after a full disk (no further
        job starts, those running finish) the jobs not started have none.
    """
    results = executor.run_graph(study_tasks(jobs, todo), desc=f"{name}: jobs and chunks",
                                 resources=resources, stop=lambda summary: bool(summary.get("disk_full")))
    return [{"id": s["id"], **results[s["id"]][0]} for s in todo if results.get(s["id"])]
