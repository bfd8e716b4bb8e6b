"""Do the shadow copies resemble the model? Their train/test accuracy beside the model's.

The membership numbers describe the *recipe* the shadow copies train with; they describe the
user's model only as far as the copies fit their data as the model fits its own. A copy that
reaches 46% training accuracy where the model reaches 94% under-states what the model leaks.
So the audit shows both, and warns in one line when the copies' accuracy on their own training
half differs from the model's training accuracy by more than :data:`ACCURACY_MARGIN`.
"""

from __future__ import annotations

from typing import Any

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
