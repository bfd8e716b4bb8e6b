"""Slices of the audit's attacks: per class and by whether your model classifies the example correctly.

A slice is a set of training examples (and, for the target-model audit, of held-out files) chosen by an
attribute the practitioner can act on, as TensorFlow Privacy's ``SlicingSpec`` slices by class and by
correct/incorrect prediction:

* ``class=<name>``: the examples whose given label is that class (the folder name of an image folder, the
  label's number for tensors);
* ``correct`` / ``incorrect``: whether the *shipped model* (eval mode, the identity view) predicts the
  example's given label. The attribute is the model's, not a copy's, so the slices are the same sets of
  files for the copies' attacks and for the target-model audit.

Each slice is attacked like a group (:mod:`bnmem.auditing.leakage`: pooled AUC with a bootstrap interval,
TPRs with exact intervals where estimable) and read with the audit's level rule on both ends of its AUC
interval (:mod:`bnmem.auditing.level`), so a slice of few examples gets a wide interval and reads as a
range ("low to elevated"), never "low" on thin evidence. A slice with fewer than :data:`MIN_SLICE`
examples (members or non-members) is not attacked at all: it is listed as too small to read.

The audit's level stays the level of its groups (the gate's ``low`` / ``auc=`` budgets read what they
read before slices existed). The slices' own level is reported beside it; where counting the slices
raises the level, the headline names the slice that does. Each slice's interval is a 95% interval on
its own: with k slices, about one in 40 lower ends may cross a threshold by chance, which the headline
says when a slice changes the level.

Slice names are also the gate's grammar (:mod:`bnmem.auditing.gate`): ``--fail-at 'class=7:auc=0.6'``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnmem.auditing.findings import LEVELS, band
from bnmem.auditing.leakage import group_metrics, strongest
from bnmem.errors import BnmemError

CORRECT, INCORRECT = "correct", "incorrect"
CLASS_PREFIX = "class="
# A slice with fewer examples (on either side for the target-model audit) than this is not attacked: its
# bootstrap interval would rest on a handful of resampled examples and cover less than it claims.
MIN_SLICE = 10


def class_names(ds: Any) -> list[str]:
    """Each class's name: the image folder's class folders, else the label's number."""
    return list(ds.info.get("classes") or [str(c) for c in range(ds.num_classes)])


