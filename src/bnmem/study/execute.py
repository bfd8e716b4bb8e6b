"""Running a study: its jobs into a run directory, as one dependency graph.

:func:`run_study` builds the jobs once (:func:`bnmem.study.run.build_jobs`, or the jobs its caller built), writes
``study.json`` and ``index.json``, skips the finished jobs and runs the others as one graph
(:mod:`bnmem.study.graph`: each job once what it reads is written, a lira cell's chunks as its plan's tasks)
through the executor's ``run_graph``: local worker processes start each job as soon as it is ready, one local
worker and Ray run it level by level. Jobs fix their own threads and seeds, so the results are the same
bytes either way.

docs/architecture.md (How a study runs its jobs) describes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.errors import BnmemError, DiskFullError
from bnmem.names import INDEX_FILE
from bnmem.study.graph import run_graph
from bnmem.study.run import Cell, Job, Study, expand_grid, prepare, write_if_changed, index_doc, build_jobs, run_job
from bnmem.study.recipes import SELECTED_RECIPES_KEY, SELECTION, collect

__all__ = ["StudyResult", "run_study"]


@dataclass
class StudyResult:
    """What :func:`run_study` did."""

    out: Path
    index: dict[str, Any]
    jobs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [j for j in self.jobs if j["status"] == "failed"]


def pending(jobs: list[Job], result: StudyResult) -> list[Job]:
    """The unfinished ``jobs`` (bound to the run directory); the finished ones are recorded as skipped in
    ``result`` (and tidied: a shared job's leftovers after its lenses trained the runs themselves)."""
    todo = [j for j in jobs if not j.work.finished()]
    for j in jobs:
        if j not in todo:
            j.work.tidy()
    result.jobs += [{"id": j.id, "status": "skipped", "seconds": 0.0} for j in jobs if j not in todo]
    return todo


def stop_on_full_disk(result: StudyResult) -> None:
    """Raise the first full-disk failure among ``result``'s jobs: the next jobs would fail too.

    Raises:
        DiskFullError: a job found the disk full.
    """
    full = [j for j in result.jobs if j.get("disk_full")]
    if full:
        raise DiskFullError(full[0]["error"])


def record_selected_recipes(out: Path, jobs: list[Job]) -> None:
    """Add each setting's selected recipes (:mod:`bnmem.study.recipes`) to study.json, once all are selected."""
    from bnmem.names import STUDY_FILE

    folders = [j.folder for j in jobs if j.lens == SELECTION]
    if not folders:
        return
    found = collect(out, folders)
    doc = io.read_json(out / STUDY_FILE)
    if doc.get(SELECTED_RECIPES_KEY) != found:
        io.write_json(out / STUDY_FILE, {**doc, SELECTED_RECIPES_KEY: found})


def run_study(study: Study, out: str | Path, executor: Any = None, progress: bool = True,
              confirmatory: bool = False, graph: bool = True, study_file: str | Path | None = None,
              study_jobs: tuple[list[Cell], list[Job]] | None = None) -> StudyResult:
    """Run every job of ``study`` into ``out`` (resumable: finished jobs are skipped).

    Args:
        study: a validated study (:func:`load_study`).
        out: run directory.
        executor: an :class:`~bnmem.executors.Executor` (default: local).
        progress: progress bars.
        confirmatory: derive every seed from the current analysis plan's, source's and study's SHA-256 and
            record them, the commit and the start in study.json (:mod:`bnmem.study.confirmatory`); refused
            outside a git checkout or on a modified one; the start (or resume) is appended to the attempts log
            (:mod:`bnmem.provenance`) before the first job, and the end (finished, failed, interrupted: Ctrl-C or
            SIGTERM) when it stops.
        graph: run the graph as the executor does (local worker processes: each job as soon as what it reads
            is written); False: level by level, a barrier after each level (what one local worker and Ray
            do anyway). The results are the same bytes.
        study_file: the study's YAML file, whose hash a confirmatory run's seeds derive from (without one, the
            resolved study's hash stands in for it).
        study_jobs: the study's ``build_jobs(study, seeds)`` when the caller has built them (``bnmem run`` builds them once);
            its seeds must be those of this run (the confirmatory key's exactly when ``confirmatory`` is set).

    Returns:
        The index and one status per job.

    Raises:
        BnmemError: ``out`` holds a different study, the disk filled up (the
            study stops; rerun to resume), or some job failed (after every other
            job has run; rerunning retries only the failed ones), or a rerun
            that would change whether the run is confirmatory or the plan its
            seeds came from, or a confirmatory run on a modified checkout.
    """
    from bnmem.analysis_plan import CONFIRMATORY_KEY
    from bnmem.names import STUDY_FILE
    from bnmem.study.confirmatory import current_key, log_attempt, require_clean_checkout
    out = Path(out).expanduser().resolve()
    state = require_clean_checkout() if confirmatory else None
    key = current_key(study, study_file) if confirmatory else None
    grid = {c.id: c.derived for c in expand_grid(study, key)}  # build_jobs() leaves out fair-arms cells with no lens
    if study_jobs is not None and any(c.id not in grid or grid[c.id] != c.derived for c in study_jobs[0]):
        raise ValueError("run_study: the study jobs given were built with other seeds than this run's")
    cells, jobs = study_jobs if study_jobs is not None else build_jobs(study, key)
    resumed = (out / STUDY_FILE).exists()
    prepare(out, study, confirmatory, commit=state.commit if state else None, study_file=study_file)
    if state is None:
        return _run_jobs(study, out, executor, cells, jobs, graph, progress)
    began = log_attempt(state, io.read_json(out / STUDY_FILE)[CONFIRMATORY_KEY], resumed, study.name, out,
                        study_file, executor, sorted(study.lenses.enabled()))
    return _logged(state, began, lambda: _run_jobs(study, out, executor, cells, jobs, graph, progress))


class Terminated(BaseException):
    """SIGTERM during a confirmatory run: ends it as an interruption (its end is logged) rather than silently."""


def _logged(state: Any, began: dict[str, Any], body: Any) -> StudyResult:
    """Run ``body`` and log the attempt's end (:func:`bnmem.study.confirmatory.log_end`): finished, failed (an
    exception, the jobs' failures included) or interrupted (Ctrl-C, SIGTERM: turned into :class:`Terminated`
    while it runs, in the main thread)."""
    import signal
    import threading
    import time

    from bnmem.provenance import FAILED, FINISHED, INTERRUPTED
    from bnmem.study.confirmatory import log_end

    def on_term(signum: int, frame: Any) -> None:
        raise Terminated(f"signal {signum}")

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_term)
    t0 = time.monotonic()
    try:
        result = body()
    except (KeyboardInterrupt, Terminated) as e:
        log_end(state, began, INTERRUPTED, time.monotonic() - t0, error=e.__class__.__name__)
        if isinstance(e, Terminated):
            raise SystemExit(128 + signal.SIGTERM) from e  # the exit status a SIGTERM'd process has
        raise
    except BaseException as e:
        log_end(state, began, FAILED, time.monotonic() - t0, error=f"{e.__class__.__name__}: {e}"[:300])
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    log_end(state, began, FINISHED, time.monotonic() - t0, jobs=len(result.jobs), failed=len(result.failed))
    return result


