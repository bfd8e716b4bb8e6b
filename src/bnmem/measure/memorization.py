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
    pred = predict_logits(model, ds.x_train).argmax(1)
    y = ds.y_train.cpu()
    orig = torch.as_tensor(ds.y_train_orig)
    sel = np.ones(ds.n_train, bool) if train_idx is None else np.isin(np.arange(ds.n_train), train_idx)
    test_pred = predict_logits(model, ds.x_test).argmax(1)
    extra = {}
    if ds.n_val:
        extra["val_acc"] = val_accuracy(model, ds)
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
