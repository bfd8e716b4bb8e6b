"""Plan 5.0's matched clean-training progress (claims 1 and 2) and the checklist's interval label."""

from __future__ import annotations

import math

import numpy as np
import pytest
from synthetic_runs import make_cell, make_run, memorize_data

from bnmem.analysis_plan import NOT_RUN, PLAN, REPRODUCED
from bnmem.names import GRADNORMS, MEMORIZE
from bnmem.report.claims import claim1, claim2, evaluate_rule
from bnmem.report.claims.core import first_sentence, new_claim
from bnmem.report.claims.progress import first_reach, matched_difference, value_at


def _first_reach_oracle(epochs, curve, level):
    """Walk the curve on a fine grid of the piecewise-linear interpolant (the slow, obvious way)."""
    x = np.asarray(epochs, float)
    y = np.asarray(curve, float)
    if y[0] > level:
        return math.nan
    grid = np.linspace(x[0], x[-1], 200001)
    hit = np.nonzero(np.interp(grid, x, y) >= level)[0]
    return grid[hit[0]] if hit.size else math.nan


def test_first_reach_interpolates_and_leaves_out_what_was_not_measured():
    e = [1, 2, 3, 4]
    c = [0.2, 0.4, 0.4, 0.8]
    assert first_reach(e, c, 0.3) == pytest.approx(1.5)
    assert first_reach(e, c, 0.4) == pytest.approx(2.0)  # the first time, not the plateau's end
    assert first_reach(e, c, 0.6) == pytest.approx(3.5)
    assert first_reach(e, c, 0.2) == pytest.approx(1.0)
    assert math.isnan(first_reach(e, c, 0.9))  # never reached in the run
    assert math.isnan(first_reach(e, c, 0.1))  # passed before the first record: not measured
    assert math.isnan(first_reach(e, [math.nan] * 4, 0.5)) and math.isnan(first_reach(e, c, math.nan))
    rng = np.random.default_rng(0)
    for _ in range(30):
        curve = np.cumsum(rng.uniform(0, 0.1, 8)) + rng.uniform(0, 0.2)
        level = rng.uniform(curve[0] - 0.05, curve[-1] + 0.05)
        fast, slow = first_reach(range(1, 9), curve, level), _first_reach_oracle(range(1, 9), curve, level)
        assert (math.isnan(fast) and math.isnan(slow)) or fast == pytest.approx(slow, abs=1e-4)


def test_value_at_interpolates_inside_the_measured_range_only():
    assert value_at([1, 5, 10], [0.0, 4.0, 9.0], 3.0) == pytest.approx(2.0)
    assert value_at([1, 5, 10], [0.0, 4.0, 9.0], 10.0) == pytest.approx(9.0)
    assert math.isnan(value_at([1, 5, 10], [0.0, 4.0, 9.0], 0.5))
    assert math.isnan(value_at([1, 5, 10], [0.0, 4.0, 9.0], 10.5))
    assert math.isnan(value_at([1, 5], [0.0, 4.0], math.nan))


def test_matched_difference_by_hand():
    """BN at clean 0.3 and 0.5 (corrupted 0.6, 0.7); the baseline's clean 0.2, 0.4, 0.6 at epochs 1–3 reaches
    0.3 at 1.5 and 0.5 at 2.5, where its corrupted accuracy (0.1, 0.3, 0.5) reads 0.2 and 0.4: mean 0.35.
    BN's third checkpoint (clean 0.9) is never reached by the baseline: left out."""
    v, m = matched_difference([0.3, 0.5, 0.9], [0.6, 0.7, 1.0], [1, 2, 3], [0.2, 0.4, 0.6], [1, 2, 3],
                              [0.1, 0.3, 0.5])
    assert v == pytest.approx(0.35) and m == 2
    assert matched_difference([0.9], [1.0], [1, 2], [0.2, 0.4], [1, 2], [0.1, 0.3]) == (pytest.approx(math.nan,
                                                                                                       nan_ok=True), 0)


def _stretched_memorize(bn_shift: float, stretch: float = 3.0, epochs: int = 10, seeds: int = 2):
    t = np.arange(1, epochs + 1, dtype=float)
    c_bn, c_none = 1 - 0.9 * np.exp(-t / 4), 1 - 0.9 * np.exp(-t / (4 * stretch))
    acc = lambda c, s: np.tile((c - 0.1) / 0.9 + s, (seeds, 1))  # noqa: E731
    return memorize_data(acc(c_bn, bn_shift), acc(c_none, 0.0), np.tile(c_bn, (seeds, 1)),
                         np.tile(c_none, (seeds, 1)))


def test_claim_1_at_matched_progress_sees_no_effect_in_a_slower_copy_and_the_shift_in_a_real_one():
    """A baseline three times slower with the same corrupted accuracy at equal clean progress: at the same
    epoch BN is far ahead (plan 4.0's rule, a robustness row, reads reproduced); at matched progress the
    difference is 0 to round-off. With BN 0.1 above at equal progress, matched progress reads +0.1 exactly."""
    run = make_run([make_cell("m", r, {MEMORIZE: _stretched_memorize(0.0)}) for r in range(3)])
    c = evaluate_rule(claim1, run)[0]
    assert c.decisive.value == pytest.approx(0.0, abs=1e-12)
    panel = {a.name: a for a in c.robustness()}
    assert panel[claim1.AREA_V4].status == REPRODUCED and panel[claim1.AREA_V4].value > 0.1
    shifted = make_run([make_cell("m", r, {MEMORIZE: _stretched_memorize(0.1 + 0.001 * r)}) for r in range(3)])
    c = evaluate_rule(claim1, shifted)[0]
    assert c.decisive.value == pytest.approx(0.101) and c.status == REPRODUCED
    assert "matched BN epochs per pair" in c.decisive.note


