"""bnmem: how normalization layers change memorization and membership-inference risk."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bnmem.errors import BnmemError
from bnmem.version import __version__

if TYPE_CHECKING:
    from bnmem.auditing.run import AuditResult
    from bnmem.train.regularizer import GammaSigmaPenalty

__all__ = ["BnmemError", "GammaSigmaPenalty", "__version__", "audit"]


class _Package(types.ModuleType):
    """The ``bnmem`` module's type: the lazy ``GammaSigmaPenalty`` and a ``dir()`` of the public names.

    Defined on the type, not as module-level ``__getattr__``/``__dir__``, so ``help(bnmem)`` lists the
    public names only (pydoc shows a module's own dunder functions).
    """

    def __getattr__(self, name: str) -> Any:
        # Imported on first use: it needs torch, and `import bnmem` stays light.
        if name == "GammaSigmaPenalty":
            from bnmem.train.regularizer import GammaSigmaPenalty

            return GammaSigmaPenalty
        raise AttributeError(f"module 'bnmem' has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        dunders = [k for k in self.__dict__ if k.startswith("__") and k.endswith("__")]
        return sorted({*__all__, *dunders})


sys.modules[__name__].__class__ = _Package
del _Package


def audit(
    model: Any,
    train_data: Any,
    test_data: Any = None,
    *,
    noisy_mask: Any = None,
    ood_mask: Any = None,
    top_k: int = 20,
    max_examples: int | None = 10_000,
    shadow: Any = None,
    train: Any = None,
    out: str | Path | None = None,
    seed: int = 0,
    progress: bool = False,
    source: dict[str, Any] | None = None,
    max_memory: int | str | None = None,
    defenses: str | Path | None = None,
    executor: Any = None,
    workers: int = 1,
    gs_reg: float | None = None,
    rare_mask: Any = None,
    **shadow_options: Any,
) -> AuditResult:
    """Audit a trained model on its data: see :func:`bnmem.auditing.run.audit` for every argument.

    The same signature as that function (a test keeps them equal); it imports torch only when
    called, so ``import bnmem`` stays light. ``workers=N`` trains the shadow copies in N local
    worker processes (a script doing so needs an ``if __name__ == "__main__":`` guard);
    ``shadow_models=M`` (with ``compare_gs_reg``, ``match_accuracy``, ``max_epochs``, ``match_steps``: the
    fields of :class:`bnmem.config.ShadowCopies`, also given together as ``shadow=``) trains M shadow
    copies; ``compare_gs_reg=λ`` sets them with and without the γ/σ regularizer side by side.

    Returns:
        An :class:`~bnmem.auditing.run.AuditResult` (``.markdown``, ``.data``, ``.out``).

    Raises:
        BnmemError: the model does not accept the data, or malformed data or options.
    """
    args = dict(locals())  # first: exactly the parameters
    options = args.pop("shadow_options")
    from bnmem.auditing.run import audit as run_audit

    return run_audit(**args, **options)
