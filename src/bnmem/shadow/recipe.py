"""Each norm's shadow-model recipe: the configured one, or the one selected per norm on the validation split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bnmem import io
from bnmem.data import OutlierDataset
from bnmem.shadow.config import RECIPE_SELECTION_MODELS, ShadowConfig
from bnmem.shadow.training import shadow_keep
from bnmem.errors import BnmemError
from bnmem.train.recipe import (CRITERION, RECIPE_FILE, cap_epochs, lr_grid, plateau_rule, read_selection,
                                 select_recipes, shared_record, train_for)


def _selection_models(cfg: ShadowConfig) -> range:
    """The shadow models whose seeds and IN halves the candidates of a per-norm selection train as."""
    return range(min(RECIPE_SELECTION_MODELS, cfg.shadow_models))


def _trained_on(models: range) -> str:
    return f"the IN halves of shadow models {list(models)}"


def _per_norm(cfg: ShadowConfig, selection: dict[str, Any]) -> dict[str, ShadowConfig]:
    """Each norm's copy of ``cfg`` carrying its selected recipe with ``recipe: shared``, so its jobs train exactly it."""
    return {n: cfg.model_copy(update={"train": train_for(cfg.train, selection, n), "recipe": "shared",
                                      "recipe_from": None})
            for n in cfg.norms}


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
    if cfg.recipe_from:
        selection = read_selection(Path(out) / cfg.recipe_from, cfg.norms)
        return _per_norm(cfg, selection), selection
    models = _selection_models(cfg)
    keep = shadow_keep(cfg, ds.n_train)
    selection = select_recipes(cfg.norms, cfg.arch, ds, cfg.train, [cfg.model_seed(m) for m in models],
                               Path(out) / "recipe", cfg.lr_grid, [np.flatnonzero(keep[m]) for m in models],
                               _trained_on(models), max_epochs=cfg.max_epochs)
    return _per_norm(cfg, selection), selection


def selected_configs(cfg: ShadowConfig, out: Path) -> dict[str, ShadowConfig] | None:
    """Each norm's configuration from what is on disk, without loading the data: ``cfg`` for every norm under
    ``recipe: shared``; under ``per-norm`` the selection cached in ``<out>/recipe`` when it holds every norm
    and was made for this recipe (grid, criterion, seeds, shared recipe, training sets), else None (not
    selected yet: :func:`norm_configs` selects).

    The dataset-dependent parts of the record (the validation split's size) are left to :func:`norm_configs`,
    which the lens runs with the data loaded; the chunks' ``shadow.json`` (which names the learning rate)
    refuses a disagreement.
    """
    if cfg.recipe != "per-norm":
        return {n: cfg for n in cfg.norms}
    if cfg.recipe_from:  # a study's per-setting selection: there once its job has run
        try:
            return _per_norm(cfg, read_selection(Path(out) / cfg.recipe_from, cfg.norms))
        except BnmemError:
            return None
    cached = Path(out) / "recipe" / RECIPE_FILE
    saved = io.read_json(cached) if cached.exists() else None
    if not isinstance(saved, dict) or not set(saved.get("per_norm") or {}) >= set(cfg.norms):
        return None
    models = _selection_models(cfg)
    expected = {"mode": "per-norm", "grid": lr_grid(cfg.train, cfg.lr_grid), "criterion": CRITERION,
                "rule": {**plateau_rule(saved.get("n_val"), cap_epochs(cfg.train, cfg.max_epochs))},
                "seeds": [int(cfg.model_seed(m)) for m in models], "shared": cfg.train.model_dump(mode="json"),
                "trained_on": _trained_on(models)}
    if any(saved.get(k) != v for k, v in expected.items()):
        return None
    return _per_norm(cfg, saved)