def slice_masks(labels: np.ndarray, correct: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """``{slice name: bool mask}`` over the examples: one per class present, then ``correct`` and ``incorrect``."""
    masks = {f"{CLASS_PREFIX}{names[c]}": labels == c for c in range(len(names))}
    masks.update({CORRECT: correct.astype(bool), INCORRECT: ~correct.astype(bool)})
    return {k: m for k, m in masks.items() if m.any()}


def slice_label(name: str) -> str:
    """'class 7', 'the correctly classified examples', 'the misclassified examples'."""
    if name.startswith(CLASS_PREFIX):
        return f"class {name[len(CLASS_PREFIX):]}"
    return "the examples your model classifies correctly" if name == CORRECT else \
        "the examples your model misclassifies"


def check_slice(name: str, names: list[str], flag: str) -> None:
    """A slice named in ``flag`` (``--fail-at``) exists in these data.

    Raises:
        BnmemError: a class the data do not have, in one line naming the classes there are.
    """
    if name.startswith(CLASS_PREFIX) and name[len(CLASS_PREFIX):] not in names:
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        raise BnmemError(f"{flag}: no class {name[len(CLASS_PREFIX):]!r} in the data (the classes are {shown})")


def too_small(n_members: int, n_nonmembers: int | None = None) -> str | None:
    """Why a slice is not attacked (None when it is large enough)."""
    sides = [n_members] if n_nonmembers is None else [n_members, n_nonmembers]
    if min(sides) >= MIN_SLICE:
        return None
    have = f"{n_members} examples" if n_nonmembers is None else f"{n_members} members and {n_nonmembers} non-members"
    return f"not measured: {have}, fewer than {MIN_SLICE}"


def copies_slices(raw: dict[str, Any], masks: dict[str, np.ndarray], seed: int = 0,
                  attacks: tuple[str, ...] = ("online", "rmia")) -> dict[str, Any]:
    """The copies' attacks on each slice, from the leave-one-out scores kept in memory (``raw``: ``scores``
    [targets, n] per attack and ``members``): ``{"leakage": {attack: {slice: metrics}}, "sizes", "skipped"}``."""
    leakage: dict[str, dict[str, Any]] = {a: {} for a in attacks if a in raw["scores"]}
    skipped = {}
    for name, mask in masks.items():
        why = too_small(int(mask.sum()))
        if why:
            skipped[name] = why
            continue
        for a in leakage:
            leakage[a][name] = group_metrics(raw["scores"][a][:, mask], raw["members"][:, mask], seed)
    return {"definition": DEFINITION, "leakage": leakage, "sizes": {k: int(m.sum()) for k, m in masks.items()},
            "skipped": skipped}


DEFINITION = ("per class (the example's given label) and by whether your model (eval mode) predicts that label; "
              f"a slice of fewer than {MIN_SLICE} examples is not attacked")


def interval_level(name: str, attack: str, g: dict[str, Any]) -> dict[str, Any]:
    """A slice's (or the target's) reading under one attack: the AUC, its interval and the level of each end."""
    from bnmem.auditing.level import AUC_ELEVATED, AUC_MODERATE, ends_text, level_range

    lo, hi = g["ci"]["auc"]
    lower, upper = band(lo, AUC_MODERATE, AUC_ELEVATED), band(hi, AUC_MODERATE, AUC_ELEVATED)
    return {"group": name, "attack": attack, "auc": g["auc"], "auc_ci": [lo, hi], "level_lower": lower,
            "level_upper": upper, "level": level_range(lower, upper), "words": ends_text(lo, hi),
            "n_examples": g["n_examples"]}


def slice_levels(leakage: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each measured slice under its strongest attack (the highest lower AUC end, as for the groups)."""
    names = dict.fromkeys(s for subs in leakage.values() for s in subs)
    return [interval_level(s, *strongest(leakage, s)) for s in names]


def worst(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The reading that reaches highest: the highest upper level, then lower level, then lower AUC end."""
    return max(items, key=lambda g: (LEVELS.index(g["level_upper"]), LEVELS.index(g["level_lower"]),
                                     g["auc_ci"][0]), default=None)


def slices_risk(result: dict[str, Any]) -> dict[str, Any] | None:
    """The slices' readings for the risk section: each slice's level, the level counting them, the worst slice,
    and the headline's sentence when the slices change the level (None without copies or slices)."""
    from bnmem.auditing.level import level_range

    sl = (result.get("membership") or {}).get("slices")
    risk = result["risk"]
    if not sl or not risk.get("groups"):
        return None
    items = slice_levels(sl["leakage"])
    for it in items:
        it["name"] = slice_label(it["group"])
    every = risk["groups"] + items
    lower = max((g["level_lower"] for g in every), key=LEVELS.index)
    upper = max((g["level_upper"] for g in every), key=LEVELS.index)
    both = {"level": level_range(lower, upper) if not risk.get("blocker") else risk["level"], "level_lower": lower,
            "level_upper": upper}  # copies that do not resemble the model: no level, slices or not
    changed = (both["level_lower"], both["level_upper"]) != (risk["level_lower"], risk["level_upper"])
    w = worst(items)
    text = ""
    if changed and w is not None and not risk.get("blocker"):
        text = (f"Counting the {len(items)} slices (per class, correct/incorrect), the level would be {both['level']}: "
                f"{w['name']} is {w['words']} (AUC {w['auc']:.2f} [{w['auc_ci'][0]:.2f}, {w['auc_ci'][1]:.2f}], "
                f"{w['n_examples']} examples). Each slice's interval is 95% on its own, so with {len(items)} slices "
                "one may cross a threshold by chance; gate on it with --fail-at "
                f"'{w['group']}:auc=...'.")
    return {"items": items, "skipped": sl["skipped"], "level": both["level"], "level_lower": both["level_lower"],
            "level_upper": both["level_upper"], "worst": w["group"] if w else None, "changes_level": changed,
            "text": text}


def target_slices(scores: dict[str, np.ndarray], member: np.ndarray, masks: dict[str, np.ndarray],
                  seed: int = 0) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The target-model attacks on each slice of the candidates (members and non-members): metrics per attack and
    slice, and the slices too small to read."""
    out: dict[str, dict[str, Any]] = {a: {} for a in scores}
    skipped = {}
    for name, mask in masks.items():
        why = too_small(int((mask & member).sum()), int((mask & ~member).sum()))
        if why:
            skipped[name] = why
            continue
        for a, s in scores.items():
            out[a][name] = group_metrics(s[None, mask], member[None, mask], seed)
    return out, skipped
