"""How long a study would take: every job's training work, timed on this machine, calibrated by a pilot run.

A job's *work* is the example-epochs of the models it trains itself (its cell plan's declared models ×
epochs × training examples; a lens whose (norm, seed) runs a shared-training job trains has none of its own).
Its seconds are ``work × step(arch) × factor`` plus its fixed seconds:

* ``step(arch)``: seconds per training example of one SGD step of the architecture on the dataset's
  input shape at the study's batch size and thread count, **measured now** (a few timed steps);
* ``factor`` and the fixed seconds: what the job does besides plain training (per-epoch hooks,
  per-sample gradients, LiRA's queries, summarizing). Without a pilot, what its cell plan declares
  (:class:`~bnmem.lenses.registry.CellWork`: a lens's from its spec's ``step_factor`` / ``fixed_seconds``;
  uncalibrated); with a finished pilot run (:func:`calibrate`), per job kind, the ratio of the seconds its
  DONE markers recorded to the work of its jobs.

A job's estimate covers its whole work: the tasks its cell plan gives the study's graph before it (a lira
cell's shadow-model chunks) as well as the job itself (:mod:`bnmem.study.graph` splits it among them), and
the calibration counts the seconds of both.

Estimates are for the local executor with one worker: a study's jobs run one after another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from bnmem.lenses.registry import CellWork
from bnmem.study.dryrun import human_seconds, n_train
from bnmem.study.run import Job

TIMED_STEPS = 8


@lru_cache(maxsize=None)
def step_seconds(arch: str, dataset: str, batch_size: int, threads: int = 1) -> float:
    """Measured seconds per training example of one SGD step (BN model, forward + backward + update)."""
    import torch

    from bnmem.data.sources import dataset_shape
    from bnmem.models import build_model
    from bnmem.threads import torch_threads

    shape, classes = dataset_shape(dataset)
    with torch_threads(threads):
        torch.manual_seed(0)
        model = build_model(arch, shape, classes, "batch")
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.randn(batch_size, *shape), torch.randint(0, classes, (batch_size,))
        loss_fn = torch.nn.CrossEntropyLoss()

        def step() -> None:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

        step()  # warm-up
        t0 = time.perf_counter()
        for _ in range(TIMED_STEPS):
            step()
        return (time.perf_counter() - t0) / (TIMED_STEPS * batch_size)


def job_models(job: Job, shared_folders: set[str]) -> float:
    """How many models a job trains itself (0 when a shared-training job trains its runs)."""
    return 0.0 if job.folder in shared_folders else job.work.models()


def job_work(job: Job, shared_folders: set[str]) -> float:
    """Example-epochs the job trains itself."""
    training = job.work.training()
    if training is None:
        return 0.0
    return job_models(job, shared_folders) * float(training.train.epochs) * n_train(training.data)


def shared_folders(jobs: list[Job]) -> set[str]:
    """Folders of the jobs whose runs another job (a shared-training job) trains."""
    return {str(f) for j in jobs for f in j.work.writes_into()}


def job_step(job: Job) -> float:
    """Measured seconds per example-epoch of the job's architecture (0 for a job that trains nothing)."""
    training = job.work.training()
    if training is None:
        return 0.0
    t = training.train
    return step_seconds(training.arch, training.data.dataset, int(t.batch_size), int(t.threads or 1))


@dataclass
class Calibration:
    """Per job kind (a lens's name, shared-training, recipe-selection), what a pilot run measured: seconds per
    example-epoch relative to plain training, and fixed seconds per job; a kind it did not measure keeps what
    its cell plans declare."""

    factors: dict[str, float] = field(default_factory=dict)
    fixed: dict[str, float] = field(default_factory=dict)
    source: str = "uncalibrated (declared factors; step times measured now)"


