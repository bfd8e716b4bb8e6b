"""The audit's view of the training data: ``(x, y)`` tensors and known-corrupted masks as an OutlierDataset."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError


def as_dataset(
    train_data: OutlierDataset | tuple[torch.Tensor, torch.Tensor],
    test_data: tuple[torch.Tensor, torch.Tensor] | None = None,
    noisy_mask: np.ndarray | None = None,
    ood_mask: np.ndarray | None = None,
) -> OutlierDataset:
    """Wrap ``(x, y)`` tensors (or pass an :class:`OutlierDataset` through) for the audit.

    Args:
        train_data: the data the model was trained on: an OutlierDataset (its
            noisy/OOD masks are used) or ``(x, y)`` tensors.
        test_data: held-out ``(x, y)``; ignored for an OutlierDataset (it has its own).
        noisy_mask, ood_mask: known mislabeled / out-of-distribution training
            examples (bool arrays), for ``(x, y)`` data.

    Raises:
        BnmemError: malformed tensors or masks.
    """
    if isinstance(train_data, OutlierDataset):
        return train_data
    x, y = _xy(train_data, "train_data")
    n = x.shape[0]
    masks = {}
    for name, m in (("noisy_mask", noisy_mask), ("ood_mask", ood_mask)):
        arr = np.zeros(n, dtype=bool) if m is None else np.asarray(m)
        if arr.shape != (n,) or not (arr.dtype == bool or np.isin(arr, (0, 1)).all()):
            raise BnmemError(f"{name} must be a boolean array of shape ({n},), got {arr.dtype} {arr.shape}")
        masks[name] = arr.astype(bool)
    if test_data is not None:
        xt, yt = _xy(test_data, "test_data")
        if xt.shape[1:] != x.shape[1:]:
            raise BnmemError(f"test_data inputs have shape {tuple(xt.shape[1:])}, train_data {tuple(x.shape[1:])}")
    else:
        xt, yt = x[:0], y[:0]
    num_classes = int(max(int(y.max()) if n else 0, int(yt.max()) if yt.numel() else 0) + 1)
    known = masks["noisy_mask"] | masks["ood_mask"]
    return OutlierDataset(
        name="user data", x_train=x, y_train=y, y_train_orig=np.where(known, -1, y.numpy()),
        is_noisy=masks["noisy_mask"], is_ood=masks["ood_mask"], x_test=xt, y_test=yt, num_classes=num_classes,
        input_shape=tuple(int(s) for s in x.shape[1:]), mean=np.zeros(1), std=np.ones(1), seed=0,
        info={"source": "tensors given to bnmem.audit", "masks_known": noisy_mask is not None or ood_mask is not None},
    )


def _xy(data: Any, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise BnmemError(f"{what} must be an OutlierDataset or an (x, y) pair of tensors")
    x, y = (torch.as_tensor(v) for v in data)
    if x.shape[0] != y.shape[0] or y.ndim != 1 or x.shape[0] == 0:
        raise BnmemError(f"{what}: x {tuple(x.shape)} and y {tuple(y.shape)} must hold the same number (> 0) of examples")
    if y.dtype.is_floating_point:
        raise BnmemError(f"{what}: labels must be integers, got {y.dtype}")
    return x.float(), y.long()


def masks_known(ds: OutlierDataset) -> bool:
    """True when the data says which training examples are corrupted (and some are)."""
    return bool(ds.info.get("masks_known", True)) and bool(ds.is_outlier.any())
