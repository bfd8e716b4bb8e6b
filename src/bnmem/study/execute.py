"""Running a study: its jobs into a run directory, stage by stage or as a dependency graph.

:func:`run_study` plans the jobs (:func:`bnmem.study.run.plan`), writes ``study.json`` and ``index.json``,
skips the finished jobs and runs the others through an executor, in one of two schedules with the same
results (jobs fix their own threads and seeds):

* stage by stage (:func:`_run_stages`): one local worker and Ray. Every stage's phases (lira's chunks,
  every cell at once: a cluster has them all in flight), then its jobs, each as one map;
* as a graph (:mod:`bnmem.study.graph`): local worker processes. Each job as soon as what it reads is
  written, no barrier between stages.

docs/architecture.md (How a study runs its jobs) describes both.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.errors import BnmemError, DiskFullError
from bnmem.lenses import registry
from bnmem.names import INDEX_FILE
from bnmem.study.graph import run_graph
from bnmem.study.run import (Job, Study, prepare, remove_empty, write_if_changed, index_doc, is_finished,
                             job_spec, phase_specs, plan, run_job, run_phase_job)
from bnmem.study.share import SHARED

__all__ = ["StudyResult", "run_phases", "run_study"]


@dataclass
class StudyResult:
    """What :func:`run_study` did."""

    out: Path
    index: dict[str, Any]
    jobs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [j for j in self.jobs if j["status"] == "failed"]


def run_phases(specs: list[dict[str, Any]], executor: Any, resources: dict[str, Any]) -> None:
    """Submit the phased work of every lens job in ``specs`` (lira's training, then query chunks), each
    phase for all cells at once, so a cluster has every cell's chunks in flight together.

    A job that fails here is not an error yet: the lens's own run retries it and reports the failure.
    """
    lens_specs = [s for s in specs if s["lens"] != SHARED and registry.get(s["lens"]).phases]
    phases = dict.fromkeys(p for s in lens_specs for p in registry.get(s["lens"]).phases)
    for phase in phases:
        by_fn: dict[Any, list[dict[str, Any]]] = {}
        for s in lens_specs:
            if phase in registry.get(s["lens"]).phases:
                for j in phase_specs(s, phase):
                    by_fn.setdefault(j["job_fn"], []).append(j)
        for jobs in by_fn.values():
            if jobs:
                executor.map(run_phase_job, jobs, desc=f"{phase} jobs", resources=resources)


def pending(specs: list[dict[str, Any]], result: StudyResult) -> list[dict[str, Any]]:
    """The unfinished ``specs``; the finished ones are recorded as skipped in ``result``."""
    todo = [s for s in specs if not is_finished(s)]
    for s in specs:
        if s not in todo and s["lens"] == SHARED and Path(s["out"]).exists():
            # Its lenses trained the run themselves after it failed: drop the leftovers.
            shutil.rmtree(s["out"], ignore_errors=True)
            remove_empty(Path(s["out"]), levels=2)
    result.jobs += [{"id": s["id"], "status": "skipped", "seconds": 0.0} for s in specs if s not in todo]
    return todo


def stop_on_full_disk(result: StudyResult) -> None:
    """Raise the first full-disk failure among ``result``'s jobs: the next jobs would fail too.

    Raises:
        DiskFullError: a job found the disk full.
    """
    full = [j for j in result.jobs if j.get("disk_full")]
    if full:
        raise DiskFullError(full[0]["error"])


def _run_stages(jobs: list[Job], out: Path, progress: bool, executor: Any, resources: dict[str, Any],
                result: StudyResult, name: str) -> None:
    """Run the jobs stage by stage, each stage's phases then its jobs, as maps (a barrier after each).

    The path of the Ray executor and of one local worker: a cluster gets every cell's chunks of a phase in
    flight at once, and one worker gains nothing from a graph (stage order gives early results for every
    cell). Local worker processes run the jobs as a graph (:func:`bnmem.study.graph.run_graph`) instead.
    """
    for stage in sorted({j.stage for j in jobs}):
        todo = pending([job_spec(j, out, progress) for j in jobs if j.stage == stage], result)
        if not todo:
            continue
        run_phases(todo, executor, resources)
        if executor.name == "local":
            result.jobs += executor.map(run_job, todo, desc=f"{name} jobs", resources=resources)
        else:
            # Lenses that parallelize internally (lira's shadow models) get the
            # executor itself and run from here; the rest are shipped as jobs.
            inline = [s for s in todo if s["lens"] != SHARED and registry.get(s["lens"]).uses_executor]
            shipped = [s for s in todo if s not in inline]
            if shipped:
                result.jobs += executor.map(run_job, shipped, desc=f"{name} jobs", resources=resources)
            result.jobs += [run_job(s, executor) for s in inline]
        stop_on_full_disk(result)


def run_study(study: Study, out: str | Path, executor: Any = None, progress: bool = True,
              confirmatory: bool = False, graph: bool | None = None,
              study_file: str | Path | None = None) -> StudyResult:
    """Run every job of ``study`` into ``out`` (resumable: finished jobs are skipped).

    Args:
        study: a validated study (:func:`load_study`).
        out: run directory.
        executor: an :class:`~bnmem.executors.Executor` (default: local).
        progress: progress bars.
        confirmatory: derive every seed from the current analysis plan's and deciding source's SHA-256 and
            record them, the commit and the start in study.json (:mod:`bnmem.study.confirmatory`); refused
            outside a git checkout or on a modified one; the start (or resume) is appended to the attempts log
            (:mod:`bnmem.provenance`) before the first job.
        graph: run the jobs as a dependency graph (:mod:`bnmem.study.graph`: each job as soon as what it
            reads is written, no barrier between stages) or stage by stage. Default (None): the graph with
            local worker processes, stages with one local worker or Ray. The results are the same bytes.

    Returns:
        The index and one status per job.

    Raises:
        BnmemError: ``out`` holds a different study, the disk filled up (the
            study stops; rerun to resume), or some job failed (after every other
            job has run; rerunning retries only the failed ones), or a rerun
            that would change whether the run is confirmatory or the plan its
            seeds came from, or a confirmatory run on a modified checkout.
        study_file: the study's YAML file, whose hash a confirmatory start logs.
    """
    from bnmem.analysis_plan import CONFIRMATORY_KEY
    from bnmem.executors import get_executor
    from bnmem.names import STUDY_FILE
    from bnmem.study.confirmatory import current_key, log_attempt, require_clean_checkout
    out = Path(out).expanduser().resolve()
    state = require_clean_checkout() if confirmatory else None
    cells, jobs = plan(study, current_key() if confirmatory else None)
    resumed = (out / STUDY_FILE).exists()
    prepare(out, study, confirmatory, commit=state.commit if state else None)
    if state is not None:
        log_attempt(state, io.read_json(out / STUDY_FILE)[CONFIRMATORY_KEY], resumed, study.name, out,
                    study_file, executor)
    index = index_doc(study, cells, jobs)
    write_if_changed(out / INDEX_FILE, index)  # first, so a report can read a study in progress
    own = executor is None
    executor = executor or get_executor("local", progress=progress)
    resources = study.resources.model_dump()
    result = StudyResult(out=out, index=index)
    try:
        if graph is None:
            graph = executor.name == "local" and getattr(executor, "workers", 1) > 1
        if graph:
            todo = pending([job_spec(j, out, progress) for j in jobs], result)
            result.jobs += run_graph(jobs, todo, executor, resources, study.name) if todo else []
            stop_on_full_disk(result)
        else:
            _run_stages(jobs, out, progress, executor, resources, result, study.name)
    finally:
        if own:
            executor.close()
    if result.failed:
        first = result.failed[0]
        raise BnmemError(
            f"{len(result.failed)} of {len(jobs)} jobs failed (first: {first['id']}: {first['error']}; "
            f"traceback in {first['traceback']}); fix and rerun the same command to resume"
        )
    if not io.is_done(out):
        io.mark_done(out, {"study": study.name, "jobs": len(jobs),
                           "seconds": round(sum(j["seconds"] for j in result.jobs), 3)})
    return result
