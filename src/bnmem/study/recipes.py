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

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bnmem import io
from bnmem.lenses.registry import FolderWork, Training
from bnmem.names import SELECTED_RECIPES_KEY

SELECTION = "recipe-selection"  # the job kind (what a pilot's calibration is kept per)
SELECTION_DIR = "_recipe"
# The key of study.json that records each setting's selection when the run ends.


def setting_key(cell: Any) -> tuple[str, str, str]:
    """What one selection serves: the cell's dataset, architecture and outlier setting."""
    return cell.dataset, cell.arch, cell.outliers.tag()


@dataclass(frozen=True, eq=False)
class RecipeSelection(FolderWork):
    """One setting's recipe selection (:class:`~bnmem.lenses.registry.CellWork`): every norm's recipe selected
    on the selecting cell's validation split, from its first model seed.

    Attributes:
        out: the selection's folder (``<cell-r0>/_recipe``).
        trains: the selecting cell's data, architecture and shared recipe.
        norms: the norms to select for.
        seeds: the one model seed the candidates train with.
        lr_grid: the candidate learning rates (None: the declared factors of the shared one).
        max_epochs: the plateau rule's cap (None: its default).
    """

    out: Path
    trains: Training
    norms: tuple[str, ...]
    seeds: tuple[int, ...]
    lr_grid: tuple[float, ...] | None = None
    max_epochs: int | None = None
    kind = SELECTION
    lens_share = 1.0
    step_factor = 1.5
    fixed_seconds = 0.0
    marked = True

    @classmethod
    def of(cls, folder: str, experiment: dict[str, Any], lr_grid: list[float] | None, max_epochs: int | None
           ) -> "RecipeSelection":
        """The selection in ``folder`` of the selecting cell's base config ``experiment``
        (:meth:`bnmem.study.run.Cell.experiment`)."""
        from bnmem.config import DataConfig, TrainConfig

        return cls(Path(folder), Training(DataConfig.model_validate(experiment["data"]), experiment["arch"],
                                          TrainConfig.model_validate(experiment["train"])),
                   tuple(experiment["norms"]), (int(experiment["seeds"][0]),),
                   None if lr_grid is None else tuple(lr_grid), max_epochs)

    def dataset(self) -> Any:
        from bnmem.data.loaded import load_once

        return load_once(self.trains.data)

    def training(self) -> Training:
        return self.trains

    def models(self) -> float:
        """Every learning-rate candidate of every norm, up to the plateau rule's cap (counted in the shared
        recipe's epochs)."""
        from bnmem.train.recipe import LR_FACTORS, PLATEAU_CAP_FACTOR

        epochs = float(self.trains.train.epochs) or 1.0
        cap = float(self.max_epochs or PLATEAU_CAP_FACTOR * epochs)
        return float(len(self.norms) * len(self.seeds) * len(self.lr_grid or LR_FACTORS)) * cap / epochs

    def bytes(self, n_train: int, parameter_count: Callable[[str, str, str], int]) -> dict[str, int]:
        return {}  # it keeps no model

    def run(self, progress: bool = False, executor: Any = None) -> None:
        """Select every norm's recipe into ``out`` (``recipe.json``; the study's job runner marks the folder DONE
        after it, with its seconds)."""
        from bnmem.train.recipe import select_recipes

        select_recipes(list(self.norms), self.trains.arch, self.dataset(), self.trains.train, list(self.seeds),
                       self.out, None if self.lr_grid is None else list(self.lr_grid),
                       max_epochs=self.max_epochs)  # the candidates train under train.threads

    def tidy(self) -> None:
        pass

    def in_driver(self) -> bool:
        return False


def recipe_from(lens_folder: str, selection_folder: str) -> str:
    """The selection's folder relative to a lens's folder (both relative to the run directory)."""
    up = "/".join([".."] * len(Path(lens_folder).parts))
    return f"{up}/{selection_folder}"


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
