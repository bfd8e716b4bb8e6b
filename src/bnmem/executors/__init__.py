"""Where jobs run: ``local`` (default) or ``ray`` (optional extra)."""

from bnmem.executors.base import Executor, JobFn, get_executor

__all__ = ["Executor", "JobFn", "get_executor"]
