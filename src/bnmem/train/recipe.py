"""Per-norm training recipes selected on the validation split: the one module that owns recipe selection.

The paper trains every norm with one shared recipe (the same learning rate and
the same number of epochs). A recipe tuned for neither arm can handicap one of
them (an unnormalized network may need a larger step, and more epochs, than a
BN network), so that part of "BN memorizes more" could be "the other norm
trained worse, or less". The fair comparison gives each arm the recipe it
would get from a practitioner who tunes on held-out data: its own learning
rate and training until its validation accuracy stops improving. This module
declares that selection; the analysis plan cites these names.

- **Validation split**: ``data.val_fraction`` of the in-distribution training
  pool, held out with clean labels before any corruption
  (:func:`bnmem.data.load_dataset`). No model trains on it and it is not part
  of the LiRA keep matrix; the test split is untouched.
- **Grid** (:data:`LR_FACTORS`): the shared learning rate times 0.25, 0.5, 1,
  2 and 4 (the demo's 0.05: 0.0125 ... 0.2), the same candidates for every norm,
  or an explicit ``lr_grid``. Everything else in the recipe (optimizer,
  momentum, weight decay, schedule, batch size) is shared.
- **Plateau rule** (:func:`plateau_stop`, :data:`PLATEAU_PATIENCE`,
  :data:`PLATEAU_MIN_DELTA_EXAMPLES`, :data:`PLATEAU_MIN_EPOCHS`,
  :data:`PLATEAU_CAP_FACTOR`): each candidate trains until its validation
  accuracy plateaus, at most the cap; its stopping epoch is part of its recipe.
- **Criterion** (:data:`CRITERION`, :func:`plateau_score`, :func:`pick`): the
  mean validation accuracy over the last :data:`SCORE_WINDOW` epochs up to the
  stopping epoch (mean over the selection seeds; a diverged run counts as 0);
  the highest wins, ties (within :data:`TIE_TOLERANCE`) to the learning rate
  closest to the shared one in log scale, then the smaller.
- **The selected recipe** of a norm is its winner's learning rate and stopping
  epoch. Every model of that arm then trains for exactly that many epochs at
  that rate, and the model used is the last epoch's (:data:`MODEL_USED`).
- **Runs**: all candidates of a norm train together through the ensemble engine
  (per-model learning rates), each as it would alone (equal to one-by-one
  training in float64, ``tests/test_recipe.py``); the validation accuracy of
  every candidate is recorded after every epoch, and training ends as soon as
  every candidate has stopped.

``recipe: per-norm`` ("fair arms") uses the selected recipe per norm and records
the selection (:func:`select_recipes`) so results show it; ``recipe: shared`` is
the paper's protocol (:data:`PAPER_PROTOCOL`): one recipe for every norm, the
same epochs. A study selects once per (dataset, architecture, outlier setting),
on replicate 0's data (:mod:`bnmem.study.recipes`), and every lens of the
setting's per-norm cells trains with that selection (``recipe_from``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, field_validator, model_validator

from bnmem import io
from bnmem.config import ModelConfig, StrictModel, TrainConfig
from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError
from bnmem.names import FAIR_ARMS, PAPER_PROTOCOL, RECIPE_LABELS, RECIPES  # noqa: F401 (re-exported)

# The recipes' names and labels are declared with the other names (bnmem.names: FAIR_ARMS, PAPER_PROTOCOL,
# RECIPE_LABELS), so that configuration code can read them without torch.

# Fair arms' selection and plateau rule are declared by the analysis plan (bnmem.analysis_plan), which cites them.
from bnmem.analysis_plan import (  # noqa: F401 (re-exported)
    CRITERION, LR_FACTORS, MODEL_USED, PLATEAU_CAP_FACTOR, PLATEAU_MIN_DELTA_EXAMPLES, PLATEAU_MIN_EPOCHS,
    PLATEAU_PATIENCE, SCORE_WINDOW, STOP_CAP, STOP_PLATEAU, TIE_TOLERANCE,
)

RECIPE_FILE = "recipe.json"
CANDIDATES_FILE = "candidates.json"


def plateau_rule(n_val: int | None = None, cap: int | None = None) -> dict[str, Any]:
    """The declared plateau rule as a record (``min_delta`` in accuracy when ``n_val`` is known)."""
    return {"patience": PLATEAU_PATIENCE, "min_delta_examples": PLATEAU_MIN_DELTA_EXAMPLES,
            "score_window": SCORE_WINDOW,
            **({"min_delta": PLATEAU_MIN_DELTA_EXAMPLES / n_val} if n_val else {}),
            "min_epochs": PLATEAU_MIN_EPOCHS, "cap": cap, "cap_factor": PLATEAU_CAP_FACTOR,
            "model_used": MODEL_USED}


def cap_epochs(train: TrainConfig, max_epochs: int | None = None) -> int:
    """The most epochs a per-norm recipe may train: ``max_epochs``, else :data:`PLATEAU_CAP_FACTOR` × the shared."""
    return int(max_epochs) if max_epochs is not None else PLATEAU_CAP_FACTOR * int(train.epochs)


def plateau_stop(curve: Sequence[float], min_delta: float, patience: int = PLATEAU_PATIENCE,
                 min_epochs: int = PLATEAU_MIN_EPOCHS, cap: int | None = None) -> tuple[int, str] | None:
    """Where the plateau rule stops on a validation-accuracy curve, and why.

    Epoch e (1-based) improves when ``curve[e-1] >= best + min_delta`` (to :data:`TIE_TOLERANCE`; best: the
    accuracy at the last improving epoch; epoch 1 always improves). Training stops at the first epoch
    e >= ``min_epochs`` after ``patience`` consecutive epochs without an improvement (:data:`STOP_PLATEAU`),
    else at ``cap`` (:data:`STOP_CAP`).

    Args:
        curve: validation accuracy after epochs 1, 2, ...
        min_delta: the smallest improvement that counts.
        patience, min_epochs: as declared (:data:`PLATEAU_PATIENCE`, :data:`PLATEAU_MIN_EPOCHS`).
        cap: the most epochs (None: no cap).

    Returns:
        ``(stopping epoch, reason)``, or None when the curve ends before the rule decides.
    """
    best, since = -math.inf, 0
    for e, acc in enumerate(curve, start=1):
        if acc >= best + min_delta - TIE_TOLERANCE:  # exactly one example more counts, whatever the rounding
            best, since = float(acc), 0
        else:
            since += 1
        if e >= min_epochs and since >= patience:
            return e, STOP_PLATEAU
        if cap is not None and e >= cap:
            return e, STOP_CAP
    return None


class RecipeOptions(StrictModel):
    """The recipe options a lens config mixes in.

    Attributes:
        recipe: ``per-norm`` (fair arms: each norm's learning rate and epochs selected on the validation
            split) or ``shared`` (the paper's protocol: one recipe for every norm, the same epochs).
        lr_grid: candidate learning rates for ``per-norm`` (None: the shared
            learning rate times :data:`LR_FACTORS`).
        max_epochs: the plateau rule's cap (None: :data:`PLATEAU_CAP_FACTOR` × ``train.epochs``).
        recipe_from: a selection made elsewhere to train with (a folder holding ``recipe.json``, relative to
            the lens's run directory): a study's per-setting selection (:mod:`bnmem.study.recipes`). None: the
            lens selects in its own folder.
    """

    recipe: Literal["shared", "per-norm"] = "shared"
    lr_grid: list[float] | None = None
    max_epochs: int | None = Field(None, ge=1)
    recipe_from: str | None = None

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
        candidates: learning rate -> validation accuracy at its stopping epoch.
        shared_lr: the shared recipe's learning rate.

    Returns:
        The chosen learning rate.
    """
    best = max(candidates.values())
    tied = [lr for lr, acc in candidates.items() if acc >= best - TIE_TOLERANCE]
    return min(tied, key=lambda lr: (abs(math.log(lr / shared_lr)), lr))


def _candidate_key(model_cfg: ModelConfig, train: TrainConfig, lrs: list[float], seeds: Sequence[int],
                   train_sets: Sequence[np.ndarray] | None, cap: int) -> dict[str, Any]:
    """What a cached candidate record must match to be reused (the training sets by a digest)."""
    import hashlib

    digest = None
    if train_sets is not None:
        h = hashlib.sha256()
        for a in train_sets:
            h.update(np.asarray(a, dtype=np.int64).tobytes() + b"|")
        digest = h.hexdigest()
    return {"arch": model_cfg.arch, "norm": model_cfg.norm, "lrs": lrs, "seeds": [int(s) for s in seeds],
            "train": train.model_dump(mode="json"), "train_sets": digest, "rule": plateau_rule(cap=cap)}


def candidate_curves(model_cfg: ModelConfig, ds: OutlierDataset, train: TrainConfig, lrs: list[float],
                     seeds: Sequence[int], cap: int, train_sets: Sequence[np.ndarray] | None = None,
                     method: str = "auto") -> list[list[list[float] | None]]:
    """Validation accuracy after every epoch of every (learning rate, seed) candidate; None: diverged.

    All ``len(lrs) × len(seeds)`` candidates train together through the ensemble engine
    (:func:`bnmem.train.ensemble.train_candidates`, per-model learning rates), each as it would train
    alone: from ``seeded_model(model_cfg, ds, seed)``, on ``train_sets[i]`` (None: the whole pool) in
    the seed's batch order, for at most ``cap`` epochs. Training ends early once the plateau rule has
    stopped every learning rate (the epochs it records do not depend on when training ends).

    Returns:
        ``[lr index][seed index]`` curves (equal lengths: every epoch up to where training ended).
    """
    from bnmem.measure.memorization import val_accuracy
    from bnmem.train.ensemble import train_candidates
    from bnmem.train.trainer import seeded_model

    pairs = [(lr, i) for lr in lrs for i in range(len(seeds))]
    everything = np.arange(ds.n_train)
    idx = [everything if train_sets is None else np.asarray(train_sets[i]) for _, i in pairs]
    curves: list[list[float]] = [[] for _ in pairs]
    probe = seeded_model(model_cfg, ds, int(seeds[0])).to(ds.x_train.dtype)
    min_delta = PLATEAU_MIN_DELTA_EXAMPLES / ds.n_val

    class _AllStopped(Exception):
        pass

    def stopped(j: int) -> bool:
        ks = range(j * len(seeds), (j + 1) * len(seeds))
        n = min(len(curves[k]) for k in ks)
        mean = [float(np.mean([curves[k][e] for k in ks])) for e in range(n)]
        return plateau_stop(mean, min_delta, cap=cap) is not None

    diverged = [False] * len(pairs)

    def on_epoch(epoch: int, members: list[int], states: list[dict[str, Any]]) -> None:
        for k, state in zip(members, states):
            # non-finite weights: diverged (the engine's own mark is only returned when training runs to the end)
            diverged[k] = diverged[k] or not all(bool(t.isfinite().all()) for t in state.values()
                                                 if t.is_floating_point())
            probe.load_state_dict(state)
            acc = 0.0 if diverged[k] else val_accuracy(probe, ds)
            curves[k].append(acc if math.isfinite(acc) else 0.0)
        if epoch < cap and all(stopped(j) for j in range(len(lrs))):  # at the cap training ends anyway
            raise _AllStopped

    try:
        models = train_candidates(model_cfg, ds, train.model_copy(update={"epochs": cap}), [lr for lr, _ in pairs],
                                  [int(seeds[i]) for _, i in pairs], idx, method, on_epoch=on_epoch)
        diverged = [d or m is None for d, m in zip(diverged, models)]
    except _AllStopped:
        pass
    n = min(len(c) for c in curves)
    # A diverged run (non-finite loss; the engine keeps training it) counts as accuracy 0 at every epoch.
    out = [None if d or any(not math.isfinite(a) for a in c) else [float(a) for a in c[:n]]
           for c, d in zip(curves, diverged)]
    return [out[j * len(seeds):(j + 1) * len(seeds)] for j in range(len(lrs))]


def plateau_score(curve: Sequence[float], epochs: int) -> float:
    """A candidate's score: its mean validation accuracy over the last :data:`SCORE_WINDOW` epochs up to
    ``epochs`` (its stopping epoch; fewer when it stopped earlier); 0 for an empty curve."""
    window = list(curve[max(0, epochs - SCORE_WINDOW):epochs])
    return float(np.mean(window)) if window else 0.0


def select_lr(model_cfg: ModelConfig, ds: OutlierDataset, train: TrainConfig, seeds: Sequence[int],
              out: str | Path, grid: Sequence[float] | None = None,
              train_sets: Sequence[np.ndarray] | None = None, method: str = "auto",
              max_epochs: int | None = None) -> dict[str, Any]:
    """Select one norm's recipe (learning rate and epochs) on the validation split (see the module docstring).

    Args:
        model_cfg: architecture and norm.
        ds: the dataset; must have a validation split.
        train: the shared recipe (only ``lr`` and ``epochs`` vary).
        seeds: selection seeds (initial weights and data order, as in the lenses).
        out: folder for the candidates' record (``candidates.json``; a rerun reuses it).
        grid: candidate learning rates (None: :func:`lr_grid`).
        train_sets: the training examples of each seed's run (None: the whole
            pool); LiRA passes its shadow models' IN sets, so candidates train
            on as much data as the models they choose for.
        method: the ensemble method (``auto``; ``sequential`` is the one-by-one oracle).
        max_epochs: the plateau rule's cap (None: :func:`cap_epochs`).

    Returns:
        ``{"lr", "epochs", "stop", "score", "val_acc", "shared_lr", "candidates": [{"lr", "score", "val_acc",
        "val_acc_per_seed", "diverged", "epochs", "stop", "curve"}]}``: ``epochs`` / ``stop`` the stopping
        epoch and why (:data:`STOP_PLATEAU` or :data:`STOP_CAP`), ``score`` the criterion
        (:func:`plateau_score`), ``val_acc`` the accuracy at the stopping epoch, ``curve`` the mean
        validation accuracy after every epoch up to it.

    Raises:
        BnmemError: the dataset has no validation split.
    """
    if not ds.n_val:
        raise BnmemError("learning-rate selection needs a validation split: set data.val_fraction (e.g. 0.1)")
    out = Path(out)
    lrs = lr_grid(train, grid)
    cap = cap_epochs(train, max_epochs)
    key = _candidate_key(model_cfg, train, lrs, seeds, train_sets, cap)
    cached = out / CANDIDATES_FILE
    saved = io.read_json(cached) if cached.exists() else None
    if isinstance(saved, dict) and saved.get("key") == key:
        per_lr = saved["curves"]
    else:
        per_lr = candidate_curves(model_cfg, ds, train, lrs, seeds, cap, train_sets, method)
        io.write_json(cached, {"key": key, "curves": per_lr})
    min_delta = PLATEAU_MIN_DELTA_EXAMPLES / ds.n_val
    n = max((len(c) for runs in per_lr for c in runs if c is not None), default=0)
    rows, scores = [], {}
    for lr, runs in zip(lrs, per_lr):
        filled = [[0.0] * n if c is None else c for c in runs]
        curve = [float(np.mean([c[e] for c in filled])) for e in range(n)]
        stop = plateau_stop(curve, min_delta, cap=cap) or (n, STOP_CAP)  # all diverged from epoch 1: n is 0
        epochs, reason = max(1, stop[0]), stop[1]
        scores[lr] = plateau_score(curve, epochs)
        rows.append({"lr": lr, "score": scores[lr], "val_acc": curve[epochs - 1] if curve else 0.0,
                     "val_acc_per_seed": [None if c is None else c[epochs - 1] for c in runs],
                     "diverged": sum(c is None for c in runs), "epochs": epochs, "stop": reason,
                     "curve": [round(v, 6) for v in curve[:epochs]]})
    lr = pick(scores, train.lr)
    chosen = next(r for r in rows if r["lr"] == lr)
    return {"lr": lr, "epochs": chosen["epochs"], "stop": chosen["stop"], "score": chosen["score"],
            "val_acc": chosen["val_acc"], "shared_lr": train.lr, "candidates": rows}


def select_recipes(norms: Sequence[str], arch: str, ds: OutlierDataset, train: TrainConfig, seeds: Sequence[int],
                   out: str | Path, grid: Sequence[float] | None = None,
                   train_sets: Sequence[np.ndarray] | None = None, train_sets_note: str = "the whole training pool",
                   max_epochs: int | None = None) -> dict[str, Any]:
    """Per-norm recipes (learning rate, epochs) selected on the validation split; cached in ``<out>/recipe.json``.

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
        max_epochs: the plateau rule's cap (None: :func:`cap_epochs`).

    Returns:
        A dict with ``mode``, ``label``, ``grid``, ``criterion``, ``rule`` (:func:`plateau_rule`), ``seeds``,
        ``n_val``, ``trained_on`` and ``per_norm`` ({norm: :func:`select_lr` result}).
    """
    out = Path(out)
    cap = cap_epochs(train, max_epochs)
    record = {"mode": FAIR_ARMS, "label": RECIPE_LABELS[FAIR_ARMS], "grid": lr_grid(train, grid),
              "criterion": CRITERION, "rule": plateau_rule(ds.n_val, cap),
              "seeds": [int(s) for s in seeds], "n_val": ds.n_val, "val_fraction": ds.info.get("val_fraction"),
              "shared": train.model_dump(mode="json"), "trained_on": train_sets_note}
    cached = out / RECIPE_FILE
    if cached.exists():
        saved = io.read_json(cached)
        if {k: saved.get(k) for k in record} == record and set(saved.get("per_norm", {})) >= set(norms):
            return saved
    record["per_norm"] = {n: select_lr(ModelConfig(arch=arch, norm=n), ds, train, seeds, out / n, grid, train_sets,
                                       max_epochs=max_epochs)
                          for n in norms}
    io.write_json(cached, record)
    return record


def read_selection(folder: str | Path, norms: Sequence[str]) -> dict[str, Any]:
    """A selection made elsewhere (``<folder>/recipe.json``, e.g. a study's per-setting selection).

    Raises:
        BnmemError: it is missing or lacks one of ``norms``.
    """
    # lexically: ``folder`` may climb out of a lens folder not created yet (``lira/../..``)
    path = Path(os.path.normpath(Path(folder) / RECIPE_FILE))
    saved = io.read_json(path) if path.exists() else None
    if not isinstance(saved, dict) or not set(saved.get("per_norm") or {}) >= set(norms):
        raise BnmemError(f"no recipe selection for norms {list(norms)} in {path}: run the study's selection "
                         "job first (bnmem run resumes it)")
    return saved


def shared_record(train: TrainConfig) -> dict[str, Any]:
    """The record of the shared recipe, the paper's protocol (nothing selected)."""
    return {"mode": PAPER_PROTOCOL, "label": RECIPE_LABELS[PAPER_PROTOCOL], "shared": train.model_dump(mode="json")}


def train_for(train: TrainConfig, selection: dict[str, Any], norm: str) -> TrainConfig:
    """The recipe ``norm`` trains with: ``train``, with the selected learning rate and epochs under ``per-norm``."""
    if selection.get("mode") != FAIR_ARMS:
        return train
    chosen = selection["per_norm"][norm]
    update: dict[str, Any] = {"lr": float(chosen["lr"])}
    if chosen.get("epochs") is not None:
        update["epochs"] = int(chosen["epochs"])
    return train.model_copy(update=update)


def selection_summary(selection: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per norm: the selected learning rate, epochs, why it stopped, and every candidate's validation accuracy."""
    return {n: {"lr": s["lr"], "epochs": s.get("epochs"), "stop": s.get("stop"), "score": s.get("score"),
                "val_acc": s.get("val_acc"),
                "grid": {f"{c['lr']:g}": {"score": c.get("score"), "val_acc": c["val_acc"], "epochs": c.get("epochs"),
                                          "stop": c.get("stop")}
                         for c in s.get("candidates", [])}}
            for n, s in (selection.get("per_norm") or {}).items()}
