"""Forced-memorization measurements: accuracy per training subset, fit epochs."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from bnmem.data.dataset import OutlierDataset
from bnmem.measure.predict import predict_logits

CURVES = ("clean_acc", "noisy_acc", "noisy_orig_acc", "ood_acc", "test_acc")


def _acc(pred: torch.Tensor, target: torch.Tensor, mask: np.ndarray) -> float | None:
    """Accuracy on ``mask``; None for an empty subset (JSON null, not NaN)."""
    m = torch.as_tensor(mask, device=pred.device)
    if not bool(m.any()):
        return None
    return float((pred[m] == target[m]).float().mean())


def val_accuracy(model: nn.Module, ds: OutlierDataset) -> float:
    """Eval-mode accuracy on the validation split (clean labels)."""
    return float((predict_logits(model, ds.x_val).argmax(1) == ds.y_val.cpu()).float().mean())


def _predictions(model: nn.Module, parts: list[torch.Tensor], chunk: int = 1024) -> torch.Tensor:
    """Eval-mode predicted classes of the parts' examples, in order, in forwards of ``chunk`` examples
    that run across the parts' boundaries.

    Eval-mode predictions are per example, so this equals one forward per part (bitwise on the
    demo's models, tests/test_memorize.py) with fewer, fuller forwards; only one chunk is ever
    copied, never the whole set.
    """
    preds, pending, size = [], [], 0
    for part in parts:
        start = 0
        while start < part.shape[0]:
            piece = part[start:start + chunk - size]
            pending.append(piece)
            size += piece.shape[0]
            start += piece.shape[0]
            if size == chunk:
                preds.append(predict_logits(model, torch.cat(pending), batch_size=chunk).argmax(1))
                pending, size = [], 0
    if pending:
        preds.append(predict_logits(model, torch.cat(pending), batch_size=chunk).argmax(1))
    return torch.cat(preds) if preds else torch.empty(0, dtype=torch.long)


def subset_accuracies(
    model: nn.Module, ds: OutlierDataset, train_idx: np.ndarray | None = None
) -> dict[str, float | None]:
    """Eval-mode accuracies on the training subsets and the test set.

    Args:
        model: the classifier.
        ds: the dataset.
        train_idx: restrict the training subsets to these examples (a shadow
            model's IN set); None for all training examples.

    Returns:
        ``clean_acc`` (against the given label), ``noisy_acc`` (against the
        flipped label: memorization), ``noisy_orig_acc`` (against the original
        label: generalization despite the flip), ``ood_acc`` (against the random
        label), ``test_acc``.
    """
    n_train, n_test = ds.n_train, ds.x_test.shape[0]
    pred_all = _predictions(model, [ds.x_train, ds.x_test] + ([ds.x_val] if ds.n_val else []))
    pred, test_pred = pred_all[:n_train], pred_all[n_train:n_train + n_test]
    y = ds.y_train.cpu()
    orig = torch.as_tensor(ds.y_train_orig)
    sel = np.ones(ds.n_train, bool) if train_idx is None else np.isin(np.arange(ds.n_train), train_idx)
    extra = {}
    if ds.n_val:
        extra["val_acc"] = float((pred_all[n_train + n_test:] == ds.y_val.cpu()).float().mean())
    return {
        "clean_acc": _acc(pred, y, ds.is_clean & sel),
        "noisy_acc": _acc(pred, y, ds.is_noisy & sel),
        "noisy_orig_acc": _acc(pred, orig, ds.is_noisy & sel),
        "ood_acc": _acc(pred, y, ds.is_ood & sel),
        "test_acc": float((test_pred == ds.y_test.cpu()).float().mean()),
        "train_acc": _acc(pred, y, sel),
        **extra,
    }


def epochs_to_fit(curve: Sequence[float | None], level: float) -> int | None:
    """First 1-based epoch at which ``curve`` reaches ``level``, or None."""
    for i, v in enumerate(curve):
        if v is not None and v >= level:
            return i + 1
    return None


def mean_curve(curves: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Per-epoch mean over seeds, ignoring missing values; None where all are missing."""
    arr = np.array([[np.nan if v is None else v for v in c] for c in curves], dtype=float)
    out = []
    for col in arr.T:
        ok = ~np.isnan(col)
        out.append(float(col[ok].mean()) if ok.any() else None)
    return out
