"""The conditions every per-cell lens's results name: data, architecture, norms, seeds, outliers, init pairing.

Lives above data and models (it measures what differs between norms at
initialization by building the models), so :mod:`bnmem.config` stays below both.
"""

from __future__ import annotations

from typing import Any

from bnmem.config import ExperimentConfig
from bnmem.data import model_shape
from bnmem.models.pairing import init_pairing


def conditions(cfg: ExperimentConfig) -> dict[str, Any]:
    """The conditions of ``cfg`` every result names (with what differs between norms at initialization)."""
    shape, n_classes = model_shape(cfg.data)
    return {
        "dataset": cfg.data.dataset,
        "arch": cfg.arch,
        "norms": cfg.norms,
        "seeds": cfg.seeds,
        "label_noise": cfg.data.label_noise,
        "ood": cfg.data.ood,
        "ood_source": cfg.data.ood_source if cfg.data.ood > 0 else None,
        "init_pairing": init_pairing(cfg.arch, shape, n_classes, cfg.norms)["note"],
    }