def _run_jobs(study: Study, out: Path, executor: Any, cells: list[Cell], jobs: list[Job], graph: bool,
              progress: bool) -> StudyResult:
    """Run the built jobs of ``study`` into ``out`` (after study.json is written and any start logged)."""
    from bnmem.executors import get_executor

    index = index_doc(study, cells, jobs)
    write_if_changed(out / INDEX_FILE, index)  # first, so a report can read a study in progress
    own = executor is None
    executor = executor or get_executor("local", progress=progress)
    resources = study.resources.model_dump()
    result = StudyResult(out=out, index=index)
    try:
        todo = pending([j.at(out, progress) for j in jobs], result)
        # On a cluster, a lens that spreads its own work over the executor and gives the graph no tasks
        # (defenses) runs in the driver with the executor, after the graph (the last stage).
        inline = [] if executor.name == "local" else [j for j in todo if j.work.in_driver()]
        graphed = [j for j in todo if j not in inline]
        result.jobs += run_graph(jobs, graphed, executor, resources, study.name, level_by_level=not graph) \
            if graphed else []
        stop_on_full_disk(result)
        for j in inline:
            result.jobs.append(run_job(j, executor))
            stop_on_full_disk(result)
    finally:
        if own:
            executor.close()
    record_selected_recipes(out, jobs)
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
