"""The attack evaluation's fast paths against slow, obviously-correct oracles (loops, float64, numpy/sklearn):
the fixed-variance spreads under an offset, the ε bounds from the walked rank counts, the pooled curve (compiled
walk) against sklearn's ROC of all scores thinned, the vectorized softplus and the LiRA scorers' shared values.
The per-target metrics: tests/test_roc_rows.py; the compiled scoring kernels: tests/test_kernels.py."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_ndtr, logsumexp
from scipy.stats import norm
from sklearn.metrics import auc as sk_auc

from bnmem.attacks import AttackInputs, evaluate_inputs, evaluate_stream, keep_matrix, lira_statistic, spec
from bnmem.attacks import kernels, per_target, pooled
from bnmem.attacks.epsilon import clopper_pearson, distinct_clopper_pearson, epsilon_lower_bound, epsilon_ranked
from bnmem.attacks.lira import STD_EPS
from bnmem.attacks.metrics import FPR_LEVELS, metrics_from_roc, roc
from bnmem.attacks.result import evaluation_result, thin_curve
from bnmem.attacks.scores import loss_from_phi
from bnmem.errors import BnmemError
from test_attacks import synthetic
from test_streaming import assert_same


def test_fixed_variance_spreads_do_not_cancel_under_a_large_offset():
    logits, keep, labels = synthetic(8, 120, n_views=2, seed=5)
    phi = lira_statistic(logits, labels) + 1e5  # Σv² − (Σv)²/n without a shift would lose ~10 digits
    attacks = ["online_fixed_variance", "offline_fixed_variance"]
    oracle = evaluate_inputs(AttackInputs.from_phi(phi, keep), None, attacks)
    # φ + 1e5 holds its deviations to ~1e-11 relative (its ulp), in the oracle's np.std as in any other
    # order of the sums; what this checks is that nothing cancels (unshifted sums would lose ~10 digits)
    assert_same(oracle, evaluate_stream(phi, keep, None, attacks, block=31), attacks=attacks, score_rtol=1e-9)


def _rows(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in (2, 5, 40, 301):
        members = rng.uniform(size=(4, n)) < 0.5
        members[0, :2] = [True, False]
        cont = rng.normal(size=(4, n))
        tied = rng.integers(0, 4, size=(4, n)).astype(np.float64)
        inf = cont.copy()
        inf[rng.uniform(size=inf.shape) < 0.1] = np.inf
        inf[rng.uniform(size=inf.shape) < 0.1] = -np.inf
        out += [(s, members) for s in (cont, tied, inf)]
    return out


def _bounds(scores: np.ndarray, members: np.ndarray, deltas: np.ndarray, known=None) -> list:
    """Every row's ε bound as the evaluation finds it: the walked rank counts, then epsilon_ranked."""
    counts = per_target.roc_summaries(scores, members, {"all": np.ones(scores.shape[1], bool)}, deltas)["all"][1]
    return epsilon_ranked(counts, deltas, known=known)


def _assert_same_bound(got, want) -> None:
    """Every field of two EpsilonBounds: the same type and value (floats to 1e-12 relative: the point bound's
    logarithms are libm's in the kernels, numpy's in the oracle)."""
    for key, value in want.to_dict().items():
        other = getattr(got, key)
        assert type(other) is type(value), (key, type(other), type(value))
        assert other == value or (value != value and other != other) or (
            isinstance(value, float) and abs(other - value) <= 1e-12 * abs(value)), (key, other, value)


