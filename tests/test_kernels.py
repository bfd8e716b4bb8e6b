"""The compiled scoring kernels (bnmem.attacks.kernels) against slow, obvious oracles, to rounding: SciPy's
log_ndtr and logsumexp, numpy's sort, median and std of the remaining values, and the whole evaluation against
the in-memory oracle with the kernels on and off (the plain numpy path runs where numba is absent)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_ndtr, logsumexp

from bnmem.attacks import AttackInputs, evaluate_inputs, evaluate_stream, keep_matrix, lira_statistic
from bnmem.attacks import kernels
from bnmem.attacks.keep import first_k_references
from test_attacks import synthetic
from test_streaming import EVERY, assert_same

compiled = kernels.compiled()
needs_numba = pytest.mark.skipif(compiled is None, reason="numba is not installed (or BNMEM_NO_NUMBA is set)")


def _kernel(name: str):
    """A kernel helper, compiled where numba runs (its Python function otherwise: the same formulas)."""
    return getattr(kernels, name)


@pytest.fixture(scope="module")
def vector_log_ndtr():
    import numba

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[i] = kernels.log_ndtr(x[i])

    def apply(x):
        out = np.empty_like(x)
        run(x, out)
        return out
    return apply


@needs_numba
def test_log_ndtr_is_scipys_to_rounding_over_the_whole_line(vector_log_ndtr):
    """Every region (the erfcx lower tail, erf near 0, the e^{−t²}·erfcx upper side) and far in both tails:
    1e-12 relative wherever SciPy's value is a normal float; where it is subnormal (37.5 < x ≤ 37.677) both
    are within 1e-300 of 0, and 0 exactly where SciPy's is (its erfc underflows; a subnormal would break
    SciPy's ties of saturated offline scores)."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-40, 40, 40001), rng.normal(0, 3, 20000), -np.logspace(0, 300, 2000),
                        np.logspace(-300, 1.6, 2000), -np.logspace(-300, 0, 1000),
                        [0.0, -0.0, -1.0, 1.0, -20.0, -0.66291, 0.66291, 5.65685, -5.65685, 37.5, 38.0, 1e308,
                         -1e308, np.inf]])
    got, want = vector_log_ndtr(x), log_ndtr(x)
    normal = np.abs(want) >= np.finfo(float).tiny
    np.testing.assert_allclose(got[normal], want[normal], rtol=1e-12, atol=0)
    assert np.all(np.abs(got[~normal]) <= 1e-300)
    edge = np.nextafter(37.67712072049518, np.inf)  # the first x where SciPy's value is 0
    x = np.concatenate([x, np.nextafter(edge, -np.inf) - np.arange(5) * 1e-15, edge + np.arange(5) * 1e-15])
    got, want = vector_log_ndtr(x), log_ndtr(x)
    np.testing.assert_array_equal(got == 0, want == 0)
    assert vector_log_ndtr(np.array([-np.inf]))[0] == -np.inf


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9, 64, 129])
def test_middle_ranks_are_numpys_sort(n):
    """The three middle order statistics by selection: ties, all equal, ±inf."""
    rng = np.random.default_rng(n)
    buf, ranks = np.empty(n), np.empty(3)
    for vals in (rng.normal(size=n), np.round(rng.normal(size=n), 1), np.full(n, 2.0),
                 np.where(rng.random(n) < 0.2, np.inf, rng.normal(size=n))):
        _kernel("_middle")(vals, buf, n, ranks)
        srt, r0 = np.sort(vals), max(0, (n - 2) // 2)
        assert ranks.tolist() == [srt[min(r0 + i, n - 1)] for i in range(3)]


@pytest.mark.parametrize("c", [2, 3, 4, 5, 8, 9, 128])
def test_side_table_is_median_and_std_of_the_remaining_values(c):
    """Every removal's median (np.median's value, bit for bit: a selection and a mean of two) and spread
    (np.std's to 1e-12), ties on purpose, and with nothing removed (position C)."""
    rng = np.random.default_rng(c)
    buf, ranks, med, scale = np.empty(c), np.empty(3), np.empty(c + 1), np.empty(c + 1)
    for vals in (rng.normal(0, 1, c), np.round(rng.normal(0, 1, c), 1), rng.normal(0, 1, c) * 1e-200):
        _kernel("_side_table")(vals, c, buf, ranks, med, scale)
        for p in range(c + 1):
            rest = np.delete(vals, p) if p < c else vals
            assert med[p] == np.median(rest), p
            np.testing.assert_allclose(scale[p] - kernels.STD_EPS, np.std(rest), rtol=1e-12, atol=1e-300)


def test_side_table_spread_is_exact_where_the_removed_value_carried_the_spread():
    """A diverged model holds nearly all of M2: M2 minus its share would cancel away most digits, so the
    table recomputes that removal (and only needs to) in two passes."""
    rng = np.random.default_rng(0)
    c = 16
    vals = rng.normal(0, 1, c)
    vals[3] = 1e7
    buf, ranks, med, scale = np.empty(c), np.empty(3), np.empty(c + 1), np.empty(c + 1)
    _kernel("_side_table")(vals, c, buf, ranks, med, scale)
    want = np.std(np.delete(vals, 3))
    np.testing.assert_allclose(scale[3], want, rtol=1e-12)
    d = vals[3] - vals.mean()
    m2 = ((vals - vals.mean()) ** 2).sum()
    naive = np.sqrt(max(m2 - d * d * c / (c - 1), 0) / (c - 1))
    assert m2 - d * d * c / (c - 1) < m2 * kernels.EXACT_BELOW and abs(naive / want - 1) > 1e-6


def test_view_log_p_is_scipys_logsumexp_of_minus_loss():
    """log mean_v e^{−loss}: spread, ties at the minimum, e^{−loss} underflowing (loss > 745), an infinite loss
    in some views and in all."""
    rng = np.random.default_rng(1)
    shape = (3, 40, 18)
    for kind in ("spread", "ties", "huge", "inf"):
        loss = np.abs(rng.normal(0, 30, shape))
        if kind == "ties":
            loss = np.round(loss / 20)
        elif kind == "huge":
            loss += 800.0
        elif kind == "inf":
            loss[rng.random(shape) < 0.3] = np.inf
            loss[0, 0] = np.inf
        out = np.empty(shape[:2])
        with np.errstate(over="ignore"):
            _kernel("view_log_p")(loss, np.exp(-loss), out)
        want = logsumexp(-loss, axis=-1) - np.log(shape[-1])
        np.testing.assert_allclose(out, want, rtol=1e-13, atol=0, err_msg=kind)


def test_leave_one_out_log_means_have_no_cancellation():
    """The log mean p_y without one model, for every removal: against logsumexp of the others, including a
    removed value that dominates the sum (total minus it would cancel) and models with p_y = 0."""
    rng = np.random.default_rng(2)
    for m in (1, 2, 3, 8, 128):
        lp = -np.abs(rng.normal(0, 5, (m, 7))) * 10.0 ** rng.integers(-3, 3, (m, 7))
        lp[0, 0] = -np.inf
        lp[-1, 1] = 0.0
        lp[:-1, 1] = -800.0  # the last model's p_y dominates by e^800
        out = np.empty(lp.shape)
        _kernel("population_means")(lp, out)
        for t in range(m):
            with np.errstate(divide="ignore"):
                want = logsumexp(np.delete(lp, t, axis=0), axis=0) - np.log(m - 1) if m > 1 else np.full(7, -np.inf)
            np.testing.assert_allclose(out[t], want, rtol=1e-13, atol=0)


@pytest.mark.parametrize("kernels_on", [True, False])
@pytest.mark.parametrize("n_models, n_views, params", [(8, 3, {}), (6, 1, {"a": 0.3, "gamma": 1.5}), (4, 2, {"a": 0.5})])
def test_evaluation_with_and_without_kernels_equals_the_oracle(kernels_on, n_models, n_views, params, monkeypatch):
    """The whole evaluation (every attack, subsets, a population) with the compiled kernels and with the plain
    numpy path, each against the in-memory oracle to the project's tolerance."""
    if kernels_on and compiled is None:
        pytest.skip("numba is not installed")
    if not kernels_on:
        monkeypatch.setattr(kernels, "compiled", lambda: None)
    logits, keep, labels = synthetic(n_models, 150, n_views=n_views, seed=n_models)
    phi = lira_statistic(logits, labels)
    pop = phi[:, :30] + np.random.default_rng(3).normal(0, 0.3, (n_models, 30, n_views))
    subsets = {"outliers": np.arange(150) < 30}
    oracle = evaluate_inputs(AttackInputs.from_phi(phi, keep, pop), subsets, EVERY, params)
    stream = evaluate_stream(phi, keep, subsets, EVERY, params, population_phi=pop, block=41)
    assert ("compiled kernels" in stream["settings"]["evaluator"]) == kernels_on
    assert_same(oracle, stream)
    assert stream["settings"].get("rmia_offline_a_per_target") == oracle["settings"].get("rmia_offline_a_per_target")


@needs_numba
def test_kernels_see_a_diverged_model_and_ties_as_the_oracle_does():
    """A model whose φ is far off on some examples (the exact spread path) and φ with ties across models. (The
    fixed-variance attacks are left out: their global spreads come from sums shifted by one constant, which
    such an outlier moves far from most targets' means, in the numpy path as in the kernels.)"""
    m, n, v = 10, 80, 2
    rng = np.random.default_rng(4)
    phi = np.round(rng.normal(0, 1, (m, n, v)), 1)
    phi[3, ::7] = 1e6
    keep = keep_matrix(m, n, 4)
    attacks = [a for a in EVERY if "fixed" not in a]
    oracle = evaluate_inputs(AttackInputs.from_phi(phi, keep), None, attacks, {})
    assert_same(oracle, evaluate_stream(phi, keep, None, attacks, {}, block=17), attacks)


@pytest.mark.parametrize("kernels_on", [True, False])
def test_offline_scores_saturate_and_tie_as_scipys_do(kernels_on, monkeypatch):
    """φ so far below the OUT Gaussian that Pr[Z > φ] is 1 but for a subnormal: SciPy's log_ndtr is 0 from
    38σ on, so members 38.1σ below tie with non-members 40σ below (offline score 0). A kernel that scored the
    members 1e-318 ranked them above those non-members and moved the AUC by whole pairs (the demo's
    digits-lenet-flip0.05-r1 cell, no norm: 6e-6, one pair)."""
    if kernels_on and compiled is None:
        pytest.skip("numba is not installed")
    if not kernels_on:
        monkeypatch.setattr(kernels, "compiled", lambda: None)
    m, n = 8, 40
    keep = keep_matrix(m, n, 5)
    phi = np.random.default_rng(5).normal(0, 1, (m, n, 1))
    out = first_k_references(~keep[1:], m // 2 - 1) + 1  # target 0's OUT references, as the oracle takes them
    ref = phi[out, np.arange(n), 0]
    member = keep[0]
    y = np.where(member, -38.1, -40.0)
    y[::4] = np.random.default_rng(6).normal(0, 2, n)[::4]  # the rest ranked by finite scores
    phi[0, :, 0] = np.median(ref, axis=0) + y * np.std(ref, axis=0)
    oracle = evaluate_inputs(AttackInputs.from_phi(phi, keep), None, ["offline"], {}, targets=[0])
    assert (oracle["scores"]["offline"][0][y < -38] == 0).sum() >= 20  # the ties at 0 the test is about
    stream = evaluate_stream(phi, keep, None, ["offline"], {}, targets=[0], block=13)
    assert ("compiled kernels" in stream["settings"]["evaluator"]) == kernels_on
    assert_same(oracle, stream, ["offline"])


def test_no_numba_switch_turns_the_kernels_off(monkeypatch):
    """BNMEM_NO_NUMBA=1 (read when the kernels are first asked for) selects the numpy path."""
    monkeypatch.setenv("BNMEM_NO_NUMBA", "1")
    kernels.compiled.cache_clear()
    try:
        assert kernels.compiled() is None and not kernels.available()
    finally:
        monkeypatch.undo()
        kernels.compiled.cache_clear()


@needs_numba
def test_kernels_score_a_subset_of_targets_as_the_oracle_does():
    """Targets other than every model in order (the kernel reads their rows by index), offline a selected."""
    logits, keep, labels = synthetic(8, 120, n_views=2, seed=6)
    phi = lira_statistic(logits, labels)
    oracle = evaluate_inputs(AttackInputs.from_phi(phi, keep), None, EVERY, {}, targets=[5, 0, 3])
    stream = evaluate_stream(phi, keep, None, EVERY, {}, targets=[5, 0, 3], block=29)
    assert "compiled kernels" in stream["settings"]["evaluator"]
    assert_same(oracle, stream)


@needs_numba
def test_online_spread_ratios_over_many_views_neither_overflow_nor_underflow():
    """Online LiRA's log(scale_out / scale_in) is summed over views as the log of a product of the ratios: here
    each ratio is about 1e38 (IN references all equal: spread 0; OUT spread 1e8), so 20 views would overflow an
    unguarded product to inf (and its inverse, for the OUT side's removal, underflow to 0)."""
    m, n, v = 8, 40, 20
    keep = keep_matrix(m, n, 5)
    phi = np.where(keep[:, :, None], 0.0, np.random.default_rng(5).normal(0, 1e8, (m, n, v)))
    oracle = evaluate_inputs(AttackInputs.from_phi(phi, keep), None, ["online"], {})
    stream = evaluate_stream(phi, keep, None, ["online"], {}, block=13)
    assert np.isfinite(stream["scores"]["online"]).all()
    assert_same(oracle, stream, ["online"])
