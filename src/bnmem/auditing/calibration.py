"""Do the shadow copies resemble the model? Their train/test accuracy beside the model's.

The membership numbers describe the *recipe* the shadow copies train with; they describe the
user's model only as far as the copies fit their data as the model fits its own. A copy that
reaches 46% training accuracy where the model reaches 94% under-states what the model leaks.
So the audit shows both, and warns in one line when the copies' accuracy on their own training
half differs from the model's training accuracy by more than :data:`ACCURACY_MARGIN`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bnmem.config import TrainConfig
from bnmem.errors import BnmemError

if TYPE_CHECKING:  # annotations only: the audit's report reads calibration() without loading torch
    from torch import nn

    from bnmem.data.dataset import OutlierDataset

# Declared margin (fraction): shadow training accuracy this far from the model's draws the warning.
ACCURACY_MARGIN = 0.10


def calibration(result: dict[str, Any]) -> dict[str, Any] | None:
    """The model's and the shadow copies' accuracies, the gap and the warning (None without shadow copies).

    Returns:
        ``{"model_train", "model_test", "shadow_train", "shadow_test", "train_gap", "margin", "warning"}``;
        ``shadow_train`` is the copies' accuracy on their own training halves, ``warning`` None when within
        the margin.
    """
    mem, acc = result.get("membership"), result["accuracy"]
    if not mem or acc.get("train_acc") is None:
        return None
    shadow = mem["shadow_accuracy"]
    gap = shadow["train_in"] - acc["train_acc"]
    warning = None
    if abs(gap) > ACCURACY_MARGIN:
        side = "below" if gap < 0 else "above"
        warning = (f"The shadow copies reach {100 * shadow['train_in']:.0f}% training accuracy, "
                   f"{100 * abs(gap):.0f} points {side} your model's {100 * acc['train_acc']:.0f}% (margin "
                   f"{100 * ACCURACY_MARGIN:.0f}): the attack numbers describe a recipe that fits "
                   f"{'less' if gap < 0 else 'more'} than your model; give your recipe's flags (--epochs, --lr, "
                   "...) or --match-accuracy.")
    return {"model_train": acc["train_acc"], "model_test": acc.get("test_acc"), "shadow_train": shadow["train_in"],
            "shadow_test": shadow.get("test"), "train_gap": gap, "margin": ACCURACY_MARGIN, "warning": warning}


def probe_accuracy(model: nn.Module, ds: OutlierDataset, train: TrainConfig, shadow_models: int) -> float:
    """Training accuracy (eval mode, on its own half) of shadow copy 0 trained with ``train``: the copy the
    membership section trains first (same seed, same keep row, same query)."""
    from bnmem.attacks import keep_matrix
    from bnmem.shadow.copies import copy_views, trained_copy
    from bnmem.shadow.query import QueryPlan, query_model

    keep = keep_matrix(shadow_models, ds.n_train, 0)
    net = trained_copy(model, ds, keep, train, 0, None)[0].to(train.device)
    return float(query_model(net, ds, copy_views(train, ds), QueryPlan()).accuracy(ds, keep[0])["train_in"])


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
        raise BnmemError(f"--max-epochs {budget} is below --epochs {train.epochs}")
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
               f"{100 * margin:.0f} points); the copies train {epochs} epochs, and the attacks may under-state "
               "what your model leaks."))
    return cfg, {"target": target, "margin": margin, "max_epochs": budget, "trail": trail, "reached": reached,
                 "epochs": epochs, "text": text}
