"""bnmem: how normalization layers change memorization and membership-inference risk."""

__version__ = "0.1.0"

import importlib
from typing import Any

from bnmem.errors import BnmemError

__all__ = ["BnmemError", "__version__", "audit"]


def __getattr__(name: str) -> Any:
    # Lazy, so `import bnmem` stays light (no torch) until the audit is used.
    # `bnmem.audit` is the module bnmem/audit.py, made callable: bnmem.audit(model, data)
    # calls bnmem.audit.audit, whichever of the two the import system left here.
    if name == "audit":
        return importlib.import_module("bnmem.audit")
    raise AttributeError(f"module 'bnmem' has no attribute {name!r}")
