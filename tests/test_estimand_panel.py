"""Plan 6.0: each claim's primary estimand and its robustness panel by estimand; the row says "depends on what is
held fixed" when, in one setting, two counted analyses lie on opposite sides of the null with intervals excluding
it (the primary still decides), and summary.csv carries the panel as rows with an `estimand` column."""

from __future__ import annotations

import csv

import pytest

from bnmem.analysis_plan import (
    CLEAN_PROGRESS, CONTRADICTED, CORRUPTED_FIT, DEPENDS, INCONCLUSIVE, NOT_RUN, PAPERS_PROTOCOL, PLAN,
    REPRODUCED, SAME_EPOCH, TEST_ACCURACY,
)
from bnmem.report.claims import claim2
from bnmem.report.claims.core import Analysis, Evaluation, new_claim
from bnmem.report.compare import load_checklist
from bnmem.report.summary import CSV_COLUMNS, ROBUSTNESS_ROLE, VERDICT_ROLE, render_csv

WHERE = "digits · lenet · OOD 0.05 (noise) (6 replicates): batch − none, OOD subset"


def a(name: str, value: float, low: float, high: float, status: str, valid: bool = True) -> Analysis:
    return Analysis(name, value, low, high, status, "t", "", valid, n=6, sd=0.5)


def claim_2(primary: tuple[float, float, float, str], same_epoch: tuple[float, float, float, str],
            fit: tuple[float, float, float, str]):
    """Claim 2 in one setting, shaped as its rule makes it: the primary (matched clean progress) under the eval
    definition, plan 4.0's same-epoch window and the matched-fit alternative as robustness rows."""
    c = new_claim("2", "gradnorms")
    e = Evaluation.from_analysis(WHERE, a("plan", *primary), {"label_noise": 0.0, "ood": 0.05}, True,
                                 [a("eval definition", *primary)],
                                 [a(f"eval: {claim2.EARLY_V4}", *same_epoch),
                                  a("eval: matched fit level (50% ± 0.15)", *fit)])
    c.evaluations.append(e)
    return c


def test_every_claim_of_the_paper_declares_its_primary_estimand_and_why():
    for cid, p in PLAN.items():
        assert p.estimand and len(p.estimand_why) > 40, cid
        labels = [lab for lab, _ in p.panel]
        assert len(labels) == len(set(labels)) and p.estimand not in labels, cid
    for cid in ("1", "2", "3a", "3b", "6"):
        assert PAPERS_PROTOCOL in dict(PLAN[cid].panel), cid
    for cid in ("1", "2", "3a", "3b"):
        assert "judgement" in PLAN[cid].estimand_why, cid  # where the choice is one, the plan says so
    assert PLAN["1"].estimand == PLAN["2"].estimand == CLEAN_PROGRESS


def test_depends_on_what_is_held_fixed_is_reached_when_alternatives_disagree():
    """The issue's OOD cell of claim 2: +2.04 at the same epoch, −0.42 at matched corrupted-subset fit."""
    c = claim_2((-0.25, -0.6, -0.1, CONTRADICTED), (2.04, 1.2, 2.9, REPRODUCED), (-0.42, -0.8, -0.05, CONTRADICTED))
    held = c.held_fixed()
    assert held.startswith(DEPENDS)
    assert f"{SAME_EPOCH} (+) vs" in held and CLEAN_PROGRESS in held and CORRUPTED_FIT in held and WHERE in held
    assert c.status == CONTRADICTED  # the primary still decides the verdict


@pytest.mark.parametrize("same_epoch,fit", [
    ((-0.1, -0.3, -0.02, CONTRADICTED), (-0.42, -0.8, -0.05, CONTRADICTED)),  # all on one side
    ((2.04, -0.2, 2.9, INCONCLUSIVE), (-0.42, -0.8, -0.05, CONTRADICTED)),  # the other side's interval spans 0
    ((2.04, 1.2, 2.9, REPRODUCED), (-0.42, -0.8, -0.05, CONTRADICTED)),  # ... but shown, not counted (below)
])
def test_depends_is_not_reached_where_the_alternatives_agree(same_epoch, fit):
    c = claim_2((-0.25, -0.6, -0.1, CONTRADICTED), same_epoch, fit)
    if same_epoch[3] == REPRODUCED:
        c.evaluations[0].analyses[0].valid = False  # an analysis the plan calls invalid never counts
    assert c.held_fixed() == ""


