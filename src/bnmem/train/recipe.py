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
  shadow models' IN halves for LiRA. All candidates of a norm train together
  through the ensemble engine (per-model learning rates), each as it would
  alone (equal to one-by-one training in float64, ``tests/test_recipe.py``).
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
CANDIDATES_FILE = "candidates.json"


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


def _candidate_key(model_cfg: ModelConfig, train: TrainConfig, lrs: list[float], seeds: Sequence[int],
                   train_sets: Sequence[np.ndarray] | None) -> dict[str, Any]:
    """What a cached candidate record must match to be reused (the training sets by a digest)."""
    import hashlib

    digest = None
    if train_sets is not None:
        h = hashlib.sha256()
        for a in train_sets:
            h.update(np.asarray(a, dtype=np.int64).tobytes() + b"|")
        digest = h.hexdigest()
    return {"arch": model_cfg.arch, "norm": model_cfg.norm, "lrs": lrs, "seeds": [int(s) for s in seeds],
            "train": train.model_dump(mode="json"), "train_sets": digest}


def candidate_accuracies(model_cfg: ModelConfig, ds: OutlierDataset, train: TrainConfig, lrs: list[float],
                         seeds: Sequence[int], train_sets: Sequence[np.ndarray] | None = None,
                         method: str = "auto") -> list[list[float | None]]:
    """Validation accuracy at the last epoch of every (learning rate, seed) candidate; None: diverged.

    All ``len(lrs) × len(seeds)`` candidates train together through the ensemble engine
    (:func:`bnmem.train.ensemble.train_candidates`, per-model learning rates), each as it would train
    alone: from ``seeded_model(model_cfg, ds, seed)``, on ``train_sets[i]`` (None: the whole pool) in
    the seed's batch order.

    Returns:
        ``[lr index][seed index]`` accuracies.
    """
    from bnmem.measure.memorization import val_accuracy
    from bnmem.train.ensemble import train_candidates

    pairs = [(lr, i) for lr in lrs for i in range(len(seeds))]
    everything = np.arange(ds.n_train)
    idx = [everything if train_sets is None else np.asarray(train_sets[i]) for _, i in pairs]
    models = train_candidates(model_cfg, ds, train, [lr for lr, _ in pairs], [int(seeds[i]) for _, i in pairs],
                              idx, method)
    accs = [None if m is None else val_accuracy(m, ds) for m in models]
    return [accs[j * len(seeds):(j + 1) * len(seeds)] for j in range(len(lrs))]


def select_lr(model_cfg: ModelConfig, ds: OutlierDataset, train: TrainConfig, seeds: Sequence[int],
              out: str | Path, grid: Sequence[float] | None = None,
              train_sets: Sequence[np.ndarray] | None = None, method: str = "auto") -> dict[str, Any]:
    """Select one norm's learning rate on the validation split (see the module docstring).

    Args:
        model_cfg: architecture and norm.
        ds: the dataset; must have a validation split.
        train: the shared recipe (only ``lr`` varies).
        seeds: selection seeds (initial weights and data order, as in the lenses).
        out: folder for the candidates' record (``candidates.json``; a rerun reuses it).
        grid: candidate learning rates (None: :func:`lr_grid`).
        train_sets: the training examples of each seed's run (None: the whole
            pool); LiRA passes its shadow models' IN sets, so candidates train
            on as much data as the models they choose for.
        method: the ensemble method (``auto``; ``sequential`` is the one-by-one oracle).

    Returns:
        ``{"lr", "shared_lr", "candidates": [{"lr", "val_acc", "val_acc_per_seed", "diverged"}]}``.

    Raises:
        BnmemError: the dataset has no validation split.
    """
    if not ds.n_val:
        raise BnmemError("learning-rate selection needs a validation split: set data.val_fraction (e.g. 0.1)")
    out = Path(out)
    lrs = lr_grid(train, grid)
    key = _candidate_key(model_cfg, train, lrs, seeds, train_sets)
    cached = out / CANDIDATES_FILE
    saved = io.read_json(cached) if cached.exists() else None
    if isinstance(saved, dict) and saved.get("key") == key:
        per_lr = saved["val_acc"]
    else:
        per_lr = candidate_accuracies(model_cfg, ds, train, lrs, seeds, train_sets, method)
        io.write_json(cached, {"key": key, "val_acc": per_lr})
    rows, scores = [], {}
    for lr, accs in zip(lrs, per_lr):
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
