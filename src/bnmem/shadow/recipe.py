"""Each norm's shadow-model recipe: the configured one, or the one selected per norm on the validation split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bnmem.data import OutlierDataset
from bnmem.shadow.config import RECIPE_SELECTION_MODELS, ShadowConfig
from bnmem.shadow.training import shadow_keep
from bnmem.train.recipe import select_recipes, shared_record, train_for


def norm_configs(cfg: ShadowConfig, ds: OutlierDataset, out: Path) -> tuple[dict[str, ShadowConfig], dict[str, Any]]:
    """Each norm's configuration (its recipe resolved) and the recipe record.

    Under ``recipe: per-norm`` the learning rates are selected on the
    validation split (cached in ``<out>/recipe``) with the first
    ``RECIPE_SELECTION_MODELS`` shadow models' seeds and IN halves, i.e. each
    candidate is trained as that shadow model would be. Each norm's copy then
    carries its own recipe with ``recipe: shared``, so its jobs train exactly it.
    """
    if cfg.recipe != "per-norm":
        return {n: cfg for n in cfg.norms}, shared_record(cfg.train)
    models = range(min(RECIPE_SELECTION_MODELS, cfg.shadow_models))
    keep = shadow_keep(cfg, ds.n_train)
    selection = select_recipes(cfg.norms, cfg.arch, ds, cfg.train, [cfg.model_seed(m) for m in models],
                               Path(out) / "recipe", cfg.lr_grid, [np.flatnonzero(keep[m]) for m in models],
                               f"the IN halves of shadow models {list(models)}")
    cfgs = {n: cfg.model_copy(update={"train": train_for(cfg.train, selection, n), "recipe": "shared"})
            for n in cfg.norms}
    return cfgs, selection
