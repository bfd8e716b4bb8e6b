"""bnmem: how normalization layers change memorization and membership-inference risk."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from bnmem.errors import BnmemError
from bnmem.version import __version__

if TYPE_CHECKING:
    from bnmem.auditing.api import audit
    from bnmem.train.regularizer import GammaSigmaPenalty

__all__ = ["BnmemError", "GammaSigmaPenalty", "__version__", "audit"]


class _Package(types.ModuleType):
    """The ``bnmem`` module's type: the lazy ``GammaSigmaPenalty`` and ``audit``, and a ``dir()`` of the public names.

    Defined on the type, not as module-level ``__getattr__``/``__dir__``, so ``help(bnmem)`` lists the
    public names only (pydoc shows a module's own dunder functions).
    """

    def __getattr__(self, name: str) -> Any:
        # Imported on first use: it needs torch, and `import bnmem` stays light.
        if name == "GammaSigmaPenalty":
            from bnmem.train.regularizer import GammaSigmaPenalty

            return GammaSigmaPenalty
        if name == "audit":  # lazy too: the engine's modules (bnmem.shadow, ...) never import the audit
            from bnmem.auditing.api import audit

            return audit
        raise AttributeError(f"module 'bnmem' has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        dunders = [k for k in self.__dict__ if k.startswith("__") and k.endswith("__")]
        return sorted({*__all__, *dunders})


sys.modules[__name__].__class__ = _Package
del _Package
