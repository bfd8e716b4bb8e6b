"""The report's forest plot: every claim's evaluations as :class:`~bnmem.figures.forest.ForestPanel` rows.

Per claim one panel; per setting (and BN-vs-baseline pair and subset) one row,
per attack for claim 3's deciding settings (its robustness variants: the plan's attack). The null line is the plan's null (claim 4: a majority
of channels; claim 5: the tolerance), the shading is the paper's range where
the plan has one (claim 3 per outlier mix, claim 6's cut).
"""

from __future__ import annotations

import re
from pathlib import Path

from bnmem.analysis_plan import (
    CHECK_FAILED, CHECK_PASSED, CONTRADICTED, DIRECTION_ONLY, INCONCLUSIVE, LARGER, NOT_RUN, PLAN, REPRODUCED,
    SMALLER, Axis,
)
from bnmem.figures.forest import ForestPanel, ForestRow, plot_forest
from bnmem.report.claims import Claim, Evaluation
from bnmem.report.power import power_of
from bnmem.formatting import finite

STATUS_COLORS = {
    REPRODUCED: "#1e8a4c", CHECK_PASSED: "#2a93a8", DIRECTION_ONLY: "#d09a00", INCONCLUSIVE: "#4f79b5",
    LARGER: "#6a9a1f", SMALLER: "#d9731a",
    CONTRADICTED: "#c0392b", CHECK_FAILED: "#a3397f", NOT_RUN: "#9aa0a6",
}
_REPLICATES = re.compile(r" \((\d+) replicates?\)")


def short_where(where: str) -> str:
    """A row label from an evaluation's ``where``."""
    s = _REPLICATES.sub(r" (\1 rep.)", where)
    # BN − none is every axis's comparison (said in its label); other baselines stay named.
    s = re.sub(r": batch − none(, |$)", lambda m: ", " if m.group(1) else "", s)
    return (s.replace("batch − ", "BN − ").replace("flipped-label subset", "flipped labels")
            .replace("OOD subset", "OOD inputs"))


def split_verdicts(claim: Claim, compact: bool = False) -> str:
    """When a claim's deciding settings disagree (e.g. flipped labels contradicted, OOD inputs reproduced),
    each setting's status and effect; '' when they agree. The row still shows the least supportive.
    ``compact``: each setting named only by what tells it apart from the others (the headline's cell)."""
    ran = claim.deciding()
    if len({e.status for e in ran}) < 2:
        return ""
    names = [short_where(e.where) for e in ran]
    if compact:  # the replicates are the power cell's and the forest plot's
        names = distinct_parts([_REP_SUFFIX.sub("", n) for n in names])
    # effect_text clips each interval to the range the quantity can take (a fraction's stays inside [0, 1]).
    return "split: " + "; ".join(f"{name}: {e.status} {claim.effect_text(e.value, e.ci_low, e.ci_high)}"
                                 for name, e in zip(names, ran))


_PARTS = re.compile(r" · |: |, ")
_REP_SUFFIX = re.compile(r" \(\d+ rep\.\)")


def distinct_parts(labels: list[str]) -> list[str]:
    """``labels`` without the leading and trailing parts (split at ' · ', ': ' and ', ') that all of them share,
    each keeping at least one part, and cut after the first parts that already tell them all apart:
    'digits · lenet · label noise 0.05: BN vs X' and 'digits · lenet · OOD 0.05: BN vs Y' become
    'label noise 0.05' and 'OOD 0.05' (the comparison stays in the forest plot and the details)."""
    parts = [_PARTS.split(lab) for lab in labels]
    if len(parts) < 2:
        return labels
    lead = 0
    while all(len(p) > lead + 1 for p in parts) and len({p[lead] for p in parts}) == 1:
        lead += 1
    trail = 0
    while all(len(p) > lead + trail + 1 for p in parts) and len({p[-1 - trail] for p in parts}) == 1:
        trail += 1
    kept = [p[lead:len(p) - trail] for p in parts]
    for k in range(1, max(len(p) for p in kept)):
        if len({tuple(p[:k]) for p in kept}) == len(kept):
            kept = [p[:k] for p in kept]
            break
    return [", ".join(p) for p in kept]


def _strip_common(labels: list[str]) -> list[str]:
    """Drop the leading ' · '-separated parts every multi-part label shares (e.g. 'digits · lenet')."""
    parts = [lab.split(" · ") for lab in labels]
    multi = [p for p in parts if len(p) > 1]
    k = 0
    while multi and all(len(p) > k + 1 for p in multi) and len({p[k] for p in multi}) == 1:
        k += 1
    return [" · ".join(p[k:]) if len(p) > 1 else p[0] for p in parts]


