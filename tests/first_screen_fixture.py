"""The demo's first screen as data: its headline rows, forest-plot panels and the statuses on screen.

``tests/test_report_chromium.py`` renders the report's first screen from this fixture at full size (all ten
claims of the demo with their longest texts), which a tiny test run cannot reach. Refresh it after the demo or the
headline's wording changes::

    python tests/first_screen_fixture.py runs/demo    # writes tests/data/demo_first_screen.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

FIXTURE = Path(__file__).parent / "data" / "demo_first_screen.json"


def capture(run_dir: str | Path) -> dict:
    """The first screen's inputs of a run: headline rows (plan recorded before the run), panels, shown statuses."""
    from bnmem.report.claims import evaluate_claims
    from bnmem.report.forest import forest_panels
    from bnmem.report.headline import headline_rows
    from bnmem.report.html import shown_statuses
    from bnmem.report.preregistration import FIXED
    from bnmem.report.rundata import load_run

    claims = evaluate_claims(load_run(run_dir))
    return {"source": str(run_dir), "headline_rows": headline_rows(claims, FIXED),
            "panels": [dataclasses.asdict(p) for p in forest_panels(claims)],
            "shown": sorted(shown_statuses(claims)),
            "counts": {s: sum(c.status == s for c in claims) for s in {c.status for c in claims}}}


def load() -> dict:
    """The stored fixture, panels as :class:`~bnmem.figures.forest.ForestPanel`."""
    from bnmem.figures.forest import ForestPanel, ForestRow

    doc = json.loads(FIXTURE.read_text(encoding="utf-8"))
    doc["panels"] = [ForestPanel(**{**p, "rows": [ForestRow(**{**r, "paper": tuple(r["paper"]) if r["paper"] else None})
                                                   for r in p["rows"]]}) for p in doc["panels"]]
    return doc


if __name__ == "__main__":
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(capture(sys.argv[1]), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")
