"""The privacy–utility Pareto front and what the intervals let us say about it (pure functions).

Below the lenses and the audit: the defenses lens computes its front and reading here, and the
audit cites a finished defenses result through :func:`recommendation` without importing the lens.

A variant is a point (test accuracy, privacy risk): higher accuracy is better,
lower risk is better. A point is on the front when no other point is at least
as good on both axes and strictly better on one. The front uses the means; the
intervals decide how confident a statement about it can be:

- *certainly better* on an axis: the two intervals do not overlap;
- *clearly dominates*: dominates by the means and is certainly better on at
  least one axis while not certainly worse on the other;
- overlapping intervals on both axes: the data cannot tell the two apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bnmem.attacks import spec as attack_spec
from bnmem.formatting import eps_value

Interval = tuple[float, float] | None


@dataclass(frozen=True)
class FrontPoint:
    """One variant's summary: means and intervals (None when there is no interval, e.g. one replicate)."""

    name: str
    accuracy: float
    risk: float
    accuracy_ci: Interval = None
    risk_ci: Interval = None
    epsilon: float | None = None


def _finite(*values: float) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """(accuracy, risk) ``a`` is at least as good as ``b`` on both axes and strictly better on one."""
    return a[0] >= b[0] and a[1] <= b[1] and (a[0] > b[0] or a[1] < b[1])


