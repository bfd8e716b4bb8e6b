"""Do the shadow copies resemble the model? Their training length, their accuracy beside the model's.

The membership numbers describe the *recipe* the shadow copies train with; they describe the
user's model only as far as the copies fit their data as the model fits its own. So:

* by default the copies take the model's number of optimizer steps: each copy trains on half the
  training set, so at the model's epochs it would take about half the model's steps (the issue-27
  scenario: copies at 46% training accuracy beside a model at 80%). :func:`step_matched` scales the
  epochs so the steps agree (the model's steps counted as a ``DataLoader`` without ``drop_last``
  takes them, the copies' as bnmem's trainer does, full batches only);
* ``--match-accuracy`` remains for recipes that differ (:func:`match_epochs`);
* when the copies' training accuracy on their own half still differs from the model's by more
  than :data:`ACCURACY_MARGIN`, the audit gives no level: "Risk: not assessed" with the gap and
  the fix (:func:`calibration`);
* a model at chance accuracy, or one with more outputs than the data have classes, is flagged
  before any copy trains (:func:`model_checks`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from bnmem.config import TrainConfig
from bnmem.errors import BnmemError

if TYPE_CHECKING:  # annotations only: the audit's report reads calibration() without loading torch
    from torch import nn

    from bnmem.data.dataset import OutlierDataset

# Declared margin (fraction): shadow training accuracy this far from the model's means "not assessed".
ACCURACY_MARGIN = 0.10
# A training accuracy within this much (fraction) of always answering the largest class is "chance".
CHANCE_MARGIN = 0.05
NOT_ASSESSED = "not assessed"


def steps_per_epoch(n: int, batch_size: int, drop_last: bool) -> int:
    """Optimizer steps in one pass over ``n`` examples (at least 1)."""
    bs = min(batch_size, max(n, 1))
    return max(n // bs if drop_last else math.ceil(n / bs), 1)


def step_matched(train: TrainConfig, n_train: int) -> tuple[TrainConfig, dict[str, Any]]:
    """The copies' recipe with the epochs that give them the model's number of optimizer steps.

    ``train.epochs`` is the model's; the model saw ``n_train`` examples per epoch in batches of
    ``train.batch_size`` (the last partial batch counted), a copy sees ``n_train // 2`` (full batches
    only). The copies' epochs are rounded up.

    Returns:
        The recipe and ``{"model_epochs", "model_steps", "copy_examples", "epochs", "copy_steps", "text"}``.
    """
    model_steps = train.epochs * steps_per_epoch(n_train, train.batch_size, drop_last=False)
    half = n_train // 2
    per_epoch = steps_per_epoch(half, train.batch_size, drop_last=True)
    epochs = max(math.ceil(model_steps / per_epoch), 1)
    text = (f"your {train.epochs} epochs on {n_train} examples (batch {train.batch_size}) are {model_steps} steps; "
            f"each copy trains on {half}, so {epochs} epochs give it {epochs * per_epoch} steps")
    return train.model_copy(update={"epochs": epochs}), {
        "model_epochs": train.epochs, "model_steps": model_steps, "copy_examples": half, "epochs": epochs,
        "copy_steps": epochs * per_epoch, "text": text}


def calibration(result: dict[str, Any]) -> dict[str, Any] | None:
    """The model's and the shadow copies' accuracies, the gap, and whether the audit can give a level.

    Returns:
        None without shadow copies, else ``{"model_train", "model_test", "shadow_train", "shadow_test",
        "train_gap", "margin", "assessed", "warning"}``; ``warning`` (None when within the margin) says the
        gap and the fix.
    """
    mem, acc = result.get("membership"), result["accuracy"]
    if not mem or acc.get("train_acc") is None:
        return None
    shadow = mem["shadow_accuracy"]
    gap = shadow["train_in"] - acc["train_acc"]
    assessed = abs(gap) <= ACCURACY_MARGIN
    warning = None if assessed else (
        f"The shadow copies reach {100 * shadow['train_in']:.0f}% training accuracy on their half, "
        f"{100 * abs(gap):.0f} points {'below' if gap < 0 else 'above'} your model's {100 * acc['train_acc']:.0f}% "
        f"(declared margin {100 * ACCURACY_MARGIN:.0f}): {calibration_fix(mem, gap)}")
    return {"model_train": acc["train_acc"], "model_test": acc.get("test_acc"), "shadow_train": shadow["train_in"],
            "shadow_test": shadow.get("test"), "train_gap": gap, "margin": ACCURACY_MARGIN, "assessed": assessed,
            "warning": warning}


def calibration_fix(mem: dict[str, Any], gap: float) -> str:
    """What to do about copies that miss the model's accuracy, given what the audit already tried."""
    matched, epochs = mem.get("matched"), mem["train"].get("epochs")
    if mem.get("train_fn"):
        return (f"check that {mem['train_fn']['name']} trains a copy as your model was trained (its length, "
                "optimizer, schedule, augmentation; a copy sees half the data, so as many epochs are half the "
                "steps); bnmem does not lengthen your function's training.")
    if gap > 0:
        return ("they fit their half more than your model fits its data; check that the recipe flags are your "
                "training's (--lr, --momentum, --weight-decay, --augment), or give --same-epochs to train the "
                "copies for --epochs as given rather than for your model's number of steps.")
    if matched is None:
        return (f"they under-fit at {epochs} epochs; rerun with --match-accuracy (it extends their training until a "
                "probe copy reaches your model's accuracy), and check the recipe flags are your training's.")
    return (f"--match-accuracy stopped at {matched['max_epochs']} epochs without reaching it; rerun with a larger "
            f"--max-epochs (e.g. {2 * matched['max_epochs']}), or check the recipe flags (--lr, --optimizer, "
            "--momentum) are your training's.")


