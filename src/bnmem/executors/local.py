"""Local executor: jobs in this process, or in a pool of worker processes.

On a small CPU, one torch thread per process and several processes beat one
process with several intra-op threads (measured here: 2 workers of the LeNet
ensemble trainer ran 1.6–1.8x faster than one). Jobs fix their own thread count,
so a job's result does not depend on ``workers``.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Sequence

from tqdm.auto import tqdm

from bnmem.errors import BnmemError
from bnmem.executors.base import Executor, JobFn


class LocalExecutor(Executor):
    """Run jobs on this machine.

    Args:
        progress: show a progress bar over jobs.
        workers: 1 runs jobs in this process, one after another; N > 1 runs up to
            N jobs at once in spawned worker processes.
    """

    name = "local"

    def __init__(self, progress: bool = True, workers: int = 1) -> None:
        if workers < 1:
            raise BnmemError(f"--workers must be at least 1, got {workers}")
        self.progress = progress
        self.workers = workers

    def map(self, fn: JobFn, specs: Sequence[dict[str, Any]], desc: str = "jobs",
            resources: dict[str, float] | None = None) -> list[dict[str, Any]]:
        show = self.progress and len(specs) > 1
        if self.workers == 1 or len(specs) < 2:
            return [fn(spec) for spec in tqdm(specs, desc=desc, disable=not show, leave=False)]
        results: list[dict[str, Any] | None] = [None] * len(specs)
        # Children stay quiet: their per-model bars would overwrite the job bar and each other.
        specs = [{**s, "progress": False} if isinstance(s, dict) and "progress" in s else s for s in specs]
        # spawn, not fork: a forked child inherits torch's thread pools and locks.
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(self.workers, len(specs)), mp_context=ctx) as pool:
            futures = {pool.submit(fn, spec): i for i, spec in enumerate(specs)}
            try:
                for fut in tqdm(as_completed(futures), total=len(futures), desc=desc, disable=not show, leave=False):
                    results[futures[fut]] = fut.result()
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        return results  # type: ignore[return-value]