def pareto_front(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Names of the non-dominated points, by decreasing accuracy.

    Args:
        points: name -> (test accuracy, privacy risk); points with a nan/None
            coordinate take no part (they can neither be on the front nor
            dominate).

    Returns:
        The front's names, highest accuracy first (ties: lower risk first, then name).
    """
    ok = {n: (float(p[0]), float(p[1])) for n, p in points.items() if _finite(*p)}
    front = [n for n, p in ok.items() if not any(dominates(q, p) for m, q in ok.items() if m != n)]
    return sorted(front, key=lambda n: (-ok[n][0], ok[n][1], n))


def certainly_better(a: float, a_ci: Interval, b: float, b_ci: Interval, higher_is_better: bool) -> bool:
    """``a`` beats ``b`` with non-overlapping intervals (False when either interval is missing)."""
    if a_ci is None or b_ci is None:
        return False
    if higher_is_better:
        return a > b and a_ci[0] > b_ci[1]
    return a < b and a_ci[1] < b_ci[0]


def clearly_dominates(a: FrontPoint, b: FrontPoint) -> bool:
    """``a`` dominates ``b`` by the means, certainly better on one axis and not certainly worse on the other."""
    if not dominates((a.accuracy, a.risk), (b.accuracy, b.risk)):
        return False
    acc = certainly_better(a.accuracy, a.accuracy_ci, b.accuracy, b.accuracy_ci, True)
    risk = certainly_better(a.risk, a.risk_ci, b.risk, b.risk_ci, False)
    acc_worse = certainly_better(b.accuracy, b.accuracy_ci, a.accuracy, a.accuracy_ci, True)
    risk_worse = certainly_better(b.risk, b.risk_ci, a.risk, a.risk_ci, False)
    return (acc or risk) and not (acc_worse or risk_worse)


def indistinguishable(a: FrontPoint, b: FrontPoint) -> bool:
    """Neither axis separates ``a`` and ``b`` (overlapping or missing intervals on both)."""
    return not any((
        certainly_better(a.accuracy, a.accuracy_ci, b.accuracy, b.accuracy_ci, True),
        certainly_better(b.accuracy, b.accuracy_ci, a.accuracy, a.accuracy_ci, True),
        certainly_better(a.risk, a.risk_ci, b.risk, b.risk_ci, False),
        certainly_better(b.risk, b.risk_ci, a.risk, a.risk_ci, False),
    ))


def _ci(v: float, ci: Interval, digits: int = 3) -> str:
    return f"{v:.{digits}f}" + ("" if ci is None else f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]")


def _describe(p: FrontPoint) -> str:
    eps = "" if p.epsilon is None else f", ε = {eps_value(p.epsilon)}"
    return f"{p.name} (test accuracy {_ci(p.accuracy, p.accuracy_ci)}, risk {_ci(p.risk, p.risk_ci)}{eps})"


def recommendation_text(points: Sequence[FrontPoint], risk_name: str, setting: str, replicates: int,
                        reference: str | None = "batch") -> str:
    """Plain-language reading of the frontier: who is on it and how sure the data lets us be.

    Args:
        points: every variant (nan coordinates are reported as not measured).
        risk_name: what the risk axis is, e.g. "online LiRA AUC (all examples)".
        setting: the conditions, e.g. "digits, LeNet, 5% label noise, 8 shadow models".
        replicates: number of replicates behind each interval.
        reference: the variant practitioners start from (BN); its standing is stated.

    Returns:
        A few short paragraphs of text.
    """
    by_name = {p.name: p for p in points}
    measured = [p for p in points if _finite(p.accuracy, p.risk)]
    front = pareto_front({p.name: (p.accuracy, p.risk) for p in measured})
    lines = [f"Setting: {setting}. Utility: clean test accuracy; privacy risk: {risk_name}. "
             + (f"Intervals: 95% t-intervals over {replicates} replicates (independent data corruption, "
                "keep matrix and model seeds)." if replicates >= 2 else
                "One replicate: no intervals, so no statement below can be made with confidence.")]
    if not front:
        return "\n".join(lines + ["No variant has both a test accuracy and a risk measured: no frontier."])
    lines.append("On the privacy–utility front (by the means): "
                 + "; ".join(_describe(by_name[n]) for n in front) + ".")
    off = [p for p in measured if p.name not in front]
    for p in off:
        clear = [n for n in front if clearly_dominates(by_name[n], p)]
        means = [n for n in front if dominates((by_name[n].accuracy, by_name[n].risk), (p.accuracy, p.risk))]
        if clear:
            lines.append(f"{p.name} is off the front and clearly dominated by {', '.join(clear)} "
                         "(better beyond the intervals on at least one axis, not worse on the other).")
        else:
            lines.append(f"{p.name} is off the front by the means (dominated by {', '.join(means)}), but the "
                         "intervals overlap: the data cannot rule it out.")
    ties = [(a, b) for i, a in enumerate(front) for b in front[i + 1:] if indistinguishable(by_name[a], by_name[b])]
    if ties:
        lines.append("Cannot tell apart (intervals overlap on both axes): "
                     + "; ".join(f"{a} vs {b}" for a, b in ties) + ".")
    missing = [p.name for p in points if p not in measured]
    if missing:
        lines.append(f"Not measured: {', '.join(missing)}.")
    if len(front) == 1:
        lines.append(f"Recommendation: {front[0]} is the only variant on the front in this setting.")
    else:
        top = by_name[front[0]]
        # Front variants whose accuracy the intervals cannot tell from the most accurate one's; along the
        # front risk falls as accuracy falls, so the last of them is the least exposed "free" choice.
        free = [n for n in front if not certainly_better(top.accuracy, top.accuracy_ci, by_name[n].accuracy,
                                                         by_name[n].accuracy_ci, True)]
        pick = by_name[free[-1]]
        text = (f"Recommendation: among the front variants whose test accuracy the intervals cannot tell from "
                f"the best ({top.name}), {pick.name} has the lowest risk")
        alike = [n for n in free if n != pick.name and indistinguishable(by_name[n], pick)]
        text += f", though the data cannot tell it from {', '.join(alike)}." if alike else "."
        costly = [n for n in front if n not in free]
        if costly:
            text += (" Lower risk costs accuracy beyond the intervals: " + "; ".join(
                f"{n} ({by_name[n].accuracy - pick.accuracy:+.3f} accuracy, {by_name[n].risk - pick.risk:+.3f} "
                f"risk vs {pick.name})" for n in costly) + ".")
        lines.append(text)
    if reference in by_name and reference in [p.name for p in measured]:
        ref = by_name[reference]
        # Less exposed beyond the intervals, at an accuracy the intervals cannot tell from the reference's.
        free = [p.name for p in measured if p.name != reference
                and certainly_better(p.risk, p.risk_ci, ref.risk, ref.risk_ci, False)
                and not certainly_better(ref.accuracy, ref.accuracy_ci, p.accuracy, p.accuracy_ci, True)]
        if reference in front and free:
            lines.append(f"{reference} is on the front by the means only through its accuracy edge: "
                         f"{', '.join(free)} have a risk lower beyond the intervals at a test accuracy the "
                         f"intervals cannot tell from {reference}'s, i.e. no measurable accuracy cost here.")
        elif reference in front:
            lines.append(f"{reference} itself is on the front here: every variant with a lower risk either costs "
                         "accuracy beyond the intervals or is not less exposed beyond them.")
        else:
            clear = [n for n in front if clearly_dominates(by_name[n], ref)]
            lines.append(f"Against {reference}: " + (
                f"{', '.join(clear)} clearly dominate(s) it." if clear else
                "it is dominated by the means only; the intervals do not let us call the difference."))
    return "\n".join(lines)


# ------------------------------------------------------------ a defenses result read as a front
# The defenses lens writes these results (bnmem.lenses.defenses); the audit cites their reading
# (bnmem.auditing.report), so the reading lives here, below both.

def front_points(result: dict[str, Any], subset: str = "all") -> list[FrontPoint]:
    """The variants as frontier points on the result's declared risk axis, for ``subset``."""
    cond = result["conditions"]
    pts = []
    for name in result["variant_names"]:
        v = result["variants"][name]
        risk = v["attacks"][cond["risk_attack"]][subset][cond["risk_metric"]]
        acc = v["test_acc"]
        pts.append(FrontPoint(
            name=name, accuracy=math.nan if acc["mean"] is None else acc["mean"],
            risk=math.nan if risk["mean"] is None else risk["mean"],
            accuracy_ci=tuple(acc["ci"]) if acc["ci"] else None, risk_ci=tuple(risk["ci"]) if risk["ci"] else None,
            epsilon=v.get("epsilon", {}).get("mean")))
    return pts


METRIC_LABELS = {"auc": "AUC", "tpr_at_0.1pct_fpr": "TPR at 0.1% FPR", "tpr_at_1pct_fpr": "TPR at 1% FPR"}


def risk_name(result: dict[str, Any], subset: str = "all") -> str:
    """The risk axis in words, e.g. "online LiRA AUC, all examples"."""
    cond = result["conditions"]
    attack = attack_spec.label(cond["risk_attack"])  # as the attack's spec names it (bnmem.attacks.spec)
    return f"{attack} {METRIC_LABELS[cond['risk_metric']]}, {'all examples' if subset == 'all' else 'outliers'}"


def setting_text(result: dict[str, Any]) -> str:
    """The conditions of a defenses result in words (data, architecture, outliers, shadow models, BN mode)."""
    c = result["conditions"]
    outliers = (f"{c['label_noise']:.0%} label noise" if c["label_noise"] else
                f"{c['ood']:.0%} OOD ({c['ood_source']})" if c["ood"] else "clean data")
    return (f"{c['dataset']}, {c['arch']}, {outliers}, {c['shadow_models']} shadow models per variant and replicate, "
            f"{c['epochs']} epochs, BN queried in {c['bn_mode_at_query']} mode")


def recommendation(result: dict[str, Any]) -> str:
    """Plain-language reading of the frontier (all examples, then the outliers)."""
    reps = result["conditions"]["replicates"]
    text = recommendation_text(front_points(result, "all"), risk_name(result, "all"), setting_text(result), reps)
    if result["subset_sizes"].get("outliers"):
        pts = front_points(result, "outliers")
        front = pareto_front({p.name: (p.accuracy, p.risk) for p in pts})
        text += (f"\nOn the outliers alone ({risk_name(result, 'outliers')}), the front is: "
                 + (", ".join(front) if front else "empty (not measured)") + ".")
    return text