def model_checks(acc: dict[str, Any], ds: OutlierDataset, n_outputs: int) -> list[dict[str, str]]:
    """One-line flags about the model itself, printed and recorded before any copy trains.

    Returns:
        ``[{"kind": "outputs" | "chance", "text"}]``: more outputs than the data have classes; a training
        accuracy within :data:`CHANCE_MARGIN` of always answering the largest class (an untrained model, or
        data not read as in its training). A chance-level model gets no level (:func:`level_blocker`).
    """
    found = []
    if n_outputs > ds.num_classes:
        found.append({"kind": "outputs", "text": (
            f"the model outputs {n_outputs} scores per example but the data have {ds.num_classes} classes: "
            + (f"output {ds.num_classes} is" if n_outputs - ds.num_classes == 1
               else f"outputs {ds.num_classes}–{n_outputs - 1} are")
            + " never a label here; if the model was trained on more classes, "
            "audit it on the data it was trained on (every class folder), or its outputs and the labels may not "
            "correspond")})
    chance = float(np.bincount(ds.y_train.numpy(), minlength=ds.num_classes).max() / max(ds.n_train, 1))
    if acc.get("train_acc") is not None and acc["train_acc"] <= chance + CHANCE_MARGIN:
        found.append({"kind": "chance", "text": (
            f"the model's training accuracy is {100 * acc['train_acc']:.0f}%, no more than {100 * CHANCE_MARGIN:.0f} "
            f"points above chance ({100 * chance:.0f}%, always the largest class): it looks untrained, or the data are "
            "not read as in its training (--mean/--std, --channels, --image-size); no risk level is given for it")})
    return found


def level_blocker(result: dict[str, Any], cal: dict[str, Any] | None) -> str | None:
    """Why the audit gives no level although it measured (None when it may give one): a chance-level model,
    or shadow copies outside the declared accuracy margin."""
    chance = next((w["text"] for w in result.get("warnings") or [] if w["kind"] == "chance"), None)
    if chance is not None and result.get("membership"):
        return f"{chance[0].upper()}{chance[1:]}."
    if cal is not None and not cal["assessed"]:
        return cal["warning"]
    return None


def probe_accuracy(model: nn.Module, ds: OutlierDataset, train: TrainConfig, shadow_models: int) -> float:
    """Training accuracy (eval mode, on its own half) of shadow copy 0 trained with ``train``: the copy the
    membership section trains first (same seed, same keep row, same query)."""
    from bnmem.attacks import paired_keep_matrix
    from bnmem.shadow.copies import copy_views, trained_copy
    from bnmem.shadow.query import QueryOptions, query_model

    keep = paired_keep_matrix(shadow_models, ds.n_train, 0)
    net = trained_copy(model, ds, keep, train, 0, None)[0].to(train.device)
    return float(query_model(net, ds, copy_views(train, ds), QueryOptions()).accuracy(ds, keep[0])["train_in"])


def match_epochs(model: nn.Module, ds: OutlierDataset, train: TrainConfig, target: float, shadow_models: int,
                 max_epochs: int | None = None, margin: float = ACCURACY_MARGIN) -> tuple[TrainConfig, dict[str, Any]]:
    """``--match-accuracy``: the epochs at which a shadow copy reaches the model's training accuracy.

    One probe copy trains with the recipe's epochs, then twice as many, and so on, until its
    training accuracy is within ``margin`` below ``target`` or the next step would pass
    ``max_epochs`` (default 4x the recipe's epochs). Each probe retrains from scratch, so the
    recipe reported is exactly the one the copies use.

    Returns:
        The recipe to use and ``{"target", "margin", "max_epochs", "trail": [{"epochs", "train_acc"}],
        "reached", "epochs", "text"}``.
    """
    budget = max_epochs or 4 * train.epochs
    if budget < train.epochs:
        raise BnmemError(f"--max-epochs {budget} is below the copies' {train.epochs} epochs; give at least that")
    epochs, trail = train.epochs, []
    while True:
        cfg = train.model_copy(update={"epochs": epochs})
        acc = probe_accuracy(model, ds, cfg, shadow_models)
        trail.append({"epochs": epochs, "train_acc": acc})
        reached = acc >= target - margin
        if reached or epochs >= budget:
            break
        epochs = min(2 * epochs, budget)
    steps = ", ".join(f"{t['epochs']} epochs → {100 * t['train_acc']:.0f}%" for t in trail)
    text = (f"--match-accuracy (one probe copy on its half): {steps}; "
            + (f"the copies train {epochs} epochs to match your model's {100 * target:.0f}%." if reached else
               f"the budget of {budget} epochs did not reach your model's {100 * target:.0f}% (within "
               f"{100 * margin:.0f} points); the copies train {epochs} epochs."))
    return cfg, {"target": target, "margin": margin, "max_epochs": budget, "trail": trail, "reached": reached,
                 "epochs": epochs, "text": text}