def estimate_seconds(jobs: list[Job], cal: Calibration | None = None) -> dict[str, float]:
    """Job id -> estimated seconds on one local worker."""
    cal = cal or Calibration()
    folders = shared_folders(jobs)
    out = {}
    for j in jobs:
        work = job_work(j, folders)
        train = work * job_step(j) * cal.factors.get(j.lens, j.work.step_factor) if work else 0.0
        out[j.id] = train + cal.fixed.get(j.lens, j.work.fixed_seconds)
    return out


def recorded_seconds(work: CellWork) -> float | None:
    """The seconds a finished job's whole work recorded: the job's own and those of every task it gave the graph
    (a lira cell's training chunks), as :func:`estimate_seconds` counts it. None: not finished, or some part
    recorded no seconds."""
    own, tasks = work.seconds_taken(), work.task_seconds()
    return None if own is None or tasks is None else own + tasks


def calibrate(run_dir: str | Path, jobs: list[Job]) -> Calibration:
    """Per-kind factors from a finished pilot run: measured seconds (DONE markers) / (work × step time now).

    ``jobs`` are the pilot's own planned jobs, with its seeds (:func:`bnmem.design.pilot_jobs`). A job's
    seconds are :func:`recorded_seconds`: its own ``DONE`` marker's and its tasks' (:meth:`CellWork.task_seconds`;
    a lira cell's shadow-model training chunks run as tasks of their own before the lens job). A shared-training
    job's are the sum of those its runs recorded (each ``<norm>/seed<k>/DONE`` of its first target lens). Kinds
    the pilot did not finish, and finished ones whose DONE recorded no seconds (runs from before it did), keep
    what their plans declare; the source line names each kind.
    """
    root = Path(run_dir)
    folders = shared_folders(jobs)
    cal = Calibration()
    sums: dict[str, list[float]] = {}
    fixed: dict[str, list[float]] = {}
    unclocked: set[str] = set()  # finished, but its DONE recorded no seconds (a run from before it did)
    for j in jobs:
        work_here = j.work.at(root)
        secs = recorded_seconds(work_here)
        if secs is None:
            if work_here.marked and work_here.finished():
                unclocked.add(j.lens)
            continue
        work = job_work(j, folders)
        if work:
            acc = sums.setdefault(j.lens, [0.0, 0.0])
            acc[0] += secs
            acc[1] += work * job_step(j)
        else:
            fixed.setdefault(j.lens, []).append(secs)
    for kind, (secs, base) in sums.items():
        if base > 0:
            cal.factors[kind] = secs / base
            cal.fixed[kind] = 0.0
    for kind, values in fixed.items():
        cal.fixed[kind] = sum(values) / len(values)
    measured = sorted(set(sums) | set(fixed))
    unclocked -= set(measured)
    declared = sorted({j.lens for j in jobs} - set(measured) - unclocked)
    cal.source = (f"calibrated on {root} for {', '.join(measured) or 'no lens'} (its DONE markers), declared "
                  f"factors for {', '.join(declared) or 'none'} (not finished in the pilot)"
                  + (f" and for {', '.join(sorted(unclocked))} (finished, but its DONE recorded no seconds)"
                     if unclocked else "") + "; step times measured now")
    return cal


def cost_lines(jobs: list[Job], seconds: dict[str, float], source: str = "") -> list[str]:
    """Estimated time per stage (with each lens's share) and in all, on one local worker."""
    from collections import Counter

    out = [f"estimated time on one local worker ({source or 'step times measured now'}):"]
    for stage in sorted({j.stage for j in jobs}):
        in_stage = [j for j in jobs if j.stage == stage]
        by_lens: Counter[str] = Counter()
        for j in in_stage:
            by_lens[j.lens] += seconds.get(j.id, 0.0)
        detail = ", ".join(f"{k} {human_seconds(v)}" for k, v in by_lens.items())
        out.append(f"  stage {stage}: {len(in_stage)} jobs, ~{human_seconds(sum(by_lens.values()))} ({detail})")
    out.append(f"  total: ~{human_seconds(sum(seconds.get(j.id, 0.0) for j in jobs))}")
    return out
