"""A claim lives in one module: the plan's registry finds it, and the plan, the report, the forest plot and
`bnmem design` read everything about it from its declaration (no table elsewhere names it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import bnmem.report.claims as claims_pkg
from bnmem import analysis_plan as ap
from waiting import HANG_GUARD_S

SRC = Path(__file__).resolve().parents[1] / "src"

TOY = textwrap.dedent('''
    """A toy claim declared in its own module (tests/test_claim_registry.py)."""
    from bnmem.analysis_plan import (
        CLEAN, GRADED, REPLICATE_UNIT, TEST_ABOVE, Axis, ClaimPlan, Design, Display, Endpoint,
    )
    from bnmem.names import MEMORIZE
    from bnmem.report.claims.core import new_claim

    TOY_EFFECT = 0.1
    CLAIMS = (ClaimPlan(
        "99", "A toy claim", "no paper", "evidence", MEMORIZE, "a metric", "the last epoch", "a mean",
        REPLICATE_UNIT, "an interval", "null 0", GRADED, f"a reason at {TOY_EFFECT:g}", previous_rule="new",
        planning=(Endpoint("", TEST_ABOVE, TOY_EFFECT, 0.0, 0.05, "smallest effect of interest", "a toy"),),
        display=Display("{:+.1f}", scale=100, suffix="points"), axis=Axis("the toy's axis", 0.5, "half"),
        design=Design(CLEAN),
    ),)


    def evaluate(run):
        return [new_claim("99", MEMORIZE)]
''')


@pytest.fixture
def toy_claim(tmp_path, monkeypatch):
    (tmp_path / "claim99.py").write_text(TOY, encoding="utf-8")
    monkeypatch.setattr(claims_pkg, "__path__", [*claims_pkg.__path__, str(tmp_path)])
    ap.refresh_claims()
    yield
    monkeypatch.undo()
    sys.modules.pop("bnmem.report.claims.claim99", None)
    ap.refresh_claims()


def test_a_claim_module_alone_adds_the_claim_everywhere(toy_claim):
    from bnmem.report.claims import rule_ids
    from bnmem.report.claims.core import new_claim
    from bnmem.report.forest import forest_panels

    assert list(ap.PLAN)[-1] == "99" and rule_ids()[-1] == "99"
    assert ap.claim_modules()[-1].__name__.endswith(".claim99")
    text = ap.render_markdown()
    assert "### 99. A toy claim" in text and "a reason at 0.1" in text and "- **99**:" in text
    assert ap.PLANNING["99"][0].effect == 0.1 and ap.PLAN["99"].design.settings == ap.CLEAN
    claim = new_claim("99", "memorization")
    assert (claim.scale, claim.suffix, claim.value_format) == (100, "points", "{:+.1f}")
    panel = forest_panels([claim])[0]
    assert (panel.xlabel, panel.null, panel.null_label) == ("the toy's axis", 50.0, "half")


def test_the_real_plan_has_no_toy_after_the_fixture():
    ap.refresh_claims()
    assert "99" not in ap.PLAN and list(ap.PLAN)[0] == "1"


def test_claim_order_is_the_papers():
    assert sorted(["10", "3c", "2", "3a", "5b", "1"], key=ap.claim_order) == ["1", "2", "3a", "3c", "5b", "10"]


def test_a_claim_declared_twice_is_refused(tmp_path, monkeypatch):
    (tmp_path / "claim98.py").write_text(TOY, encoding="utf-8")
    (tmp_path / "claim99.py").write_text(TOY, encoding="utf-8")
    monkeypatch.setattr(claims_pkg, "__path__", [*claims_pkg.__path__, str(tmp_path)])
    ap.refresh_claims()
    try:
        with pytest.raises(ValueError, match="claim 99 is declared twice"):
            list(ap.PLAN)
    finally:
        monkeypatch.undo()
        for name in ("claim98", "claim99"):
            sys.modules.pop(f"bnmem.report.claims.{name}", None)
        ap.refresh_claims()


def test_importing_the_plan_loads_no_claim_module():
    """The lenses import the plan's measurement constants: that must not pull in the report."""
    code = ("import sys, bnmem.analysis_plan\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('bnmem.report'))\n"
            "assert not loaded, loaded\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
