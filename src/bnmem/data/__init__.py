"""Data: raw sources, outlier injection, and the normalized dataset experiments train on.

Typical use::

    from bnmem.config import DataConfig
    from bnmem.data import load_dataset

    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.1))
    ds.x_train, ds.y_train, ds.is_noisy
"""

from bnmem.data.dataset import OutlierDataset
from bnmem.data.pipeline import OOD_HELDOUT, OOD_NOISE, heldout_classes, load_dataset, model_shape
from bnmem.data.sources import DATASETS, DatasetInfo, RawData, dataset_shape, default_data_root, load_source

__all__ = [
    "DATASETS",
    "DatasetInfo",
    "OOD_HELDOUT",
    "OOD_NOISE",
    "OutlierDataset",
    "RawData",
    "dataset_shape",
    "default_data_root",
    "heldout_classes",
    "load_dataset",
    "load_source",
    "model_shape",
]
