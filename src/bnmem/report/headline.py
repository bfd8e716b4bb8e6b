"""The top of the report: one line per claim (status, effect and interval, the paper's value, whether the
plan was fixed before the results) and the forest plot of every claim's evaluations."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bnmem.analysis_plan import CHANGELOG, PLAN, PLAN_VERSION
from bnmem.report.claims import Claim
from bnmem.report.summary import claim_rows


def plan_fixed(cid: str) -> str:
    """Whether claim ``cid``'s rule was declared before results were seen (from the plan's changelog)."""
    after = [ch.version for ch in CHANGELOG if cid in ch.claims and ch.after_seeing_data]
    if after:
        return f"rule revised after results ({', '.join(after)})"
    return f"{PLAN_VERSION}: fixed before results"


def headline_rows(claims: list[Claim]) -> list[dict[str, str]]:
    """Per claim the headline's fields, drawn from the summary.csv row and the plan."""
    out = []
    for c, row in zip(claims, claim_rows(claims)):
        d = c.decisive
        effect = "—" if d is None else c.fmt(d.value) + (
            "" if d.ci_low is None else f" [{c.fmt(d.ci_low)}, {c.fmt(d.ci_high)}]")
        p = PLAN.get(c.id)
        out.append({"id": row["id"], "status": row["status"], "title": row["claim"], "effect": effect,
                    "paper": p.paper if p else "", "plan": plan_fixed(c.id), "where": row["where"]})
    return out


def forest_png(claims: list[Claim]) -> bytes:
    """The forest plot as PNG bytes (drawn in a scratch folder, embedded in the page)."""
    from bnmem.report.forest import write_forest

    with tempfile.TemporaryDirectory(prefix="bnmem-forest-") as tmp:
        return write_forest(claims, Path(tmp) / "forest.png").read_bytes()
