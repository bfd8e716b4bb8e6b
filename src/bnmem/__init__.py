"""bnmem: how normalization layers change memorization and membership-inference risk."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bnmem.errors import BnmemError
from bnmem.version import __version__

if TYPE_CHECKING:
    from bnmem.auditing.run import AuditResult

__all__ = ["BnmemError", "__version__", "audit"]


def audit(model: Any, train_data: Any, test_data: Any = None, **kwargs: Any) -> AuditResult:
    """Audit a trained model on its data: see :func:`bnmem.auditing.run.audit` for the arguments.

    Imports torch only when called, so ``import bnmem`` stays light.

    Returns:
        An :class:`~bnmem.auditing.run.AuditResult` (``.markdown``, ``.data``, ``.out``).

    Raises:
        BnmemError: the model does not accept the data, or malformed data or options.
    """
    from bnmem.auditing.run import audit as run_audit

    return run_audit(model, train_data, test_data, **kwargs)
