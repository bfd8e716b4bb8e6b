"""The Gaussian log density the LiRA scorers share: the operations the reference's scipy.stats.norm.logpdf does."""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from bnmem.attacks.lira import _LOG_SQRT_2PI, gaussian_logpdf, standard_logpdf


def _written_out(y: np.ndarray, log_scale: np.ndarray) -> np.ndarray:
    """(−y²/2 − log √(2π)) − log(scale), one operation at a time: negate, then halve."""
    return (np.negative(y * y) / 2.0 - _LOG_SQRT_2PI) - log_scale


def test_standard_logpdf_is_the_written_out_formula_bit_for_bit():
    rng = np.random.default_rng(0)
    tiny = np.array([0.0, -0.0, 5e-324, 1e-170, 1.4e-162, 1.5e-154, 2.2250738585072014e-308, 1e-200])
    huge = np.array([1e150, 1.3e154, 1.4e154, 1e300, np.inf, -np.inf])
    y = np.concatenate([rng.normal(0, 3, 20_000), rng.standard_cauchy(5_000), tiny, -tiny, huge, -huge])
    log_scale = np.concatenate([rng.normal(0, 2, y.size - 4), [0.0, -0.0, 700.0, -745.0]])
    with np.errstate(over="ignore", invalid="ignore"):  # y² overflows to inf, inf − inf: the same nan both ways
        got, want = standard_logpdf(y, log_scale), _written_out(y, log_scale)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (y[~same][:5], got[~same][:5], want[~same][:5])
    assert np.signbit(got).tolist() == np.signbit(want).tolist()


def test_gaussian_logpdf_equals_scipy_norm_logpdf():
    rng = np.random.default_rng(1)
    x, loc = rng.normal(0, 4, 10_000), rng.normal(0, 4, 10_000)
    scale = rng.lognormal(0, 1, 10_000)
    np.testing.assert_allclose(gaussian_logpdf(x, loc, scale), norm.logpdf(x, loc, scale), rtol=1e-14, atol=1e-14)
