"""The top of the report: the run's confirmatory / exploratory label in full, one line per claim (status,
effect and interval, the paper's value, the plan's state, the design's power) and the forest plot of every
claim's evaluations."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bnmem.analysis_plan import CHANGELOG, INCONCLUSIVE, PLAN, PLAN_VERSION
from bnmem.report.claims import Claim
from bnmem.report.forest import split_verdicts
from bnmem.report.power import power_of
from bnmem.report.preregistration import STATE_WORDS


AFTER_SEEING = "rule written after seeing earlier results"


def rule_history(cid: str) -> str:
    """What the plan's changelog says of claim ``cid``'s rule in this plan version, in the headline's words."""
    changes = [ch for ch in CHANGELOG if ch.version == PLAN_VERSION and cid in ch.claims]
    if any(ch.after_seeing_data for ch in changes):
        return AFTER_SEEING
    return f"rule changed in {PLAN_VERSION}, before results were seen" if changes else f"rule unchanged in {PLAN_VERSION}"


def plan_header(state: str = "") -> str:
    """The headline's plan column heading: the plan version and the run's record of it (the same for every row)."""
    return f"plan {PLAN_VERSION}" + (f" ({STATE_WORDS.get(state, state)})" if state else "")


def level_suffix(level: float | None) -> str:
    """' (99%)' when an interval is not at 95% (a setting tested for 'contradicted' at 1 − 0.05/k), else ''."""
    if level is None:
        return ""
    return "" if abs(level - 0.95) < 1e-9 else f" ({level:.1%})".replace(".0%", "%")


def headline_rows(claims: list[Claim], state: str = "") -> list[dict[str, str]]:
    """Per claim the headline's fields, read from the claim object, its power and the plan."""
    out = []
    for c in claims:
        d = c.decisive
        effect = "—" if d is None else c.effect_text(d.value, d.ci_low, d.ci_high) + (
            "" if d.ci_low is None else level_suffix(d.level))
        p, power = PLAN.get(c.id), power_of(c)
        vs = c.vs_paper or ""
        out.append({"id": c.id, "status": c.status, "title": c.title, "effect": effect,
                    "paper": (f"{vs} the paper's range · " if vs else "") + (p.paper if p else ""),
                    "rule": rule_history(c.id),
                    "where": d.where if d else c.not_run_reason(), "split": split_verdicts(c, compact=True),
                    "verdict": c.status if power.power is None else power.verdict(c.status),
                    "power": power.text(), "power_short": power.short_text(),
                    "underpowered": c.status == INCONCLUSIVE and power.underpowered})
    return out


def forest_png(claims: list[Claim]) -> bytes:
    """The forest plot as PNG bytes (drawn in a scratch folder, embedded in the page)."""
    from bnmem.report.forest import write_forest

    with tempfile.TemporaryDirectory(prefix="bnmem-forest-") as tmp:
        return write_forest(claims, Path(tmp) / "forest.png").read_bytes()
