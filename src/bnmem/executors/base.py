"""The executor interface: run many independent jobs, wherever.

A job is a pure, module-level function ``fn(spec) -> summary`` where ``spec`` is a
small plain-data dict (JSON-able: paths as strings) and the function writes its
results into the run directory (shared storage) itself, atomically, ending with
a completion marker, and returns only a small summary dict. Jobs fix their own
torch thread count, so results do not depend on which executor ran them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

JobFn = Callable[[dict[str, Any]], dict[str, Any]]


class Executor(ABC):
    """Runs ``fn`` over ``specs``; results come back in the order of ``specs``."""

    name: str = "base"

    @abstractmethod
    def map(self, fn: JobFn, specs: Sequence[dict[str, Any]], desc: str = "jobs",
            resources: dict[str, float] | None = None) -> list[dict[str, Any]]:
        """Run every job and return their summaries in order.

        Args:
            fn: the job function (module-level, importable by workers).
            specs: one plain-data dict per job.
            desc: progress-bar label.
            resources: per-job resource request, e.g. ``{"num_cpus": 1, "num_gpus": 0.25}``
                (ignored by the local executor).
        """

    def close(self) -> None:
        """Release workers/cluster connections (no-op by default)."""
