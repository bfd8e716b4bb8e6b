"""Per-norm training recipes selected on the validation split.

The paper trains every norm with one shared recipe. A shared learning rate can
handicap one norm (an unnormalized network may need a smaller or larger step
than a BN network), so that part of "BN memorizes more" could be "the other
norm trains worse". This module states a small, fixed plan for choosing each
norm's learning rate without the test set and without any LiRA candidate:

- **Validation split**: ``data.val_fraction`` of the in-distribution training
  pool, held out with clean labels before any corruption
  (:func:`bnmem.data.load_dataset`). No model trains on it and it is not part
  of the LiRA keep matrix; the test split is untouched.
- **Grid**: the shared learning rate times :data:`LR_FACTORS` (0.25x to 4x; with
  the demo's 0.05: 0.0125, 0.025, 0.05, 0.1, 0.2), the same candidates for every
  norm, or an explicit ``lr_grid``. Everything else in the recipe is shared.
- **Runs**: each candidate trains from the selection seeds on as much data
  as the models it chooses for: the whole pool for memorize-style runs, the
  shadow models' IN halves for LiRA.
- **Criterion**: mean validation accuracy at the last epoch over the selection
  seeds (eval-mode BN); a diverged run counts as accuracy 0. Ties (equal to
  1e-9) go to the candidate closest to the shared learning rate in log scale,
  then to the smaller one.

``recipe: shared`` (the default, the paper's setting) uses ``train`` as is for
every norm; ``recipe: per-norm`` uses the selected learning rate per norm and
records the selection (:func:`selection_record`) so results show it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import field_validator, model_validator

from bnmem import io
from bnmem.config import ModelConfig, StrictModel, TrainConfig
from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError

RECIPES = ("shared", "per-norm")
# Candidate learning rates relative to the shared one (declared before any selection was run).
LR_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)
CRITERION = ("mean validation accuracy at the last epoch over the selection seeds (eval-mode BN; a diverged run "
             "counts as 0); ties go to the learning rate closest to the shared one in log scale, then the smaller")
RECIPE_FILE = "recipe.json"


class RecipeOptions(StrictModel):
    """The recipe options a lens config mixes in.

    Attributes:
        recipe: ``shared`` (one recipe for every norm, the paper's setting) or
            ``per-norm`` (each norm's learning rate selected on the validation split).
        lr_grid: candidate learning rates for ``per-norm`` (None: the shared
            learning rate times :data:`LR_FACTORS`).
    """

    recipe: Literal["shared", "per-norm"] = "shared"
    lr_grid: list[float] | None = None

    @field_validator("lr_grid")
    @classmethod
    def _grid(cls, v: list[float] | None) -> list[float] | None:
        if v is None:
            return v
        if not v or any(not (x > 0 and math.isfinite(x)) for x in v):
            raise BnmemError(f"lr_grid must list positive learning rates, got {v}")
        return sorted(dict.fromkeys(float(x) for x in v))

    @model_validator(mode="after")
    def _needs_validation(self) -> RecipeOptions:
        data = getattr(self, "data", None)
        if self.recipe == "per-norm" and data is not None and data.val_fraction <= 0:
            raise BnmemError("recipe 'per-norm' selects on a validation split: set data.val_fraction (e.g. 0.1)")
        return self


def lr_grid(train: TrainConfig, grid: Sequence[float] | None = None) -> list[float]:
    """The candidate learning rates: ``grid`` if given, else ``train.lr`` times :data:`LR_FACTORS`."""
    if grid is not None:
        return sorted(float(x) for x in grid)
    return [float(f"{train.lr * f:.6g}") for f in LR_FACTORS]


def pick(candidates: dict[float, float], shared_lr: float) -> float:
    """The selected learning rate: highest score, ties to the one closest to ``shared_lr`` (log), then smaller.

    Args:
        candidates: learning rate -> mean validation accuracy.
        shared_lr: the shared recipe's learning rate.

    Returns:
        The chosen learning rate.
    """
    best = max(candidates.values())
    tied = [lr for lr, acc in candidates.items() if acc >= best - 1e-9]
    return min(tied, key=lambda lr: (abs(math.log(lr / shared_lr)), lr))


def _val_accuracy(model_cfg: ModelConfig, ds: OutlierDataset, train: TrainConfig, seed: int,
                  run_dir: Path, train_idx: np.ndarray | None = None) -> float | None:
    """Validation accuracy at the last epoch of one candidate run (None: diverged). Resumable."""
    from bnmem.train.trainer import load_finished, seeded_model, train_model

    model = seeded_model(model_cfg, ds, seed)
    if (run_dir / "diverged.json").exists():
        return None
    if io.is_done(run_dir):
        history = load_finished(model, run_dir).history
    else:
        try:
            history = train_model(model, ds, train, seed, run_dir=run_dir, train_idx=train_idx, progress=False).history
        except FloatingPointError as e:
            io.write_json(run_dir / "diverged.json", {"error": str(e)})
            return None
    return history[-1].get("val_acc")


def select_lr(model_cfg: ModelConfig, ds: OutlierDataset, train: TrainConfig, seeds: Sequence[int],
              out: str | Path, grid: Sequence[float] | None = None,
              train_sets: Sequence[np.ndarray] | None = None) -> dict[str, Any]:
    """Select one norm's learning rate on the validation split (see the module docstring).

    Args:
        model_cfg: architecture and norm.
        ds: the dataset; must have a validation split.
        train: the shared recipe (only ``lr`` varies).
        seeds: selection seeds (initial weights and data order, as in the lenses).
        out: folder for the candidate runs (resumable; ``<out>/lr<lr>/seed<k>``).
        grid: candidate learning rates (None: :func:`lr_grid`).
        train_sets: the training examples of each seed's run (None: the whole
            pool); LiRA passes its shadow models' IN sets, so candidates train
            on as much data as the models they choose for.

    Returns:
        ``{"lr", "shared_lr", "candidates": [{"lr", "val_acc", "val_acc_per_seed", "diverged"}]}``.

    Raises:
        BnmemError: the dataset has no validation split.
    """
    if not ds.n_val:
        raise BnmemError("learning-rate selection needs a validation split: set data.val_fraction (e.g. 0.1)")
    out = Path(out)
    rows, scores = [], {}
    for lr in lr_grid(train, grid):
        cand = train.model_copy(update={"lr": lr})
        accs = [_val_accuracy(model_cfg, ds, cand, s, out / f"lr{lr:g}" / f"seed{s}",
                              None if train_sets is None else np.asarray(train_sets[i]))
                for i, s in enumerate(seeds)]
        scores[lr] = float(np.mean([0.0 if a is None else a for a in accs]))
        rows.append({"lr": lr, "val_acc": scores[lr], "val_acc_per_seed": accs,
                     "diverged": sum(a is None for a in accs)})
    return {"lr": pick(scores, train.lr), "shared_lr": train.lr, "candidates": rows}


def select_recipes(norms: Sequence[str], arch: str, ds: OutlierDataset, train: TrainConfig, seeds: Sequence[int],
                   out: str | Path, grid: Sequence[float] | None = None,
                   train_sets: Sequence[np.ndarray] | None = None, train_sets_note: str = "the whole training pool"
                   ) -> dict[str, Any]:
    """Per-norm learning rates selected on the validation split; cached in ``<out>/recipe.json``.

    Args:
        norms: the norms compared.
        arch: their architecture.
        ds: the dataset (with a validation split).
        train: the shared recipe.
        seeds: selection seeds.
        out: folder of the selection runs and ``recipe.json``.
        grid: candidate learning rates (None: :func:`lr_grid`).
        train_sets: each seed's training examples (None: the whole pool).
        train_sets_note: what ``train_sets`` are, for the record.

    Returns:
        A dict with ``mode``, ``grid``, ``criterion``, ``seeds``, ``n_val``,
        ``trained_on`` and ``per_norm`` ({norm: :func:`select_lr` result}).
    """
    out = Path(out)
    record = {"mode": "per-norm", "grid": lr_grid(train, grid), "criterion": CRITERION,
              "seeds": [int(s) for s in seeds], "n_val": ds.n_val, "val_fraction": ds.info.get("val_fraction"),
              "shared": train.model_dump(mode="json"), "trained_on": train_sets_note}
    cached = out / RECIPE_FILE
    if cached.exists():
        saved = io.read_json(cached)
        if {k: saved.get(k) for k in record} == record and set(saved.get("per_norm", {})) >= set(norms):
            return saved
    record["per_norm"] = {n: select_lr(ModelConfig(arch=arch, norm=n), ds, train, seeds, out / n, grid, train_sets)
                          for n in norms}
    io.write_json(cached, record)
    return record


def shared_record(train: TrainConfig) -> dict[str, Any]:
    """The record of the shared recipe (nothing selected)."""
    return {"mode": "shared", "shared": train.model_dump(mode="json")}


def train_for(train: TrainConfig, selection: dict[str, Any], norm: str) -> TrainConfig:
    """The recipe ``norm`` trains with: ``train``, with the selected learning rate under ``per-norm``."""
    if selection.get("mode") != "per-norm":
        return train
    return train.model_copy(update={"lr": float(selection["per_norm"][norm]["lr"])})