def test_the_panel_names_each_estimand_and_says_not_run_where_unmeasured():
    c = claim_2((-0.25, -0.6, -0.1, CONTRADICTED), (2.04, 1.2, 2.9, REPRODUCED), (-0.42, -0.8, -0.05, CONTRADICTED))
    panel = dict(c.panel())
    assert panel[CLEAN_PROGRESS].value == -0.25 and panel[SAME_EPOCH].value == 2.04
    assert panel[CORRUPTED_FIT].value == -0.42
    assert panel[TEST_ACCURACY].status == NOT_RUN and panel[TEST_ACCURACY].value is None
    # one shared recipe in this run: the paper's protocol is the primary's own number
    assert panel[PAPERS_PROTOCOL].value == -0.25 and "own number" in panel[PAPERS_PROTOCOL].note


def test_summary_csv_has_the_verdict_row_and_the_panel_rows(tmp_path):
    c = claim_2((-0.25, -0.6, -0.1, CONTRADICTED), (2.04, 1.2, 2.9, REPRODUCED), (-0.42, -0.8, -0.05, CONTRADICTED))
    text = render_csv([c], "exploratory", "0" * 64)
    rows = list(csv.DictReader(text.splitlines()))
    assert tuple(rows[0]) == CSV_COLUMNS
    verdict = [r for r in rows if r["role"] == VERDICT_ROLE]
    panel = {r["estimand"].split(" — ")[0]: r for r in rows if r["role"] == ROBUSTNESS_ROLE}
    assert len(verdict) == 1 and verdict[0]["estimand"] == CLEAN_PROGRESS and verdict[0]["status"] == CONTRADICTED
    assert verdict[0]["held_fixed"].startswith(DEPENDS)
    assert panel[SAME_EPOCH]["status"] == REPRODUCED and float(panel[SAME_EPOCH]["value"]) == 2.04
    assert panel[TEST_ACCURACY]["status"] == NOT_RUN and panel[TEST_ACCURACY]["value"] == ""
    assert {r["id"] for r in rows} == {"2"}
    # `bnmem compare` reads the verdict rows only
    (tmp_path / "summary.csv").write_text(text, encoding="utf-8")
    assert load_checklist(tmp_path / "summary.csv").rows["2"]["role"] == VERDICT_ROLE


def test_claim_1_measures_its_matched_test_accuracy_row_where_the_lens_recorded_test_curves():
    """Test accuracy tracking clean progress in both arms: the matched-test-accuracy row equals the primary (BN
    0.1 above at equal progress); without test curves the row reads 'not run' in the panel."""
    from synthetic_runs import make_cell, make_run
    from test_matched_progress import _stretched_memorize

    from bnmem.names import MEMORIZE
    from bnmem.report.claims import claim1, evaluate_rule

    def with_test_curves(doc):
        for norm in ("batch", "none"):
            for rec in doc[norm]["per_seed"].values():
                rec["test_acc"] = list(rec["clean_acc"])
        return doc

    run = make_run([make_cell("m", r, {MEMORIZE: with_test_curves(_stretched_memorize(0.1 + 0.001 * r))})
                    for r in range(3)])
    c = evaluate_rule(claim1, run)[0]
    panel = dict(c.panel())
    assert panel[TEST_ACCURACY].value == pytest.approx(c.decisive.value, abs=1e-9)
    assert panel[TEST_ACCURACY].status == c.status == REPRODUCED
    bare = make_run([make_cell("m", r, {MEMORIZE: _stretched_memorize(0.1)}) for r in range(3)])
    assert dict(evaluate_rule(claim1, bare)[0].panel())[TEST_ACCURACY].status == NOT_RUN
