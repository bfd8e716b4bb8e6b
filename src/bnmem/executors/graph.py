"""A job graph: tasks that start once the tasks they need have finished, costliest chain first.

A :class:`Task` is a node: one job function over one or more specs (its jobs), the tasks it needs
(``deps``: a failed one skips it) and those it only runs after (``after``: failed or not), and its
expected seconds. Its specs may be a callable, evaluated in the driver once the task is ready (a lens
can only list its training chunks after its recipe is selected). :class:`JobGraph` is the bookkeeping
every executor's ``run_graph`` shares: which jobs are ready, in which order, and what finished.

Priority among ready jobs is the task's *rank*: its cost plus the largest rank among the tasks that
wait for it (the classic upward rank of list scheduling), so a long chain (recipe -> training ->
queries -> evaluation) starts before a short job of the same size, and with no dependents the rank is
the task's own cost: the longest job first.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

# A job function, as bnmem.executors.base.JobFn (not imported: base imports this module); a spec is a frozen
# dataclass or a dict (bnmem.executors.base).
JobFn = Callable[[Any], dict[str, Any]]
Specs = list[Any] | Callable[[], list[Any]]


@dataclass(frozen=True)
class Task:
    """One node of a job graph.

    Attributes:
        id: unique name.
        fn: the job function (module-level, so a worker process can import it).
        specs: its jobs' specs, or a callable returning them, called in the driver when the task is ready.
        deps: tasks that must have finished without a failure; if one failed, this task is skipped
            (``status: "blocked"``) and so are the tasks that need it.
        after: tasks that must have finished, whether they failed or not (an ordering only).
        cost: expected seconds of the whole task (all its jobs); only the order depends on it.
    """

    id: str
    fn: JobFn
    specs: Specs
    deps: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    cost: float = 1.0


def job_failed(summary: dict[str, Any]) -> bool:
    """Whether a job summary reports a failure (``status: "failed"``, or a ``failed`` message)."""
    return summary.get("status") == "failed" or bool(summary.get("failed"))


def guarded(fn: JobFn, spec: Any) -> dict[str, Any]:
    """Run ``fn(spec)``; an exception becomes a failed summary, so one job's failure stops only its dependents.

    Module-level (a ``functools.partial`` of it pickles), so any executor can ship it.
    """
    try:
        return fn(spec)
    except Exception as e:  # noqa: BLE001 - reported as the task's failure; the graph goes on
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}


class JobGraph:
    """Which jobs of a task graph may start, costliest rank first, and what each finished with.

    Raises:
        ValueError: a duplicate id, a dependency on an unknown task, or a cycle.
    """

    def __init__(self, tasks: Sequence[Task]) -> None:
        self.tasks = {t.id: t for t in tasks}
        if len(self.tasks) != len(tasks):
            raise ValueError("job graph: duplicate task ids")
        self.waiting_for: dict[str, set[str]] = {}
        self.dependents: dict[str, list[str]] = {t: [] for t in self.tasks}
        for t in tasks:
            needs = set(t.deps) | set(t.after)
            unknown = needs - set(self.tasks)
            if unknown:
                raise ValueError(f"job graph: {t.id} needs unknown task(s) {sorted(unknown)}")
            self.waiting_for[t.id] = needs
            for d in needs:
                self.dependents[d].append(t.id)
        self.rank = self._ranks()
        self.results: dict[str, list[dict[str, Any]]] = {}  # finished tasks only
        self._partial: dict[str, list[dict[str, Any]]] = {}  # started tasks: their jobs' summaries so far
        self.failed: set[str] = set()
        self._left: dict[str, int] = {}  # started task -> its jobs not finished yet
        self._heap: list[tuple[float, int, str, int, Any]] = []
        self._seq = itertools.count()
        self.known_jobs = sum(len(t.specs) if isinstance(t.specs, list) else 1 for t in tasks)
        for tid in [t for t, w in self.waiting_for.items() if not w]:
            self._start(tid)

    def _ranks(self) -> dict[str, float]:
        """Upward rank of every task (its cost plus its dependents' largest rank); a cycle is an error."""
        order, indeg = [], {t: len(w) for t, w in self.waiting_for.items()}
        todo = [t for t, n in indeg.items() if n == 0]
        while todo:
            t = todo.pop()
            order.append(t)
            for d in self.dependents[t]:
                indeg[d] -= 1
                if indeg[d] == 0:
                    todo.append(d)
        if len(order) != len(self.tasks):
            raise ValueError("job graph: the dependencies form a cycle")
        rank: dict[str, float] = {}
        for t in reversed(order):
            rank[t] = self.tasks[t].cost + max((rank[d] for d in self.dependents[t]), default=0.0)
        return rank

    def _start(self, tid: str) -> None:
        """A task whose needs have finished: skip it (a dep failed), or queue its jobs."""
        task = self.tasks[tid]
        bad = [d for d in task.deps if d in self.failed]
        if bad:
            self._finish_task(tid, [{"id": tid, "status": "blocked", "error": f"needs {bad[0]}, which failed"}])
            return
        specs = task.specs
        if callable(specs):
            try:
                specs = specs()
            except Exception as e:  # noqa: BLE001 - listing its jobs failed: the task failed
                self._finish_task(tid, [{"id": tid, "status": "failed", "error": f"{type(e).__name__}: {e}"}])
                return
            self.known_jobs += len(specs) - 1
        if not specs:
            self._finish_task(tid, [])
            return
        self._left[tid] = len(specs)
        self._partial[tid] = [{}] * len(specs)
        for i, spec in enumerate(specs):
            heapq.heappush(self._heap, (-self.rank[tid], next(self._seq), tid, i, spec))

    def _finish_task(self, tid: str, results: list[dict[str, Any]]) -> None:
        self.results[tid] = results
        if any(job_failed(r) or r.get("status") == "blocked" for r in results):
            self.failed.add(tid)
        for d in self.dependents[tid]:
            self.waiting_for[d].discard(tid)
            if not self.waiting_for[d]:
                self._start(d)

    def pop(self) -> tuple[str, int, JobFn, Any] | None:
        """The ready job of the highest rank (``(task id, index, fn, spec)``), or None when none is ready."""
        if not self._heap:
            return None
        _, _, tid, i, spec = heapq.heappop(self._heap)
        return tid, i, self.tasks[tid].fn, spec

    def finish(self, tid: str, index: int, summary: dict[str, Any]) -> None:
        """Record job ``index`` of task ``tid``; the task finishes with its last job, which may ready others."""
        self._partial[tid][index] = summary
        self._left[tid] -= 1
        if self._left[tid] == 0:
            del self._left[tid]
            self._finish_task(tid, self._partial.pop(tid))
