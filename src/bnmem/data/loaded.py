"""The datasets this process has loaded: each data config's dataset loaded once per process, then reused.

A study cell's jobs (a lira cell's recipe selection, training and query chunks, its evaluation) all read
the same corrupted, normalized dataset; loading it (reading the source, corrupting, normalizing) once per
job cost a cell nine loads. :func:`load_once` loads it the first time a process asks and hands the same
object to every later job of that process. The jobs only read it (no job writes into its tensors), and
:func:`~bnmem.data.pipeline.load_dataset` gives identical tensors for the same config, so the results are
the same bytes.

Kept: the most recently used datasets up to :data:`KEEP_BYTES` of tensors (always the last one), so a
worker that serves several cells of a small dataset keeps them all, and one of CIFAR size keeps one.
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict

from bnmem.config import DataConfig
from bnmem.data.dataset import OutlierDataset
from bnmem.data.pipeline import load_dataset
from bnmem.data.sources import default_data_root

# Tensor bytes of the datasets a process keeps besides the last one it used (a CIFAR-10 training split is
# ~0.6 GB in float32; digits ~0.1 MB).
KEEP_BYTES = 1 << 30

_LOADED: OrderedDict[str, OutlierDataset] = OrderedDict()
# How many times this process loaded each config's dataset (one per config unless it was dropped).
LOADS: Counter[str] = Counter()


def data_key(cfg: DataConfig) -> str:
    """The identity of a data config's dataset: every field, and the data folder it reads (``$BNMEM_DATA``
    when the config names none). The same key gives identical tensors."""
    root = str(cfg.data_root if cfg.data_root is not None else default_data_root())
    return json.dumps({**cfg.model_dump(mode="json"), "data_root": root}, sort_keys=True)


def _nbytes(ds: OutlierDataset) -> int:
    return sum(int(t.numel() * t.element_size()) for t in (ds.x_train, ds.x_test, ds.x_val) if t is not None)


def load_once(cfg: DataConfig) -> OutlierDataset:
    """The dataset of ``cfg``, loaded by the first call in this process and shared by the later ones.

    Callers must not modify it (every lens and engine job only reads its tensors).

    Raises:
        BnmemError: as :func:`~bnmem.data.pipeline.load_dataset`.
    """
    key = data_key(cfg)
    if key in _LOADED:
        _LOADED.move_to_end(key)
        return _LOADED[key]
    ds = load_dataset(cfg)
    LOADS[key] += 1
    _LOADED[key] = ds
    while len(_LOADED) > 1 and sum(_nbytes(d) for d in list(_LOADED.values())[:-1]) > KEEP_BYTES:
        _LOADED.popitem(last=False)
    return ds


def forget() -> None:
    """Drop every kept dataset (tests; a long-lived process that is done with them)."""
    _LOADED.clear()
