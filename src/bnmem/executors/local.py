"""Local executor: jobs in this process, or in a pool of worker processes.

On a small CPU, one torch thread per process and several processes beat one
process with several intra-op threads (measured here: 2 workers of the LeNet
ensemble trainer ran 1.6–1.8x faster than one). Jobs fix their own thread count,
so a job's result does not depend on ``workers``.
"""

from __future__ import annotations

import ast
import multiprocessing
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tqdm.auto import tqdm

from bnmem.errors import BnmemError
from bnmem.executors.base import Executor, JobFn

if TYPE_CHECKING:
    from bnmem.executors.graph import Task


class LocalExecutor(Executor):
    """Run jobs on this machine.

    Args:
        progress: show a progress bar over jobs.
        workers: 1 runs jobs in this process, one after another; N > 1 runs up to
            N jobs at once in spawned worker processes, kept from one :meth:`map` to the next until
            :meth:`close`.
    """

    name = "local"

    def __init__(self, progress: bool = True, workers: int = 1) -> None:
        if workers < 1:
            raise BnmemError(f"--workers must be at least 1, got {workers}")
        self.progress = progress
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: JobFn, specs: Sequence[dict[str, Any]], desc: str = "jobs",
            resources: dict[str, float] | None = None) -> list[dict[str, Any]]:
        show = self.progress and len(specs) > 1
        if self.workers == 1 or len(specs) < 2:
            return [fn(spec) for spec in tqdm(specs, desc=desc, disable=not show, leave=False)]
        results: list[dict[str, Any] | None] = [None] * len(specs)
        # Children stay quiet: their per-model bars would overwrite the job bar and each other.
        specs = [{**s, "progress": False} if isinstance(s, dict) and "progress" in s else s for s in specs]
        check_main_guard()
        pool = self._workers()
        futures = {pool.submit(fn, spec): i for i, spec in enumerate(specs)}
        try:
            for fut in tqdm(as_completed(futures), total=len(futures), desc=desc, disable=not show, leave=False):
                results[futures[fut]] = fut.result()
        except BaseException:
            for f in futures:
                f.cancel()
            self.close()  # a failed or interrupted map leaves no half-busy workers behind
            raise
        return results  # type: ignore[return-value]

    def run_graph(self, tasks: Sequence["Task"], desc: str = "jobs", resources: dict[str, float] | None = None,
                  stop: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, list[dict[str, Any]]]:
        """Run a job graph (see :meth:`Executor.run_graph`): with worker processes, each job starts as soon as a
        worker is free and the tasks it needs have finished, the ready job of the highest rank first
        (:mod:`bnmem.executors.graph`), so no worker idles at a barrier while another finishes a long job.

        With ``workers=1`` the default (level by level, in this process) runs it. A failed or interrupted
        graph stops the workers (none is left half-busy).
        """
        from bnmem.executors.graph import JobGraph, guarded

        if self.workers == 1:
            return super().run_graph(tasks, desc=desc, resources=resources, stop=stop)
        graph = JobGraph(tasks)
        check_main_guard()
        pool = self._workers()
        running: dict[Future, tuple[str, int]] = {}
        halted = False
        bar = tqdm(total=graph.known_jobs, desc=desc, disable=not self.progress, leave=False)
        try:
            while True:
                while not halted and len(running) < self.workers and (job := graph.pop()) is not None:
                    tid, i, fn, spec = job
                    quiet = {**spec, "progress": False} if "progress" in spec else spec  # as in map
                    running[pool.submit(guarded, fn, quiet)] = (tid, i)
                    bar.set_postfix_str(tid, refresh=False)
                if not running:
                    return graph.results
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    tid, i = running.pop(fut)
                    summary = fut.result()
                    graph.finish(tid, i, summary)
                    halted = halted or bool(stop and stop(summary))
                    bar.total = graph.known_jobs  # lazily listed tasks add their jobs when they are ready
                    bar.update()
        except BaseException:
            for f in running:
                f.cancel()
            self.close()
            raise
        finally:
            bar.close()

    def _workers(self) -> ProcessPoolExecutor:
        """The worker processes, started on first use and kept until :meth:`close`: a study maps once per
        stage and phase, and a fresh worker spends seconds importing torch before its first job."""
        if self._pool is None:
            # spawn, not fork: a forked child inherits torch's thread pools and locks. Workers start on demand.
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def close(self) -> None:
        """Stop the worker processes (a later :meth:`map` starts new ones)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _has_main_guard(source: str) -> bool:
    """True when the module has a top-level ``if __name__ == "__main__":`` (either operand order)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = [node.test.left, *node.test.comparators]
            if (any(isinstance(n, ast.Name) and n.id == "__name__" for n in names)
                    and any(isinstance(n, ast.Constant) and n.value == "__main__" for n in names)):
                return True
    return False


def check_main_guard() -> None:
    """Refuse, before any worker starts, a script that spawned workers would run again.

    A spawned worker imports the parent's main script; without an ``if __name__ == "__main__":``
    guard that import runs the script's top level again, which starts workers of its own and the
    pool dies (``BrokenProcessPool``) long after the start. Interactive sessions, ``python -c`` and
    scripts with the guard pass.

    Raises:
        BnmemError: the main module is a script file without the guard.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return
    try:
        with open(path, encoding="utf-8") as f:
            guarded = _has_main_guard(f.read())
    except (OSError, SyntaxError, ValueError):
        return  # not a readable script: let multiprocessing decide
    if not guarded:
        raise BnmemError(f"worker processes re-import your script {path}, which has no "
                         '`if __name__ == "__main__":` guard; put the code that runs bnmem with workers under '
                         "that guard (see the README, Python API)")
