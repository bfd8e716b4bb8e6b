"""A study's fair-arms recipes: one selection per setting, which every per-norm cell of the setting trains with.

Under ``grid.recipes`` containing ``per-norm`` (the default), each (dataset, architecture, outlier setting)
gets one job, ``<cell>/_recipe`` in its replicate-0 cell, that selects every norm's recipe (learning rate and
epochs, :mod:`bnmem.train.recipe`) on that replicate's validation split, from the cell's first model seed, on
the whole training pool. The recipe-taking lenses of every per-norm cell of the setting (all replicates) read
it (their ``recipe_from``), and the study's graph runs them after it.

Why once per setting on replicate 0's data, not per replicate or per lens: a recipe is a property of the
dataset, architecture, norm and kind of corruption, not of one corruption draw; the replicates are draws of
the same experiment, and selecting again in each would multiply the selection's cost by the replicates for a
choice that should not move between them. One selection also gives memorize and LiRA the same recipe (each
used to select its own, on different training sets). The selection looks at validation accuracy only, never
at the test split or an attack, so replicate 0's evaluation stays as independent of it as the others'.

``study.json`` records the selections when the run ends (:data:`SELECTED_RECIPES_KEY`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.names import SELECTED_RECIPES_KEY

SELECTION = "recipe-selection"  # the job kind (study/run.py dispatches on it)
SELECTION_DIR = "_recipe"
# The key of study.json that records each setting's selection when the run ends.


def setting_key(cell: Any) -> tuple[str, str, str]:
    """What one selection serves: the cell's dataset, architecture and outlier setting."""
    return cell.dataset, cell.arch, cell.outliers.tag()


def selection_config(experiment: dict[str, Any], lr_grid: list[float] | None, max_epochs: int | None
                     ) -> dict[str, Any]:
    """The selection job's config: the selecting cell's data, architecture, norms, first seed and recipe."""
    return {"data": experiment["data"], "arch": experiment["arch"], "norms": list(experiment["norms"]),
            "seeds": [int(experiment["seeds"][0])], "train": experiment["train"], "lr_grid": lr_grid,
            "max_epochs": max_epochs}


def recipe_from(lens_folder: str, selection_folder: str) -> str:
    """The selection's folder relative to a lens's folder (both relative to the run directory)."""
    up = "/".join([".."] * len(Path(lens_folder).parts))
    return f"{up}/{selection_folder}"


def run_recipe_selection(spec: dict[str, Any]) -> None:
    """Select every norm's recipe for one setting into ``spec["out"]`` (``recipe.json``; the study's job runner
    marks the folder DONE after it, with its seconds)."""
    from bnmem.config import DataConfig, TrainConfig
    from bnmem.data.loaded import load_once
    from bnmem.train.recipe import select_recipes

    cfg = spec["config"]
    out = Path(spec["out"])
    train = TrainConfig.model_validate(cfg["train"])
    ds = load_once(DataConfig.model_validate(cfg["data"]))
    select_recipes(cfg["norms"], cfg["arch"], ds, train, cfg["seeds"], out, cfg.get("lr_grid"),
                   max_epochs=cfg.get("max_epochs"))  # the candidates train under train.threads; DONE: run_job


def collect(out: str | Path, folders: list[str]) -> dict[str, Any]:
    """Each finished selection's record under its folder (for study.json)."""
    from bnmem.train.recipe import RECIPE_FILE, selection_summary

    root = Path(out)
    found = {}
    for folder in folders:
        path = root / folder / RECIPE_FILE
        if path.exists():
            rec = io.read_json(path)
            found[folder] = {"label": rec.get("label"), "grid": rec.get("grid"), "rule": rec.get("rule"),
                             "criterion": rec.get("criterion"), "seeds": rec.get("seeds"), "n_val": rec.get("n_val"),
                             "trained_on": rec.get("trained_on"), "per_norm": selection_summary(rec)}
    return found
