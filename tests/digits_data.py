"""The digits data the training tests share, and float64 copies of a data set (the precision of their oracles)."""

from __future__ import annotations

import dataclasses

from bnmem.config import DataConfig
from bnmem.data import OutlierDataset, load_dataset

NOISY = DataConfig(dataset="digits", label_noise=0.05, seed=0)  # conftest's ``ds``: 5% flipped labels, seed 0


def as_float64(ds: OutlierDataset) -> OutlierDataset:
    """``ds`` with its images (train, test and, where there is one, validation) in float64."""
    return dataclasses.replace(ds, x_train=ds.x_train.double(), x_test=ds.x_test.double(),
                               x_val=None if ds.x_val is None else ds.x_val.double())


def load64(data: DataConfig) -> OutlierDataset:
    """The data set ``data`` describes, in float64."""
    return as_float64(load_dataset(data))
