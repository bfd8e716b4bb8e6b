"""Where jobs run: ``local`` (default) or ``ray`` (optional extra)."""

from typing import Any

from bnmem.executors.base import Executor, JobFn

__all__ = ["Executor", "JobFn", "get_executor"]


def get_executor(name: str = "local", **kwargs: Any) -> Executor:
    """Executor by name: ``local`` (default, in-process) or ``ray``."""
    from bnmem.errors import BnmemError

    if name == "local":
        from bnmem.executors.local import LocalExecutor

        return LocalExecutor(**kwargs)
    if name == "ray":
        from bnmem.executors.ray import RayExecutor  # optional extra: bnmem[ray]

        return RayExecutor(**kwargs)
    raise BnmemError(f"unknown executor {name!r}; choose local or ray")
