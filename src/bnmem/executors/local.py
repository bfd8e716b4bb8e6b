"""In-process executor: jobs one after another, with a progress bar."""

from __future__ import annotations

from typing import Any, Sequence

from tqdm.auto import tqdm

from bnmem.executors.base import Executor, JobFn


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, progress: bool = True) -> None:
        self.progress = progress

    def map(self, fn: JobFn, specs: Sequence[dict[str, Any]], desc: str = "jobs",
            resources: dict[str, float] | None = None) -> list[dict[str, Any]]:
        results = []
        for spec in tqdm(specs, desc=desc, disable=not self.progress or len(specs) < 2, leave=False):
            results.append(fn(spec))
        return results