def test_claim_1_without_common_progress_is_not_run():
    """The baseline never reaches BN's clean accuracy at any epoch: no matched epoch, not run, and says so."""
    t = np.arange(1, 6, dtype=float)
    data = memorize_data(np.full((2, 5), 0.9), np.full((2, 5), 0.1), np.tile(0.9 + 0.01 * t, (2, 1)),
                         np.tile(0.2 + 0.01 * t, (2, 1)))
    c = evaluate_rule(claim1, make_run([make_cell("m", r, {MEMORIZE: data}) for r in range(3)]))[0]
    assert c.status == NOT_RUN and "reaches" in c.not_run_reason()


def _gradnorms(log_ratio: dict[str, np.ndarray], epochs: list[int]) -> dict:
    per = {n: {"eval": {f"epoch_{e}": {"epoch": e, "per_seed": {str(s): {
        "noisy_clean_median_ratio": float(np.exp(v[s, i])), "median_noisy": 1.0, "median_clean": 1.0}
        for s in range(v.shape[0])}} for i, e in enumerate(epochs)}} for n, v in log_ratio.items()}
    return per | {"conditions": {"norms": ["batch", "none"], "definitions": ["eval"], "epochs": 10,
                                 "label_noise": 0.05}, "dataset": {"n_train": 200, "n_noisy": 10, "n_ood": 0}}


def _interpolated_run(test_curves: bool = False):
    """Three replicates of claim 2's interpolation case: BN checkpoints 1, 2, 5 (log ratios 0.5 + 0.01 r,
    0.9 + 0.01 r, −1), the baseline's at 1, 4, 8 (0.1 per epoch); memorize curves as described below.
    ``test_curves``: the memorize lens also recorded test accuracy, equal to the clean curves."""
    epochs_bn, epochs_none = [1, 2, 5], [1, 4, 8]
    clean_bn = np.tile([0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.99], (2, 1))
    clean_none = np.tile(np.linspace(0.1, 1.0, 10), (2, 1))
    noisy_bn = np.tile([0.2, 0.4, 0.8, 0.9, 0.95, 1, 1, 1, 1, 1], (2, 1))
    noisy_none = np.tile(np.linspace(0.0, 0.45, 10), (2, 1))
    cells = []
    for r in range(3):
        lr_bn = np.tile([0.5 + 0.01 * r, 0.9 + 0.01 * r, -1.0], (2, 1))
        lr_none = np.tile([0.1 * e for e in epochs_none], (2, 1))
        data = _gradnorms({"batch": lr_bn, "none": lr_none}, epochs_bn)
        data["none"] = _gradnorms({"none": lr_none}, epochs_none)["none"]
        mem = memorize_data(noisy_bn, noisy_none, clean_bn, clean_none)
        if test_curves:
            for norm in ("batch", "none"):
                for rec in mem[norm]["per_seed"].values():
                    rec["test_acc"] = list(rec["clean_acc"])
        cells.append(make_cell("g", r, {GRADNORMS: data, MEMORIZE: mem}))
    return make_run(cells)


def test_claim_2_reads_the_baseline_between_its_checkpoints_at_matched_progress():
    """BN's checkpoints 1 and 2 are before its fit (corrupted accuracy < 50%); its clean accuracy there is 0.3
    and 0.5. The baseline's clean curve (0.1, 0.2, ..., per epoch) reaches them at epochs 3 and 5; its log
    ratio, measured at checkpoints 1, 4 and 8, is interpolated there: linear in the epoch (0.1·e), so 0.3 and
    0.5. BN's log ratios 0.5 and 0.9: the statistic is mean(0.2, 0.4) = 0.3 per seed. Plan 4.0's early
    window (same epoch, both below 50% fit) is the previous verdict."""
    c = evaluate_rule(claim2, _interpolated_run())[0]
    assert c.decisive.value == pytest.approx(0.3 + 0.01) and c.status == REPRODUCED
    assert "matched checkpoints per pair 2–2" in c.decisive.coverdicts[0].note
    early = next(a for a in c.robustness() if a.name.startswith("eval: early window"))
    # same epoch 1 only (BN's checkpoint 2 is not a baseline checkpoint): 0.5 − 0.1
    assert early.value == pytest.approx(0.4 + 0.01)


def test_the_interval_label_keeps_its_first_sentence_whole():
    """Issue 36: `interval.split('.')[0]` cut "1 − 0.05/k" to "1 − 0"; the checklist's rule keeps it."""
    assert first_sentence("at 1 − 0.05/k for 'contradicted'. With one replicate") == \
        "at 1 − 0.05/k for 'contradicted'"
    assert first_sentence("no sentence end") == "no sentence end" and first_sentence("ends here.") == "ends here"
    for cid in PLAN:
        rule = new_claim(cid, "x").rule
        assert "1 − 0]" not in rule and "at 1 − 0;" not in rule, cid
    assert "1 − 0.05/k" in new_claim("1", "x").rule


def test_claim_2_panel_reads_progress_on_test_accuracy_where_the_memorize_lens_recorded_it():
    """Plan 6.0's panel row: the same statistic with progress read on the test-accuracy curves. With the test
    curves equal to the clean ones it equals the primary (0.3 + 0.01 r per replicate)."""
    c = evaluate_rule(claim2, _interpolated_run(test_curves=True))[0]
    row = next(a for a in c.robustness() if a.name.endswith(claim2.MATCHED_TEST))
    assert row.value == pytest.approx(c.decisive.value)