def _oracle_thinned(scores: np.ndarray, members: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """The pooled curve the obvious way: sklearn's ROC of all scores together, then thin_curve."""
    if members.all() or not members.any():
        return np.zeros(0), np.zeros(0)
    return thin_curve(*roc(scores.ravel(), members.ravel()), max_points=max_points)


def _pooled_cases(seed: int):
    """Rows of continuous scores, few distinct values (ties within and across rows), ±inf and ±0, the largest
    float next to +inf, and separated classes (long runs of one class: kept points far apart)."""
    rng = np.random.default_rng(seed)
    for trial in range(25):
        rows, n = int(rng.integers(2, 12)), int(rng.integers(20, 300))
        members = rng.uniform(size=(rows, n)) < rng.uniform(0.1, 0.9)
        kind = trial % 5
        if kind == 0:
            s = rng.normal(size=(rows, n))
        elif kind == 1:
            s = rng.integers(0, int(rng.integers(2, 40)), size=(rows, n)).astype(np.float64)
        elif kind == 2:
            s = rng.normal(size=(rows, n))
            for value, p in ((np.inf, 0.1), (-np.inf, 0.1), (np.finfo(float).max, 0.05), (0.0, 0.05), (-0.0, 0.05)):
                s[rng.uniform(size=s.shape) < p] = value
        elif kind == 3:
            s = rng.normal(size=(rows, n)) + 4.0 * members  # nearly separated
        else:
            s = np.round(rng.normal(size=(rows, n)), 1) + 0.5 * members
        yield s, members, rng.uniform(size=n) < 0.6


@pytest.mark.parametrize("seed", [0, 1])
def test_pooled_curve_is_thin_curve_of_sklearns_roc_of_all_scores(seed, kernels_on):
    """The pooled curve (the compiled walk of the sorted classes, or sklearn's ROC without numba) against
    sklearn's ROC of every row's scores in the subset together, thinned: bit for bit, for curves shorter than
    max_points (kept whole), longer ones (thinned), and the whole curve (max_points None)."""
    thinned = 0
    for scores, members, mask in _pooled_cases(seed):
        for cols in (np.ones(scores.shape[1], bool), mask):
            for max_points in (2, 4, 10, 40, 4000, None):
                want = _oracle_thinned(scores[:, cols], members[:, cols], max_points or scores.size + 1)
                got = pooled.pooled_curve(scores, members, cols, max_points)
                for g, w in zip(got, want):
                    assert g.dtype == w.dtype and g.tobytes() == w.tobytes(), (max_points, g, w)
                whole = _oracle_thinned(scores[:, cols], members[:, cols], scores.size + 1)[0]
                thinned += want[0].size < whole.size
    assert thinned > 100  # the thinning itself was compared, not only whole curves


@pytest.mark.parametrize("seed", [0, 1])
def test_pooled_curves_of_a_subset_and_its_complement_are_each_subsets_own(seed, kernels_on):
    """``all`` is the disjoint union of a subset and its complement (its sorted scores merged from theirs with
    the kernels): every curve bit for bit sklearn's ROC of its own pooled scores, thinned."""
    for scores, members, mask in _pooled_cases(seed):
        masks = {"all": np.ones(scores.shape[1], bool), "part": mask, "rest": ~mask, "again": mask}
        for max_points in (10, 4000):
            got = pooled.pooled_curves(scores, members, masks, max_points)
            for name, cols in masks.items():
                want = _oracle_thinned(scores[:, cols], members[:, cols], max_points)
                for g, w in zip(got[name], want):
                    assert g.dtype == w.dtype and g.tobytes() == w.tobytes(), (name, max_points)


def test_pooled_curve_refuses_nan_scores_as_roc_does(kernels_on):
    """A NaN score in the subset is one clear error on either path (a NaN outside the subset is not read)."""
    scores = np.random.default_rng(0).normal(size=(3, 50))
    members = np.arange(150).reshape(3, 50) % 2 == 0
    scores[1, 7] = np.nan
    mask = np.ones(50, bool)
    with pytest.raises(BnmemError, match="NaN"):
        pooled.pooled_curve(scores, members, mask, 40)
    mask[7] = False
    assert pooled.pooled_curve(scores, members, mask, 40)[0].size > 0


def test_distinct_clopper_pearson_is_clopper_pearson_bit_for_bit():
    """Repeated (k, n, α) triples (and triples differing in one of the three only), k = 0 and k = n, both sides."""
    rng = np.random.default_rng(0)
    n = rng.integers(1, 12, 3000)
    k = np.minimum(rng.integers(0, 12, 3000), n)
    alpha = rng.choice([0.05 / 8, 0.05 / 10, 0.05 / 12], 3000)
    for upper in (False, True):
        got = distinct_clopper_pearson(k, n, alpha, upper)
        assert got.tobytes() == clopper_pearson(k, n, alpha, upper).tobytes()
    assert distinct_clopper_pearson(k[:0], n[:0], alpha[:0], True).size == 0


def test_npy_phi_reads_what_a_memory_map_holds(tmp_path):
    """One pread per model (bnmem's float32 files, header versions 1.0 and 2.0) and the memory-mapped way
    (any other layout) against np.load of the two files, bit for bit, for blocks at either end and inside."""
    from bnmem.attacks.phi import NpyPhi, lo_path

    rng = np.random.default_rng(0)
    phi = rng.normal(size=(5, 37, 3)) * 10
    hi = phi.astype(np.float32)
    lo = (phi - hi).astype(np.float32)
    cases = {"v1": (hi, lo, (1, 0)), "v2": (hi, lo, (2, 0)), "f64": (phi, None, None),
             "fortran": (np.asfortranarray(hi), np.asfortranarray(lo), None)}
    for name, (a, b, version) in cases.items():
        path = tmp_path / f"{name}.npy"
        for arr, where in ((a, path), (b, lo_path(path))):
            if arr is not None:
                with open(where, "wb") as f:
                    np.lib.format.write_array(f, arr, version=version)
        src = NpyPhi(path)
        assert (src._offsets[path] is not None) == (version is not None)
        for start, stop in ((0, 37), (0, 1), (36, 37), (5, 23)):
            want = np.load(path).astype(np.float64)[:, start:stop]
            if b is not None:
                want += np.load(lo_path(path))[:, start:stop]
            got = src.read(start, stop)
            assert got.dtype == np.float64 and got.tobytes() == np.ascontiguousarray(want).tobytes()


def test_loss_from_phi_is_logaddexp_to_rounding():
    phi = np.concatenate([np.linspace(-800, 800, 20001), [0.0, -0.0, 1e-300, -1e-300, 36.7, -36.7]])
    got, want = loss_from_phi(phi), np.logaddexp(0.0, -phi)
    np.testing.assert_allclose(got, want, rtol=4e-16, atol=0)
    assert loss_from_phi(np.array([0.0]))[0] == np.log(2.0)


# ---------------------------------------------------------------- the numpy path's LiRA scorers (bit for bit)


def test_streaming_lira_scorers_are_the_reference_formulas_bit_for_bit():
    """The shared standardized values change no bit of online / offline LiRA (per-example and fixed)."""
    rng = np.random.default_rng(1)
    t, b, v = 5, 7, 3
    x = rng.normal(0, 3, (t, b, v))
    fits = {key: rng.normal(0, 1, (t, b, v)) for key in ("med_in", "med_out")}
    for key in ("sd_in", "sd_out"):
        fits[key] = np.abs(rng.normal(0, 1, (t, b, v)))
        fits[key][0, 0] = 0.0  # zero spread: STD_EPS
    x[1, 1] = fits["med_out"][1, 1]  # zero deviations (signed zeros)
    sd_in, sd_out = np.abs(rng.normal(0, 1, t)), np.abs(rng.normal(0, 1, t))
    c = np.log(np.sqrt(2 * np.pi))

    def logpdf(x, loc, scale):  # scipy.stats.norm.logpdf's order of operations
        y = (x - loc) / scale
        return (-(y**2) / 2.0 - c) - np.log(scale)

    block = spec.Block(x, fits, sd_in, sd_out)
    for fixed in (False, True):
        s_in = (sd_in[:, None, None] if fixed else fits["sd_in"]) + STD_EPS
        s_out = (sd_out[:, None, None] if fixed else fits["sd_out"]) + STD_EPS
        suffix = "_fixed_variance" if fixed else ""
        online = logpdf(x, fits["med_in"], s_in) - logpdf(x, fits["med_out"], s_out)
        offline = -log_ndtr(-(x - fits["med_out"]) / s_out)
        for name, want in ((f"offline{suffix}", offline), (f"online{suffix}", online)):
            got = spec.get(name).stream(block)
            assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want)), name
    np.testing.assert_allclose(online, norm.logpdf(x, fits["med_in"], s_in) - norm.logpdf(x, fits["med_out"], s_out),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_epsilon_ranked_is_the_per_target_bound(seed, kernels_on):
    """Rank counts walked (or searched, without numba) for every row at once (ties, ±inf, one-class rows)
    against epsilon_lower_bound, which sorts each class of one row and searches it."""
    for scores, members in _rows(seed):
        members = members.copy()
        members[1] = True  # a row without non-members
        deltas = np.array([1e-3, 0.0, 0.02, 1e-3])
        got = _bounds(scores, members, deltas)
        for i in range(scores.shape[0]):
            _assert_same_bound(got[i], epsilon_lower_bound(scores[i], members[i], float(deltas[i])))


@pytest.mark.parametrize("rows_at_once", [1, 7])
def test_roc_curves_and_epsilon_over_row_chunks_equal_one_chunk(rows_at_once, monkeypatch):
    """evaluation_result's per-target pass with the rows sorted one or a few at a time: the same numbers."""
    rng = np.random.default_rng(3)
    t, n = 9, 50
    members = rng.uniform(size=(t, n)) < 0.5
    scores = {"tied": rng.integers(0, 5, size=(t, n)).astype(np.float64), "cont": rng.normal(size=(t, n))}
    scores["cont"][0, :4] = [np.inf, -np.inf, np.inf, -np.inf]
    masks = {"all": np.ones(n, bool), "odd": np.arange(n) % 2 == 1}
    want = evaluation_result(scores, members, list(range(t)), masks, {})
    monkeypatch.setattr(per_target, "ROWS_AT_ONCE", rows_at_once)
    got = evaluation_result(scores, members, list(range(t)), masks, {})
    assert_same(want, got, attacks=list(scores), atol=0.0, score_rtol=0.0)
    for name in scores:
        for sub in masks:
            assert got["metrics"][name][sub]["eps_lb_counts"] == want["metrics"][name][sub]["eps_lb_counts"]
            for (f_got, t_got), (f_want, t_want) in zip(got["curves"][name][sub]["per_target"],
                                                      want["curves"][name][sub]["per_target"]):
                assert f_got.tobytes() == f_want.tobytes() and t_got.tobytes() == t_want.tobytes()


def test_metrics_from_roc_is_scipy_trapezoid_and_the_masked_maximum_bit_for_bit():
    """AUC written out as scipy.integrate.trapezoid computes it, TPR at low FPR by binary search on a rising
    curve: the same numbers as the wrapper and the masked maximum, on real, non-monotone and falling curves."""
    from scipy.integrate import trapezoid

    rng = np.random.default_rng(4)
    curves = []
    for n in (2, 3, 50, 2000):
        members = rng.uniform(size=n) < 0.5
        members[:2] = [True, False]
        curves.append(roc(np.round(rng.normal(size=n) + members, 1), members))  # ties
        curves.append(roc(rng.normal(size=n) + 3 * members, members))
        fpr = np.sort(rng.uniform(size=n))
        curves.append((fpr, rng.uniform(size=n)))  # rising FPR, TPR not monotone
        curves.append((fpr[::-1].copy(), np.sort(rng.uniform(size=n))[::-1].copy()))  # falling
    curves.append((np.array([0.0, 0.0005, 0.0005, 0.01, 0.01, 1.0]), np.array([0.0, 0.1, 0.2, 0.3, 0.5, 1.0])))
    for fpr, tpr in curves:
        got = metrics_from_roc(fpr, tpr)
        rising = bool(np.all(fpr[1:] >= fpr[:-1]))
        want_auc = float(trapezoid(tpr, fpr)) if rising else float(sk_auc(fpr, tpr))
        assert got["auc"] == want_auc
        assert got["balanced_acc"] == float(np.max((tpr + 1.0 - fpr) / 2.0))
        for name, level in FPR_LEVELS.items():
            ok = fpr <= level
            want = float(np.max(tpr[ok])) if ok.any() else float("nan")
            assert got[name] == want or (want != want and got[name] != got[name]), (name, got[name], want)


def test_known_quantiles_are_clopper_pearson_bit_for_bit_and_each_computed_once(monkeypatch):
    """Calls sharing some (k, n, α) triples (and triples differing in one of the three only), k = 0 and
    k = n, both sides: every bound clopper_pearson's, and a triple computed once whichever call asks first."""
    from bnmem.attacks import epsilon

    computed = []

    def counted(k, n, alpha, upper):
        computed.append(np.asarray(k).size)
        return clopper_pearson(k, n, alpha, upper)

    rng = np.random.default_rng(5)
    known = epsilon.KnownQuantiles()
    monkeypatch.setattr(epsilon, "clopper_pearson", counted)
    seen: set = set()
    for call in range(6):
        n = rng.integers(1, 40, 500)
        k = np.minimum(rng.integers(0, 40, 500), n)
        alpha = rng.choice([0.05 / 8, 0.05 / 10, 0.05 / 12], 500)
        for upper in (False, True):
            computed.clear()
            got = known.bounds(k.astype(np.int64), n.astype(np.int64), alpha, upper)
            assert got.tobytes() == clopper_pearson(k, n, alpha, upper).tobytes()
            new = {(a, b, c, upper) for a, b, c in zip(k.tolist(), n.tolist(), alpha.tolist())} - seen
            assert sum(computed) == len(new)
            seen |= new
    assert len(seen) > 1000 and call == 5


@pytest.mark.parametrize("seed", [0, 1])
def test_epsilon_bounds_from_the_deciding_quantiles_are_the_per_target_bound(seed, kernels_on):
    """The beta quantiles computed only where they can decide a row's bound, and remembered across the
    "attacks" of one evaluation, against epsilon_lower_bound (every threshold's quantiles): weak, strong and
    separated signals, ties, scores near a few values, δ from 0 to large; every field (the point bound to
    1e-12 relative)."""
    from bnmem.attacks.epsilon import KnownQuantiles

    rng = np.random.default_rng(seed)
    rows, n = 6, 3000
    members = rng.uniform(size=(rows, n)) < rng.uniform(0.2, 0.8, (rows, 1))
    deltas = np.array([0.0, 1e-4, 1.0 / 1500, 0.01, 0.1, 0.3])
    known = KnownQuantiles()
    for strength in (0.0, 0.3, 1.0, 3.0, 8.0):
        for tie in (None, 0.5):
            scores = rng.normal(size=(rows, n)) + strength * members * rng.uniform(0.5, 1.5, (rows, 1))
            if tie is not None:
                scores = np.round(scores / tie) * tie
            got = _bounds(scores, members, deltas, known=known)
            for i in range(rows):
                _assert_same_bound(got[i], epsilon_lower_bound(scores[i], members[i], float(deltas[i])))


# ---------------------------------------------------------------- RMIA's and the loss attack's passes (bit for bit)


def test_loss_from_phi_is_the_written_out_softplus_bit_for_bit():
    """log1p(exp(−|φ|)) + max(−φ, 0), one temporary per step: the fast path's fewer passes change no bit."""
    rng = np.random.default_rng(3)
    phi = np.concatenate([rng.normal(0, 20, 5000), rng.normal(0, 1e-5, 500), np.linspace(-800, 800, 2001),
                          [0.0, -0.0, 5e-324, -5e-324, 1e-300, -1e-300, 36.7, -36.7, 709.8, -709.8]])
    want = np.log1p(np.exp(-np.abs(phi))) + np.maximum(-phi, 0.0)
    got = loss_from_phi(phi)
    assert got.tobytes() == want.tobytes()
    block = phi[:4896].reshape(16, 17, 18)[:, 3:9]  # a strided slice of a block, as the evaluation reads it
    assert loss_from_phi(block).tobytes() == (np.log1p(np.exp(-np.abs(block))) + np.maximum(-block, 0.0)).tobytes()


def test_streaming_view_means_are_numpys_mean_bit_for_bit():
    """Every attack's views averaged into the score columns as np.mean averages them: a toy attack whose
    per-view values span many decades (so a different summation order would round differently) scores the
    same bits streamed as in the oracle."""
    name = "toy_wide_views"
    spec.register(spec.AttackSpec(name, "toy", oracle=lambda r: np.exp(3 * r.phi_t).mean(axis=1),
                                   stream=lambda b: np.exp(3 * b.x)))
    try:
        rng = np.random.default_rng(5)
        m, n, v = 6, 90, 18
        phi = rng.normal(0, 4, (m, n, v))
        keep = keep_matrix(m, n, 5)
        got = evaluate_stream(phi, keep, attacks=[name, "loss"], block=32)["scores"]
        want = evaluate_inputs(AttackInputs.from_phi(phi, keep), attacks=[name, "loss"])["scores"]
        for attack in (name, "loss"):
            assert np.asarray(got[attack]).tobytes() == np.asarray(want[attack]).tobytes(), attack
            direct = {name: np.exp(3 * phi).mean(axis=2), "loss": -loss_from_phi(phi).mean(axis=2)}[attack]
            assert np.asarray(got[attack]).tobytes() == direct.tobytes(), attack
    finally:
        spec.unregister(name)