def axis_of(claim: Claim) -> Axis:
    """The claim's forest-plot panel as its plan entry declares it (else its metric against 0)."""
    p = PLAN.get(claim.id)
    return p.axis if p is not None and p.axis is not None else Axis(claim.metric[:70])


def _paper(claim: Claim, e: Evaluation) -> tuple[float, float] | None:
    """The paper's range at the evaluation's outlier mix, where the claim's plan entry states one."""
    p = PLAN.get(claim.id)
    if p is None or p.paper_range is None:
        return None
    mix = (finite(e.conditions.get("label_noise")) or 0) + (finite(e.conditions.get("ood")) or 0)
    return p.paper_range(mix or None)


def claim_rows(claim: Claim) -> list[ForestRow]:
    """The rows of one claim: its evaluations that ran (claim 3: one row per attack)."""
    rows = []
    per_coverdict = axis_of(claim).per_coverdict
    for e in claim.evaluations:
        if e.status == NOT_RUN:
            continue
        label = short_where(e.where) + (f" [{e.variant}]" if e.variant else "")
        deciding = e.deciding and not e.variant
        # A claim whose axis says so (claim 3): its deciding settings one row per co-verdict (attack); its robustness
        # variants the plan's own analysis only (the robustness panel has every attack of every variant).
        items = [(f"{label} · {a.name}", a) for a in e.coverdicts if a.status != NOT_RUN] \
            if per_coverdict and e.coverdicts and deciding \
            else [(f"{label} · {e.primary}" if e.primary and per_coverdict else label, e)]
        paper = _paper(claim, e)
        k = claim.scale  # the claim's display unit (claim 3: AUC points)
        for lab, a in items:
            rows.append(ForestRow(lab, _shown(claim, a.value), _shown(claim, a.ci_low), _shown(claim, a.ci_high),
                                  a.status, deciding, None if paper is None else (paper[0] * k, paper[1] * k)))
    return rows


def _shown(claim: Claim, v: float | None) -> float | None:
    """``v`` as the claim displays it: inside the range the quantity can take, in its display unit."""
    return None if v is None else min(max(v, claim.bounds[0]), claim.bounds[1]) * claim.scale


def forest_panels(claims: list[Claim]) -> list[ForestPanel]:
    """One panel per claim, with labels shortened by what every row of the figure shares."""
    panels = []
    for c in claims:
        axis = axis_of(c)
        xlabel, null, null_label = axis.label, axis.null, axis.null_label
        rows = claim_rows(c)
        title = f"{c.id} · {c.title}"
        p = power_of(c)
        if c.status == INCONCLUSIVE and p.underpowered:
            # An inconclusive verdict at low power says nothing about the paper: the panel and its rows say so.
            title = f"{c.id} · UNDERPOWERED (power {p.power:.2f}; {p.needed_text()}) · {c.title}"
            for r in rows:
                if r.deciding:
                    r.label += " [underpowered]"
        panels.append(ForestPanel(title, xlabel, null * c.scale, null_label, rows))
    labels = _strip_common([r.label for p in panels for r in p.rows]) if any(p.rows for p in panels) else []
    it = iter(labels)
    for p in panels:
        for r in p.rows:
            r.label = next(it)
    return panels


def shared_replicates(panels: list[ForestPanel]) -> str:
    """When every row label that counts replicates says the same ' (n rep.)', drop it from the labels and
    return 'n replicates per setting' (said once, in the legend); else ''."""
    found = {m.group(0) for p in panels for r in p.rows if (m := _REP_SUFFIX.search(r.label))}
    if len(found) != 1:  # rows without replicates (the toy model's simulation) do not count
        return ""
    for r in (r for p in panels for r in p.rows):
        r.label = _REP_SUFFIX.sub("", r.label)
    n = int(re.sub(r"\D", "", found.pop()))
    return f"{n} replicate{'s' if n != 1 else ''} per setting"


def write_forest(claims: list[Claim], path: str | Path) -> Path:
    """Draw the forest plot of ``claims`` into ``path``."""
    return draw_forest(forest_panels(claims), path)


def draw_forest(panels: list[ForestPanel], path: str | Path) -> Path:
    """Draw the report's forest plot of ``panels`` (:func:`forest_panels`) into ``path``."""
    note = shared_replicates(panels)
    # Five columns of panels keep the plot short enough to share the first screen with the headline table.
    plot_forest(panels, path, STATUS_COLORS, ncols=5, note=note)
    return Path(path)
