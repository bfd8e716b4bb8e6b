"""Two runs' claims checklists side by side: status and effect per claim, and what changed.

A run's checklist is its ``summary.csv`` (what its report said, under the plan
version that wrote it) or, when it has none or ``recompute`` is asked, the
claims evaluated now under the installed plan. Comparing two summaries of one
run written under two plan versions shows what the plan change did; comparing
two runs (digits vs a user's dataset) shows what the data did.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from bnmem.errors import BnmemError
from bnmem.names import SUMMARY_CSV
from bnmem.report.summary import md_table
from bnmem.texttable import table

Row = dict[str, str]


@dataclass
class Checklist:
    """One run's claim rows (``summary.csv`` records) and where they came from."""

    name: str
    source: str
    rows: dict[str, Row]


def load_checklist(path: str | Path, recompute: bool = False, progress: bool = False) -> Checklist:
    """A run directory's (or a summary.csv file's) claim rows, by claim id.

    Raises:
        BnmemError: ``path`` is neither a run directory nor a summary.csv.
    """
    path = Path(path)
    csv_path = path if path.is_file() else path / SUMMARY_CSV
    if path.is_file() or (csv_path.is_file() and not recompute):
        try:
            with open(csv_path, encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f))
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise BnmemError(f"{csv_path}: not a readable summary.csv ({e})") from e
        if not rows or "id" not in rows[0] or "status" not in rows[0]:
            raise BnmemError(f"{csv_path}: not a bnmem summary.csv (no id/status columns)")
        name = path.parent.name if path.is_file() else path.name
        # Plan 6.0's robustness rows share their claim's id: the checklist is the verdict rows (older files have
        # no role column: every row is one).
        verdicts = {r["id"]: r for r in rows if r.get("role") in (None, "", "verdict")}
        return Checklist(name, str(csv_path), verdicts)
    from bnmem.report.claims import evaluate_claims
    from bnmem.report.rundata import load_run
    from bnmem.report.summary import claim_rows

    rows = claim_rows(evaluate_claims(load_run(path, progress)))
    return Checklist(path.name, f"{path} (claims evaluated now)", {r["id"]: r for r in rows})


def _float(text: str | None) -> float | None:
    try:
        v = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return v if v is not None and math.isfinite(v) else None


def effect(row: Row | None) -> str:
    """'+0.123 [+0.05, +0.2]' or '—', in the unit the report shows the claim in (claim 3 in AUC points:
    '+12.5 [+8.1, +16.9] points'; its plan entry's :attr:`bnmem.analysis_plan.ClaimPlan.display`); an interval at
    another level than 95% (a claim decided in several settings: Bonferroni-adjusted) says its level, e.g.
    ' (98.3%)'."""
    from bnmem.analysis_plan import PLAN
    from bnmem.report.claims.core import new_claim
    from bnmem.report.headline import level_suffix

    if row is None or _float(row.get("value")) is None:
        return "—"
    v, lo, hi = (_float(row.get(k)) for k in ("value", "ci_low", "ci_high"))
    level = level_suffix(_float(row.get("ci_level")))
    cid = row.get("id", "")
    if cid in PLAN:  # a claim of this plan: its display format and unit, as on the page
        return new_claim(cid, "").effect_text(v, lo, hi) + ("" if lo is None or hi is None else level)
    return f"{v:+.3g}" + ("" if lo is None or hi is None else f" [{lo:+.3g}, {hi:+.3g}]{level}")


def short_titles(titles: list[str], width: int = 48) -> list[str]:
    """Each title cut to ``width`` characters, unless that would make two different titles read the same
    (claims 3a and 3b share their first 48): those are shown in full."""
    cut = [t if len(t) <= width else t[:width - 1] + "…" for t in titles]
    clash = {c for c in cut if len({t for t, c2 in zip(titles, cut) if c2 == c}) > 1}
    return [t if c in clash else c for t, c in zip(titles, cut)]


def _display_change(cid: str, delta: float) -> str:
    """A change of a claim's effect in its display unit ('+2.5 points' for claim 3)."""
    from bnmem.analysis_plan import PLAN
    from bnmem.report.claims.core import new_claim

    if cid not in PLAN:
        return f"{delta:+.3g}"
    c = new_claim(cid, "")
    text = c.fmt(delta)
    return text if text.startswith(("+", "-", "−")) else ("+" if delta >= 0 else "") + text


def change(a: Row | None, b: Row | None) -> str:
    """What changed from A to B for one claim, in words."""
    if a is None or b is None:
        return "only in " + ("B" if a is None else "A")
    parts = []
    if a.get("status") != b.get("status"):
        parts.append(f"status {a.get('status')} → {b.get('status')}")
    va, vb = _float(a.get("value")), _float(b.get("value"))
    if va is not None and vb is not None and va != vb:
        parts.append(f"effect {_display_change(a.get('id', ''), vb - va)}")
    for key, what in (("plan_version", "plan"), ("rule", "rule"), ("where", "deciding setting")):
        if a.get(key) and b.get(key) and a.get(key) != b.get(key):
            parts.append(f"{what} changed" if key != "plan_version" else f"plan {a[key]} → {b[key]}")
    return "; ".join(parts) or "same"


def compare_rows(a: Checklist, b: Checklist, full_titles: bool = False) -> list[list[str]]:
    """One row per claim (A's order, then claims only B has); titles cut for a fixed-width terminal table, in
    full with ``full_titles`` (markdown wraps them)."""
    ids = list(dict.fromkeys([*a.rows, *b.rows]))
    titles = [(a.rows.get(cid) or b.rows.get(cid) or {}).get("claim", "") for cid in ids]
    titles = titles if full_titles else short_titles(titles)
    out = []
    for cid, title in zip(ids, titles):
        ra, rb = a.rows.get(cid), b.rows.get(cid)
        out.append([cid, title, (ra or {}).get("status", "—"), effect(ra), (rb or {}).get("status", "—"),
                    effect(rb), change(ra, rb)])
    return out


def render(a: Checklist, b: Checklist, markdown: bool = False) -> str:
    """The side-by-side table, as fixed-width text or markdown, with the two sources named."""
    header = ["#", "claim", f"A: {a.name}", "effect A [CI]", f"B: {b.name}", "effect B [CI]", "what changed"]
    rows = compare_rows(a, b, full_titles=markdown)
    n_changed = sum(r[-1] != "same" for r in rows)
    foot = [f"A: {a.source}", f"B: {b.source}", f"{n_changed} of {len(rows)} claims differ",
            "intervals at 95% unless a level is given (a claim decided in several settings: Bonferroni-adjusted)"]
    if markdown:
        return md_table(header, rows) + "\n\n" + "\n".join(f"- {x}" for x in foot) + "\n"
    return table(rows, header) + "\n" + "\n".join(foot) + "\n"
