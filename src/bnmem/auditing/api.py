"""``bnmem.audit``: the audit's Python entry point, its signature written here once.

Light at import (no torch): ``import bnmem`` re-exports it, and the implementation
(:mod:`bnmem.auditing.run`) is imported when it is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bnmem.auditing.run import AuditResult


def audit(model: Any, train_data: Any, test_data: Any = None, *, shadow: Any = None, train: Any = None,
          options: Any = None, out: str | Path | None = None, **fields: Any) -> AuditResult:
    """Audit a trained model on the data it was trained on: norm layers, BN γ/σ, gradient-norm outliers,
    accuracy and (with shadow copies) membership-inference risk.

    Args:
        model: any classifier ``nn.Module`` returning logits (or a TorchScript module).
        train_data: its training data: an ``OutlierDataset``, ``(x, y)`` tensors in the model's input
            format, or a :class:`bnmem.auditing.options.AuditData` (the tensors with their known masks).
        test_data: held-out ``(x, y)`` (an OutlierDataset has its own).
        shadow: the shadow copies, a :class:`bnmem.config.ShadowCopies` or dict (``shadow_models`` M > 0
            measures membership leakage with M copies; ``compare_gs_reg``, ``match_accuracy``,
            ``max_epochs``, ``match_steps``: each explained there).
        train: the shadow copies' recipe, a :class:`bnmem.config.TrainConfig` or dict (default TrainConfig()).
        options: a :class:`bnmem.auditing.options.AuditOptions` or dict: ``top_k``, ``max_examples``,
            ``max_memory``, ``seed``, ``progress``, ``defenses``, ``workers`` (N > 1 trains the copies in N
            local processes; a script doing so needs an ``if __name__ == "__main__":`` guard), ``fail_at``
            (the CI gate), ``model_card``, ``mlflow``, ``canaries`` (the one-run audit), ``executor``,
            ``train_fn`` (your own training function trains the copies: ``train_fn(model, train_dataset, seed)
            -> model``, or 'module:function'; :mod:`bnmem.auditing.train_fn`).
        out: write ``audit.json``, ``audit.md`` (and ``exposure.csv`` with shadow copies) here (None: don't write).
        **fields: any field of those objects as a keyword (``shadow_models=16``, ``max_memory="8GB"``,
            ``noisy_mask=...``, ``non_members=(x, y)``: held-out data the model never saw, which attacks the model
            itself, :mod:`bnmem.auditing.target`), and ``gs_reg`` (the recipe's γ/σ-regularizer λ).

    Returns:
        An :class:`~bnmem.auditing.run.AuditResult` (``.markdown``, ``.data``, ``.out``, ``.gate``).

    Raises:
        BnmemError: the model does not accept the data, malformed data or options, shadow models asked for a
            TorchScript model, or a memory budget that cannot hold one example. Nothing is written into ``out``
            before the inputs have been checked.
    """
    from bnmem.auditing.run import run_audit

    return run_audit(model, train_data, test_data, shadow, train, options, out, fields)
