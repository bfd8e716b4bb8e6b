"""The in-memory dataset every experiment trains on."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class OutlierDataset:
    """A training split with injected outliers, a test split, and exact bookkeeping.

    Images are float32 NCHW tensors already normalized with the per-channel
    mean/std of the (final, corrupted) training split. All masks are boolean
    numpy arrays aligned with ``x_train``.

    Attributes:
        name: dataset name (``digits``, ``mnist``, ...).
        x_train, y_train: training images and the labels the models train on
            (flipped for noisy examples, random for OOD examples).
        y_train_orig: the original label (for OOD examples: -1).
        is_noisy: True where the label was flipped.
        is_ood: True where the image is out-of-distribution.
        x_test, y_test: clean test split (only in-distribution classes).
        num_classes: number of classes the models predict.
        input_shape: (C, H, W).
        mean, std: per-channel normalization statistics (raw [0,1] pixel scale).
        seed: the seed that produced the corruption.
        info: free-form provenance (source, ood_source, held-out classes, ...).
        x_val, y_val: the validation split (clean labels, normalized like
            ``x_train``), held out of the training pool; empty when
            ``val_fraction`` is 0. Used only to select recipes (learning rate,
            regularizer strength), never to train and never as LiRA candidates.
        source_index: for each training example, its position in the raw
            training split (-1 for appended OOD images); None if unknown.
        val_source_index: the same for the validation examples.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    y_train_orig: np.ndarray
    is_noisy: np.ndarray
    is_ood: np.ndarray
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    input_shape: tuple[int, int, int]
    mean: np.ndarray
    std: np.ndarray
    seed: int
    info: dict = field(default_factory=dict)
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None
    source_index: np.ndarray | None = None
    val_source_index: np.ndarray | None = None

    @property
    def is_clean(self) -> np.ndarray:
        """Training examples that are neither flipped nor OOD."""
        return ~(self.is_noisy | self.is_ood)

    @property
    def is_outlier(self) -> np.ndarray:
        """Flipped or OOD training examples (the memorization targets)."""
        return self.is_noisy | self.is_ood

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_val(self) -> int:
        return 0 if self.x_val is None else int(self.x_val.shape[0])

    def masks(self) -> dict[str, np.ndarray]:
        """Subset masks by name, for results files."""
        return {"clean": self.is_clean, "noisy": self.is_noisy, "ood": self.is_ood, "outlier": self.is_outlier}

    def summary(self) -> dict:
        """Plain-data description of the dataset, for results files."""
        return {
            "dataset": self.name,
            "n_train": self.n_train,
            "n_test": int(self.x_test.shape[0]),
            "n_noisy": int(self.is_noisy.sum()),
            "n_ood": int(self.is_ood.sum()),
            "num_classes": self.num_classes,
            "input_shape": list(self.input_shape),
            "seed": self.seed,
            **self.info,
        }
