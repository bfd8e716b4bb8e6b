"""Local executor: jobs in this process, or in a pool of worker processes.

On a small CPU, one torch thread per process and several processes beat one
process with several intra-op threads (measured here: 2 workers of the LeNet
ensemble trainer ran 1.6–1.8x faster than one). Jobs fix their own thread count,
so a job's result does not depend on ``workers``.

Worker processes are spawned (a fresh interpreter each), or, on Linux when the caller names modules to ``preload``,
forked from a fork server that imported those modules once: two workers then pay one import of torch
instead of two, and the server, started when the executor is made, imports while the caller still builds its jobs.
A fork is safe only from a process without threads that a fork would break (torch's intra-op pool, a
jemalloc background thread); the server runs no job and imports only what it is given, which is why the
preloaded modules must start no thread besides the BLAS pools (their at-fork handlers stop them):
tests/test_local_executor.py checks the study's list.
"""

from __future__ import annotations

import ast
import multiprocessing
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tqdm.auto import tqdm

from bnmem.errors import BnmemError
from bnmem.executors.base import Executor, JobFn, quiet

if TYPE_CHECKING:
    from bnmem.executors.graph import Task


class LocalExecutor(Executor):
    """Run jobs on this machine.

    Args:
        progress: show a progress bar over jobs.
        workers: 1 runs jobs in this process, one after another; N > 1 runs up to
            N jobs at once in worker processes, kept from one :meth:`map` to the next until
            :meth:`close`.
        preload: modules the workers import once, in a fork server started now (with ``workers`` > 1
            on Linux); empty or elsewhere: each worker is spawned and imports what its jobs need.
            Each worker still runs the caller's main script as a spawned one does; a module that fails to
            import is skipped.
    """

    name = "local"

    def __init__(self, progress: bool = True, workers: int = 1, preload: Sequence[str] = ()) -> None:
        if workers < 1:
            raise BnmemError(f"--workers must be at least 1, got {workers}")
        self.progress = progress
        self.workers = workers
        self.preload = tuple(preload)
        self._pool: ProcessPoolExecutor | None = None
        self._context: Any = None
        if workers > 1 and self.preload:
            self._context = start_context(self.preload)

    def map(self, fn: JobFn, specs: Sequence[Any], desc: str = "jobs",
            resources: dict[str, float] | None = None) -> list[dict[str, Any]]:
        show = self.progress and len(specs) > 1
        if self.workers == 1 or len(specs) < 2:
            return [fn(spec) for spec in tqdm(specs, desc=desc, disable=not show, leave=False)]
        results: list[dict[str, Any] | None] = [None] * len(specs)
        # Children stay quiet: their per-model bars would overwrite the job bar and each other.
        specs = [quiet(s) for s in specs]
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
                    running[pool.submit(guarded, fn, quiet(spec))] = (tid, i)  # quiet: as in map
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
            # Not a fork of this process: it may hold torch's thread pools and locks. Workers start on demand.
            self._context = self._context or start_context(self.preload)
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=self._context)
        return self._pool

    def close(self) -> None:
        """Stop the worker processes (a later :meth:`map` starts new ones), and a fork server that this
        executor started and never used (a study that failed its checks, or had nothing left to run:
        its imports would go on taking a core after this process ends)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        elif self._context is not None and self._context.get_start_method() == "forkserver":
            _stop_fork_server()
            self._context = None


def start_context(preload: Sequence[str]) -> Any:
    """The multiprocessing context of the workers: ``spawn``, or with ``preload`` on Linux the fork server,
    started now so that it imports ``preload`` while the caller goes on.

    The fork server is one per process: the first ``preload`` that starts it is the one it keeps. Linux only:
    on macOS a process that has loaded numpy's Accelerate (system frameworks) is not safe to fork, which is
    why Python spawns there by default; elsewhere there is no fork server.
    """
    linux = sys.platform.startswith("linux")
    if not preload or not linux or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    # Ctrl-C off while the server imports (no traceback from mid-import), on again for the workers it forks.
    ctx.set_forkserver_preload(["bnmem.executors._interrupt_off", *preload, "bnmem.executors._interrupt_on"])
    forkserver.ensure_running()  # returns at once: the server imports in its own process
    return ctx


def _stop_fork_server() -> None:
    """End the fork server now, mid-import or not (multiprocessing's own stop waits for its imports)."""
    import os
    import signal
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None or not hasattr(server, "_stop"):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    server._stop()


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
