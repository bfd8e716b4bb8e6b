"""The executor interface: run many independent jobs, wherever.

A job is a pure, module-level function ``fn(spec) -> summary`` where ``spec`` is a
small object that pickles: a frozen dataclass (e.g. :class:`bnmem.shadow.training.ShadowChunk`) or a dict, of
plain data, paths as strings, and typed configs validated once where the job was made (a worker receives them
pickled, not as data to validate again), and the function writes its
results into the run directory (shared storage) itself, atomically, ending with
a completion marker, and returns only a small summary dict. Jobs fix their own
torch thread count, so results do not depend on which executor ran them.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from bnmem.executors.graph import Task

JobFn = Callable[[Any], dict[str, Any]]


def quiet(spec: Any) -> Any:
    """``spec`` with its per-job progress bars off (a ``progress`` key or dataclass field), for a job run in a
    worker process: its bars would overwrite the executor's job bar and each other."""
    if isinstance(spec, dict):
        return {**spec, "progress": False} if "progress" in spec else spec
    if dataclasses.is_dataclass(spec) and any(f.name == "progress" for f in dataclasses.fields(spec)):
        return dataclasses.replace(spec, progress=False)
    return spec


class Executor(ABC):
    """Runs ``fn`` over ``specs``; results come back in the order of ``specs``."""

    name: str = "base"

    @abstractmethod
    def map(self, fn: JobFn, specs: Sequence[Any], desc: str = "jobs",
            resources: dict[str, float] | None = None) -> list[dict[str, Any]]:
        """Run every job and return their summaries in order.

        Args:
            fn: the job function (module-level, importable by workers).
            specs: one spec per job (a frozen dataclass or a dict; plain data and typed configs; it pickles).
            desc: progress-bar label.
            resources: per-job resource request, e.g. ``{"num_cpus": 1, "num_gpus": 0.25}``
                (ignored by the local executor).
        """

    def run_graph(self, tasks: Sequence["Task"], desc: str = "jobs", resources: dict[str, float] | None = None,
                  stop: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, list[dict[str, Any]]]:
        """Run a job graph (:class:`~bnmem.executors.graph.Task`): each task once the tasks it needs finished.

        This default runs it level by level: every job ready now, one :meth:`map` per job function, then the
        jobs that became ready, and so on (so any executor can run a graph; the local executor with worker
        processes overrides it to start each job as soon as its needs are met, costliest first). A job that
        raises fails its task; the tasks that need it are skipped (``status: "blocked"``), the others run.

        Args:
            tasks: the graph.
            desc: progress-bar label.
            resources: per-job resource request (as for :meth:`map`).
            stop: a summary for which it returns True starts no further job (a full disk); the jobs already
                running finish, the tasks not started have no results.

        Returns:
            Task id -> its jobs' summaries, in the order of its specs.
        """
        from functools import partial

        from bnmem.executors.graph import JobGraph, guarded

        graph = JobGraph(tasks)
        while True:
            ready = []
            while (job := graph.pop()) is not None:
                ready.append(job)
            if not ready:
                return graph.results
            by_fn: dict[Any, list[tuple[str, int, Any]]] = {}
            for tid, i, fn, spec in ready:
                by_fn.setdefault(fn, []).append((tid, i, spec))
            halted = False
            for fn, jobs in by_fn.items():
                summaries = self.map(partial(guarded, fn), [spec for _, _, spec in jobs], desc=desc,
                                     resources=resources)
                for (tid, i, _), summary in zip(jobs, summaries):
                    graph.finish(tid, i, summary)
                    halted = halted or bool(stop and stop(summary))
            if halted:
                return graph.results

    def close(self) -> None:
        """Release workers/cluster connections (no-op by default)."""
