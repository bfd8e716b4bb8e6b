"""|γ|/σ over the lira lens's BN shadow models: the spread of γ/σ across many trained models, for free."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bnmem import io
from bnmem.data.loaded import load_once
from bnmem.lenses.lira.config import LiraConfig
from bnmem.shadow.query import chunk_bn_ratios
from bnmem.shadow.training import load_shadow_models
from bnmem.measure.gamma_sigma import gamma_sigma_stats

SHADOW_GAMMA_SIGMA = "shadow_gamma_sigma.json"


def shadow_gamma_sigma(cfg: LiraConfig, out: Path) -> dict[str, Any] | None:
    """|γ|/σ of every BN shadow model the lira lens trained, written next to its results.

    The shadow models are already there (M of them, each on a random half of the
    training set), so this is γ/σ over many independently trained BN models at
    no extra training: the spread the gamma-sigma lens's few seeds cannot show.
    The query jobs measured each model while it was loaded (``gamma_sigma`` in
    their chunk markers); only a run queried before that loads the models again.

    Args:
        cfg: the lira lens's config.
        out: its folder (``<out>/batch/shadow/...`` holds the models).

    Returns:
        The document written to ``<out>/shadow_gamma_sigma.json``, or None when
        the lens has no BN models.
    """
    if "batch" not in cfg.norms:
        return None
    # Measured by the query jobs while each model was loaded; a run queried before they recorded it loads them.
    stats = chunk_bn_ratios(cfg, out / "batch")
    if stats is None:
        ds = load_once(cfg.data)
        stats = [gamma_sigma_stats(m, mode="running") for m in load_shadow_models(cfg, "batch", out / "batch", ds)]

    def spread(values: list[float]) -> dict[str, Any]:
        arr = np.asarray(values, dtype=float)
        return {"mean": float(arr.mean()), "min": float(arr.min()), "max": float(arr.max()), "per_model": arr.tolist()}

    layers = list(stats[0]["layers"])
    doc = {
        "norm": "batch",
        "shadow_models": cfg.shadow_models,
        "sigma": "running: sqrt(running_var + eps), the σ BN divides by in eval mode",
        "ratio": "|γ| / σ per channel; per layer the median over channels and the fraction above 1",
        "source": "the lira lens's BN shadow models (model m trains on the keep-matrix half m of the training "
                  "set), final epoch; no extra training",
        "layers": {layer: {"n_channels": stats[0]["layers"][layer]["n_channels"],
                           "median_ratio": spread([s["layers"][layer]["median_ratio"] for s in stats]),
                           "frac_above_1": spread([s["layers"][layer]["frac_above_1"] for s in stats])}
                   for layer in layers},
        "summary": {"frac_above_1": spread([s["summary"]["frac_above_1"] for s in stats]),
                    "median_ratio": spread([s["summary"]["median_ratio"] for s in stats]),
                    "layers_median_above_1": spread([s["summary"]["layers_median_above_1"] for s in stats]),
                    "n_layers": len(layers)},
    }
    io.write_json(out / SHADOW_GAMMA_SIGMA, doc)
    return doc
