"""The attack evaluation's fast paths against slow, obviously-correct oracles (loops, float64, numpy/sklearn):
the fixed-variance spreads under an offset, the ε point bound from ROC corners and the rank counts from the
ROC counts, the pooled curve from merged rows and its thinned form from counts at splitters, the vectorized
softplus and the LiRA scorers' shared values. The compiled scoring kernels: tests/test_kernels.py."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_ndtr, logsumexp
from scipy.stats import norm
from sklearn.metrics import auc as sk_auc

from bnmem.attacks import AttackInputs, evaluate_inputs, evaluate_stream, keep_matrix, lira_statistic, spec
from bnmem.attacks import metrics as metrics_module
from bnmem.attacks.epsilon import (
    _point_bound,
    _rank_counts,
    _sorted_classes,
    chunk_rank_counts,
    clopper_pearson,
    distinct_clopper_pearson,
    epsilon_lower_bound,
    epsilon_ranked,
    rank_grid,
)
from bnmem.attacks.lira import STD_EPS
from bnmem.attacks.metrics import FPR_LEVELS, metrics_from_roc, rank_rows, roc
from bnmem.attacks import pooled
from bnmem.attacks.result import evaluation_result, thin_curve
from bnmem.attacks.scores import loss_from_phi
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


@pytest.mark.parametrize("seed", [0, 1])
def test_point_bounds_from_roc_corners_equal_the_per_threshold_oracle(seed):
    for scores, members in _rows(seed):
        deltas = np.full(scores.shape[0], 1e-3)
        got = epsilon_ranked(rank_rows(scores, members), deltas)
        for i in range(scores.shape[0]):
            s_in, s_out = _sorted_classes(scores[i], members[i])
            if s_in.size and s_out.size:
                assert got[i].eps_point == _point_bound(s_in, s_out, 1e-3)  # bit for bit


@pytest.mark.parametrize("seed", [0, 1])
def test_pooled_curve_from_merged_rows_is_roc_of_all_scores(seed):
    for scores, members in _rows(seed):
        merged = rank_rows(scores, members).merged()
        for mask in (np.ones(scores.shape[1], bool), np.arange(scores.shape[1]) % 3 == 0):
            fpr, tpr = merged.subset(mask).curves()[0]
            ofpr, otpr = roc(scores[:, mask].ravel(), members[:, mask].ravel())
            np.testing.assert_array_equal(fpr, ofpr)
            np.testing.assert_array_equal(tpr, otpr)


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
def test_thinned_pooled_curve_equals_thin_curve_of_all_scores(seed, monkeypatch):
    """The counts-and-buckets path (every size forced through it, splitters every 1..7 entries or the default,
    buckets gathered a few at a time) against sklearn's ROC of the pooled scores, thinned: bit for bit, for
    curves shorter than max_points too (there it must fall back and keep every point)."""
    monkeypatch.setattr(pooled, "MERGE_BELOW", 0)
    monkeypatch.setattr(pooled, "GATHER_BATCH", 50)
    fast = 0
    for scores, members, mask in _pooled_cases(seed):
        ranked = rank_rows(scores, members)
        for view, s, m in ((ranked, scores, members), (ranked.subset(mask), scores[:, mask], members[:, mask])):
            for max_points in (4, 10, 40, 4000):
                want = _oracle_thinned(s, m, max_points)
                for stride in (1, 3, 7, None):
                    got = pooled.thinned_pooled_curve(view, max_points, stride=stride)
                    for g, w in zip(got, want):
                        assert g.dtype == w.dtype and g.tobytes() == w.tobytes()
                    if 0 < m.sum() < m.size:
                        splitters = pooled._Splitters.of_view(view, stride)
                        fast += splitters.thinned(int(m.sum()), m.size - int(m.sum()), max_points) is not None
    assert fast > 50  # the fast path itself was compared, not only its fallback


@pytest.mark.parametrize("seed", [0, 1])
def test_pooled_curves_of_a_view_made_of_two_parts_equal_thin_curve_of_all_scores(seed, monkeypatch):
    """all = outliers + inliers (the small part a tenth to a quarter of the columns): the small part merged
    whole, the large part's splitters serving the whole, the whole's counts the parts' sums, against sklearn's
    ROC of each view's pooled scores, thinned: bit for bit (ties, ±inf in either part, separated classes,
    other subsets beside the partition computed on their own)."""
    monkeypatch.setattr(pooled, "MERGE_BELOW", 0)
    monkeypatch.setattr(pooled, "GATHER_BATCH", 50)
    split, fast, finish = 0, [0], pooled._finish

    def counted(splitters, view, n_in, max_points):
        fast[0] += splitters.thinned(n_in, view.values.size - n_in, max_points) is not None
        return finish(splitters, view, n_in, max_points)

    monkeypatch.setattr(pooled, "_finish", counted)
    for scores, members, mask in _pooled_cases(seed):
        n = scores.shape[1]
        rng = np.random.default_rng(n)
        small = rng.permutation(n) < max(1, int(n * rng.uniform(0.1, 0.25)))
        masks = {"all": np.ones(n, bool), "outliers": small, "inliers": ~small, "other": mask}
        ranked = rank_rows(scores, members)
        views = {k: ranked.subset(m) for k, m in masks.items()}
        split += pooled._split_of(masks) == ("all", "inliers", "outliers")
        for max_points in (4, 40, 4000):
            got = pooled.thinned_pooled_curves(views, masks, max_points)
            assert set(got) == set(masks)
            for k, m in masks.items():
                want = _oracle_thinned(scores[:, m], members[:, m], max_points)
                for g, w in zip(got[k], want):
                    assert g.dtype == w.dtype and g.tobytes() == w.tobytes(), (k, max_points)
    assert split == 25  # every case went through the split path
    assert fast[0] > 40  # and its counts gave the curves (not only the merged fallback)


def test_split_of_finds_only_a_disjoint_cover_with_a_small_part():
    n = 40
    small = np.arange(n) < 8
    whole = np.ones(n, bool)
    assert pooled._split_of({"all": whole, "a": small, "b": ~small}) == ("all", "b", "a")
    assert pooled._split_of({"all": whole, "a": ~small, "b": small}) == ("all", "a", "b")
    half = np.arange(n) < 20
    assert pooled._split_of({"all": whole, "a": half, "b": ~half}) is None  # the smaller part too large
    overlap = small.copy()
    overlap[20] = True
    assert pooled._split_of({"all": whole, "a": overlap, "b": ~small}) is None  # not disjoint
    assert pooled._split_of({"all": whole, "a": small, "b": ~small & (np.arange(n) < 39)}) is None  # not all
    assert pooled._split_of({"all": whole, "a": small}) is None


def test_thinned_pooled_curve_falls_back_when_the_curve_may_be_short(monkeypatch):
    """Separated classes: the whole curve has 3 points, so thin_curve keeps them all; the counts cannot show
    more than max_points points and the rows are merged."""
    monkeypatch.setattr(pooled, "MERGE_BELOW", 0)
    members = np.tile(np.arange(200) < 100, (5, 1))
    scores = np.where(members, 2.0, 1.0) + np.linspace(0, 0.5, 200)
    ranked = rank_rows(scores, members)
    assert pooled._Splitters.of_view(ranked, 3).thinned(500, 500, 4) is None
    got = pooled.thinned_pooled_curve(ranked, 4, stride=3)
    np.testing.assert_array_equal(got[0], _oracle_thinned(scores, members, 4)[0])


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kernels_on", [True, False])
def test_row_positions_from_merges_are_binary_searches(seed, kernels_on, monkeypatch):
    """Each row walked with the splitters (the compiled kernel; without it, numpy's searchsorted per row)
    against a binary search per row and splitter: entries at or above and above each splitter, and the pooled
    entries and members there, with ties between the rows and the splitters (the splitters are sampled from
    the rows), ±0, the largest floats and heavy ties."""
    from bnmem.attacks import kernels

    if kernels_on and kernels.compiled() is None:
        pytest.skip("numba is not installed")
    if not kernels_on:
        monkeypatch.setattr(kernels, "compiled", lambda: None)
    for scores, members, _ in _pooled_cases(seed):
        view = rank_rows(scores, members)
        values = metrics_module._finite_scores(view.values)
        rows, n = values.shape
        for stride in (1, 3, 16):
            sig = pooled._splitter_values(values, stride)
            assert (np.diff(sig) < 0).all()  # distinct, descending
            assert np.isin(np.concatenate([values[:, 0], values[:, -1]]), sig).all()  # every row's ends
            want_ge = np.stack([np.searchsorted(-values[r], -sig, side="right") for r in range(rows)])
            want_gt = np.stack([np.searchsorted(-values[r], -sig, side="left") for r in range(rows)])
            members_before = np.concatenate([np.zeros((rows, 1), int), np.cumsum(view.members, axis=1)], axis=1)
            want_counts = [want_ge.sum(axis=0), want_gt.sum(axis=0),
                           np.take_along_axis(members_before, want_ge, axis=1).sum(axis=0),
                           np.take_along_axis(members_before, want_gt, axis=1).sum(axis=0)]
            ge, gt, counts = pooled._row_positions(values, view.members, sig)
            np.testing.assert_array_equal(ge, want_ge)
            np.testing.assert_array_equal(gt, want_gt)
            for got_c, want_c in zip(counts, want_counts):
                np.testing.assert_array_equal(got_c, want_c)


def test_segments_sorted_as_padded_rows_are_each_segment_sorted():
    """Segments of many sizes (empty, one entry, several powers of two, one size only) with ties inside
    and member flags: each segment's scores descending, the same multiset of (score, member) pairs."""
    rng = np.random.default_rng(3)
    for sizes in ([0, 1, 2, 3, 0, 5, 17, 64, 65, 300, 1, 0], [40] * 7, [0, 0], [1000, 3, 1]):
        per_seg = np.array(sizes, dtype=np.int64)
        # Disjoint descending ranges (segment k in (-k - 1, -k)), shuffled within, few distinct values.
        vals = np.concatenate([-k - rng.integers(1, 8, size=c) / 9.0 for k, c in enumerate(sizes)])
        mem = rng.uniform(size=vals.size) < 0.5
        got_v, got_m = pooled._sort_segments(vals, mem, per_seg)
        at = 0
        for c in sizes:
            part = slice(at, at + c)
            assert (np.diff(got_v[part]) <= 0).all()
            want = sorted(zip(vals[part].tolist(), mem[part].tolist()))
            assert sorted(zip(got_v[part].tolist(), got_m[part].tolist())) == want
            at += c


def test_count_levels_is_the_largest_count_within_each_level():
    grid = pooled.fpr_grid(4000)
    for n_out in (1, 7, 1000, 6_400_000, 12_345_677):
        c = pooled.count_levels(grid, n_out)
        assert ((c / float(n_out) <= grid) & ((c == n_out) | ((c + 1) / float(n_out) > grid))).all()


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


@pytest.mark.parametrize("chunk", [5, 1 << 17])
@pytest.mark.parametrize("seed", [0, 1])
def test_epsilon_ranked_is_the_per_target_bound_bit_for_bit(seed, chunk, monkeypatch):
    """Rank counts read off the ROC counts (ties, ±inf, one-class rows, several rows per chunk or one)
    against epsilon_lower_bound, which sorts each class and searches it."""
    monkeypatch.setattr(metrics_module, "CHUNK_ENTRIES", chunk)
    for scores, members in _rows(seed):
        members = members.copy()
        members[1] = True  # a row without non-members
        deltas = np.array([1e-3, 0.0, 0.02, 1e-3])
        got = epsilon_ranked(rank_rows(scores, members), deltas)
        for i in range(scores.shape[0]):
            want = epsilon_lower_bound(scores[i], members[i], float(deltas[i]))
            for key, value in want.to_dict().items():
                other = getattr(got[i], key)
                assert type(other) is type(value), (key, type(other), type(value))
                assert other == value or (value != value and other != other), (i, key, other, value)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rank_counts_from_roc_counts_are_the_class_searches(seed):
    """tp, fp at every rank threshold (non-member ranks, then member ranks) as _rank_counts finds them by
    searching each class's sorted scores; ties, ±inf at both ends, one-class rows."""
    for scores, members in _rows(seed):
        members = members.copy()
        members[1] = False  # a row without members
        ranked = rank_rows(scores, members)
        got = chunk_rank_counts(ranked, ranked.thresholds(clip=False))
        for i, counts in enumerate(got):
            s_in, s_out = _sorted_classes(scores[i], members[i])
            if not (s_in.size and s_out.size):
                assert counts is None
                continue
            tp, fp = _rank_counts(s_in, s_out, rank_grid(s_out.size), rank_grid(s_in.size))
            assert counts[:2] == (s_in.size, s_out.size) and type(counts[0]) is int
            np.testing.assert_array_equal(counts[2], tp)
            np.testing.assert_array_equal(counts[3], fp)
            assert counts[2].dtype == tp.dtype and counts[3].dtype == fp.dtype


@pytest.mark.parametrize("chunk", [7, 1 << 17])
def test_roc_curves_and_epsilon_over_chunks_equal_one_chunk(chunk, monkeypatch):
    """evaluation_result's single pass (curves and ε from one count per chunk) with many chunks."""
    rng = np.random.default_rng(3)
    t, n = 9, 50
    members = rng.uniform(size=(t, n)) < 0.5
    scores = {"tied": rng.integers(0, 5, size=(t, n)).astype(np.float64), "cont": rng.normal(size=(t, n))}
    scores["cont"][0, :4] = [np.inf, -np.inf, np.inf, -np.inf]
    masks = {"all": np.ones(n, bool), "odd": np.arange(n) % 2 == 1}
    want = evaluation_result(scores, members, list(range(t)), masks, {})
    monkeypatch.setattr(metrics_module, "CHUNK_ENTRIES", chunk)
    got = evaluation_result(scores, members, list(range(t)), masks, {})
    for name in scores:
        for sub in masks:
            for c_got, c_want in zip(got["curves"][name][sub]["per_target"], want["curves"][name][sub]["per_target"]):
                np.testing.assert_array_equal(c_got[0], c_want[0])
                np.testing.assert_array_equal(c_got[1], c_want[1])
            for i in range(t):
                fpr, tpr = roc(scores[name][i, masks[sub]], members[i, masks[sub]])
                np.testing.assert_array_equal(got["curves"][name][sub]["per_target"][i][0], fpr)
                np.testing.assert_array_equal(got["curves"][name][sub]["per_target"][i][1], tpr)
            assert got["metrics"][name][sub]["eps_lb_counts"] == want["metrics"][name][sub]["eps_lb_counts"]
            assert got["metrics"][name][sub]["eps_lb_per_target"] == want["metrics"][name][sub]["eps_lb_per_target"]


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


def _sort_cases(seed: int):
    """[rows, n] float64 rows: continuous, few distinct values, values equal in their high 32 bits (both
    signs), ±0, ±inf, the largest float and subnormals, and tiny rows."""
    rng = np.random.default_rng(seed)
    for trial in range(40):
        rows, n = int(rng.integers(1, 5)), int(rng.integers(1, 500))
        kind = trial % 5
        if kind == 0:
            s = rng.normal(size=(rows, n))
        elif kind == 1:
            s = rng.integers(-3, 3, size=(rows, n)).astype(np.float64)
        elif kind == 2:  # one high half, many low halves: only the final sort by value orders them
            s = (1.0 + rng.integers(0, 60, size=(rows, n)) * 2.0**-45) * rng.choice([-1.0, 1.0], size=(rows, n))
        elif kind == 3:
            s = rng.normal(size=(rows, n))
            for value in (np.inf, -np.inf, 0.0, -0.0, np.finfo(float).max, -np.finfo(float).max, 5e-324, -5e-324):
                s[rng.uniform(size=s.shape) < 0.05] = value
        else:
            s = np.round(rng.normal(size=(rows, n)), 2) * 1e-300
        yield s, rng.uniform(size=(rows, n)) < 0.5


@pytest.mark.parametrize("seed", [0, 1])
def test_radix_sort_is_a_descending_sort_and_its_positions(seed):
    """sort_descending (and rank_rows built on it) against numpy's comparison sort: the same values in the
    same order, each taken from the position it names in its own row, every position once."""
    for scores, members in _sort_cases(seed):
        rows, n = scores.shape
        out = np.empty_like(scores)
        flat = metrics_module.sort_descending(np.ascontiguousarray(scores), out)
        for i in range(rows):
            want = np.sort(scores[i])[::-1]
            assert np.array_equal(out[i], want)  # ±0 compare equal: their order is not read
            assert np.array_equal(np.sort(flat[i]), np.arange(i * n, (i + 1) * n))
        assert np.array_equal(scores.ravel()[flat], out)
        assert out.tobytes() == scores.ravel()[flat].tobytes()
        ranked = rank_rows(scores, members)
        assert ranked.columns.dtype == np.int32 and ranked.values.tobytes() == out.tobytes()
        np.testing.assert_array_equal(np.take_along_axis(members, ranked.columns.astype(np.intp), 1), ranked.members)
        np.testing.assert_array_equal(np.take_along_axis(scores, ranked.columns.astype(np.intp), 1), ranked.values)


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


@pytest.mark.parametrize("chunk", [7, 1 << 17])
@pytest.mark.parametrize("seed", [0, 1])
def test_kept_point_metrics_are_metrics_from_roc_of_each_sklearn_curve(seed, chunk, monkeypatch):
    """Every row's metrics at once from a chunk's counts against metrics_from_roc of sklearn's curve of that
    row alone: bit for bit (nan where a row lacks a class), in chunks of one row or several."""
    monkeypatch.setattr(metrics_module, "CHUNK_ENTRIES", chunk)
    rng = np.random.default_rng(seed)
    members = rng.uniform(size=(3, 4000)) < 0.5
    scores = rng.normal(size=(3, 4000)) + members * np.array([[0.5], [0.0], [2.0]])
    scores[2] = np.round(scores[2], 1)  # ties; thousands of non-members: several points within each FPR level
    for scores, members in _rows(seed) + [(scores, members)]:
        members = members.copy()
        members[1] = False  # a row without members
        for part_at, part, clipped, _ in rank_rows(scores, members).roc_passes():
            got = metrics_module.KeptPoints.of(clipped).metrics()
            for j in range(part.values.shape[0]):
                want = metrics_from_roc(*roc(scores[part_at + j], members[part_at + j]))
                for name, value in want.items():
                    other = got[name][j]
                    assert other == value or (value != value and other != other), (name, other, value)


@pytest.mark.parametrize("seed", [0, 1])
def test_epsilon_bounds_from_the_deciding_quantiles_are_the_per_target_bound(seed):
    """The beta quantiles computed only where they can decide a row's bound, and remembered across the
    "attacks" of one evaluation, against epsilon_lower_bound (every threshold's quantiles): weak, strong and
    separated signals, ties, scores near a few values, δ from 0 to large; every field bit for bit."""
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
            got = epsilon_ranked(rank_rows(scores, members), deltas, known=known)
            for i in range(rows):
                want = epsilon_lower_bound(scores[i], members[i], float(deltas[i])).to_dict()
                assert got[i].to_dict() == want or all(
                    v == w or (v != v and w != w) for v, w in zip(got[i].to_dict().values(), want.values())), (
                    strength, tie, i, got[i], want)


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
