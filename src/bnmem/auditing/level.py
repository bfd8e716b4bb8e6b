"""The audit's risk level, read from both ends of each group's AUC interval (rule 3, 2026-12-01).

For each group — the known outliers, the rare examples, the examples with the largest gradient norms, the whole
training set — the headline attack with the highest *lower* AUC bound is the group's attack (the
attack whose evidence rules out the most; not the one with the highest point AUC). Its 95%
interval [lo, hi] gives two levels on the thresholds :data:`AUC_MODERATE` and :data:`AUC_ELEVATED`:

* the lower end's level is what the data show at least (they rule out anything below it);
* the upper end's level is what the data still allow.

The audit's level is the highest lower level and the highest upper level over the groups, said as
one level when they agree and as a range ("low to elevated") when they do not: less evidence
widens the range, it never lowers the level. Where a range is given, :func:`copies_to_narrow`
says about how many shadow copies would settle the group on one level.

Earlier rules, kept beside this one in ``audit.json`` (README, "Audit rules and their history"):
rule 1 read the thresholds off the point AUC (``level_point_auc``); rule 2 off the lower end only
(``level_lower_bound``), which rated thin evidence "low".
"""

from __future__ import annotations

import math
from typing import Any

from bnmem.auditing.findings import LEVELS, band
from bnmem.auditing.leakage import strongest

# AUC thresholds of the levels (moderate / elevated), and at which a group is called identifiable.
AUC_MODERATE, AUC_ELEVATED = 0.55, 0.60
AUC_IDENTIFIABLE = 0.80
RULE = {"version": 3, "date": "2026-12-01",
        "text": "each group's level from both ends of the 95% interval of its pooled AUC (the lower end: what the "
                "data rule out; the upper end: what they still allow); the group's attack is the one with the "
                "highest lower end"}
NOT_MEASURED = "not measured"
# The groups, in the order the headline names them.
GROUPS = ("outliers", "rare", "most_exposed", "all")


def words(auc: float) -> str:
    """How detectable a group is at this AUC, in plain words."""
    if auc >= AUC_IDENTIFIABLE:
        return "identifiable"
    if auc >= AUC_ELEVATED:
        return "partly identifiable"
    return "slightly detectable" if auc >= AUC_MODERATE else "not distinguishable from non-members"


def ends_text(lo: float, hi: float) -> str:
    """Both ends of an interval in words: 'at least slightly detectable, possibly partly identifiable'."""
    low, high = words(lo), words(hi)
    if low == high:
        return low
    floor = "not shown to leak" if lo < AUC_MODERATE else f"at least {low}"
    return f"{floor}, possibly {high}"


def level_range(lower: str, upper: str) -> str:
    """'moderate', or 'low to elevated' when the two ends disagree."""
    return lower if lower == upper else f"{lower} to {upper}"


def copies_to_narrow(auc: float, lo: float, hi: float, copies: int) -> int | None:
    """About how many shadow copies would put the interval on one side of every threshold it spans.

    Assumes the interval narrows as 1/√copies around the same point AUC (more copies give each
    example more scores; a small group narrows more slowly, as its examples stay few). None when
    the point sits on a threshold (no number of copies settles it).
    """
    inside = [t for t in (AUC_MODERATE, AUC_ELEVATED) if lo < t <= hi]
    if not inside:
        return None
    room = min(abs(auc - t) for t in inside)
    if room < 0.005:
        return None
    half = max(auc - lo, hi - auc)
    need = copies * (half / room) ** 2
    return int(2 * math.ceil(need / 2))


def group_level(result: dict[str, Any], group: str) -> dict[str, Any] | None:
    """One group's attack (highest lower bound), its interval, both levels and the copies that would narrow it."""
    mem = result.get("membership") or {}
    best = strongest(mem.get("leakage") or {}, group)
    if best is None:
        return None
    attack, g = best
    lo, hi = g["ci"]["auc"]
    lower, upper = band(lo, AUC_MODERATE, AUC_ELEVATED), band(hi, AUC_MODERATE, AUC_ELEVATED)
    return {"group": group, "attack": attack, "auc": g["auc"], "auc_ci": [lo, hi], "level_lower": lower,
            "level_upper": upper, "level": level_range(lower, upper), "words": ends_text(lo, hi),
            "level_point_auc": band(g["auc"], AUC_MODERATE, AUC_ELEVATED), "level_lower_bound": lower,
            "narrow_with": copies_to_narrow(g["auc"], lo, hi, mem["shadow_models"]) if lower != upper else None,
            "metrics": g, "n_examples": g["n_examples"]}


def audit_level(groups: list[dict[str, Any]]) -> dict[str, str]:
    """The audit's level from its groups: the highest lower and upper levels (and the earlier rules' levels)."""
    if not groups:
        return {"level": NOT_MEASURED, "level_lower": NOT_MEASURED, "level_upper": NOT_MEASURED,
                "level_point_auc": NOT_MEASURED, "level_lower_bound": NOT_MEASURED}

    def top(key: str) -> str:
        return max((g[key] for g in groups), key=LEVELS.index)

    lower, upper = top("level_lower"), top("level_upper")
    return {"level": level_range(lower, upper), "level_lower": lower, "level_upper": upper,
            "level_point_auc": top("level_point_auc"), "level_lower_bound": top("level_lower_bound")}


def level_setter(groups: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The group that sets the level: the highest lower level, then the highest lower AUC bound."""
    return max(groups, key=lambda g: (LEVELS.index(g["level_lower"]), g["auc_ci"][0]), default=None)
