"""LiRA (Carlini et al., "Membership Inference Attacks From First Principles", 2022) and baselines.

Every score here is "higher = more likely a member" and is one number per
example. Statistics come in as φ (see :func:`bnmem.attacks.scores.lira_statistic`):

- ``target``: [n_examples, n_views], the target model's φ;
- ``in_stats`` / ``out_stats``: [k, n_examples, n_views], φ of the k IN / OUT
  reference models of each example (see :func:`bnmem.attacks.keep.split_references`).

Conventions follow the reference code (tensorflow/privacy,
research/mi_lira_2021/plot.py) so that AUCs match it to rounding: the Gaussian
centre is the median of the reference φ (robust to a diverged reference model),
the spread is ``np.std`` with ddof=0 plus 1e-30 (so a zero spread, which happens
with a single reference per side, does not divide by zero), both per example
and per view, and the per-view log-likelihoods are averaged over views (a
diagonal Gaussian over views, up to a factor 1/n_views that does not change the
ranking).

Where this module departs from the reference code, on purpose:

- The offline attack is the paper's one-sided test, Λ = Pr[Z < φ] with Z the OUT
  Gaussian, scored as −log Pr[Z > φ] (monotone in Λ, and it keeps resolution in
  the upper tail where float64 CDFs round to 1). The reference scores
  −logpdf_out, a two-sided test that also flags examples the target fits
  unusually *badly*; it is available as ``one_sided=False``.
- Fixed variance uses the global spread of the IN samples for the IN Gaussian
  and of the OUT samples for the OUT Gaussian, as the paper describes. The
  reference's online fixed-variance branch uses the IN spread for both, which
  makes the score a function of the two medians only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr
from scipy.stats import norm

from bnmem.errors import BnmemError

# Added to every standard deviation, as the reference does, so that a zero
# spread (one reference model per side, or identical logits) stays finite.
STD_EPS = 1e-30
_LOG_SQRT_2PI = np.log(np.sqrt(2 * np.pi))


def gaussian_logpdf(x: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Gaussian log density, with scipy.stats.norm.logpdf's order of operations (the streaming scorers')."""
    return standard_logpdf((x - loc) / scale, np.log(scale))


def standard_logpdf(y: np.ndarray, log_scale: np.ndarray) -> np.ndarray:
    """:func:`gaussian_logpdf` from the standardized value y = (x − loc) / scale and log(scale): the same
    operations in the same order, (−y²/2 − log √(2π)) − log(scale), in one buffer. −(y²)/2 is taken as
    y²·(−0.5): both round the same real number once (halving is exact above the subnormals, and below them
    the two round the same value), so the bits are those of the negation and the division, in one pass."""
    out = np.square(y)
    out *= -0.5
    out -= _LOG_SQRT_2PI
    out -= log_scale
    return out


@dataclass(frozen=True)
class Gaussian:
    """A per-example, per-view Gaussian: arrays (or scalars) broadcastable to [n_examples, n_views]."""

    mean: np.ndarray
    std: np.ndarray

    def logpdf(self, x: np.ndarray) -> np.ndarray:
        """Log density at ``x``."""
        return norm.logpdf(x, self.mean, self.std + STD_EPS)

    def log_sf(self, x: np.ndarray) -> np.ndarray:
        """log Pr[Z > x], accurate far in either tail."""
        return log_ndtr(-(x - self.mean) / (self.std + STD_EPS))


def fit_gaussian(stats: np.ndarray, fix_variance: bool = False) -> Gaussian:
    """Fit the reference Gaussian to k reference values per example and view.

    Args:
        stats: [k, n_examples, n_views] reference statistics, k >= 1.
        fix_variance: one global std over all examples, views and references
            instead of one per example and view.

    Returns:
        :class:`Gaussian` with ``mean`` = median over the k references
        ([n_examples, n_views]) and ``std`` = population std (ddof=0).

    Raises:
        BnmemError: ``stats`` is not 3-D or has no references.
    """
    stats = np.asarray(stats, dtype=np.float64)
    if stats.ndim != 3:
        raise BnmemError(f"reference statistics must be [k, n_examples, n_views], got shape {stats.shape}")
    if stats.shape[0] < 1:
        raise BnmemError("LiRA needs at least one reference model on each side for every example")
    mean = np.median(stats, axis=0)
    std = np.std(stats) if fix_variance else np.std(stats, axis=0)
    return Gaussian(mean=mean, std=np.asarray(std))


def _check_target(target: np.ndarray) -> np.ndarray:
    target = np.asarray(target, dtype=np.float64)
    if target.ndim != 2:
        raise BnmemError(f"target statistics must be [n_examples, n_views], got shape {target.shape}")
    return target


def lira_online(
    target: np.ndarray, in_stats: np.ndarray, out_stats: np.ndarray, fix_variance: bool = False
) -> np.ndarray:
    """Online LiRA: log-likelihood ratio of the IN against the OUT Gaussian.

    Args:
        target: [n_examples, n_views] φ of the target model.
        in_stats: [k_in, n_examples, n_views] φ of the IN reference models.
        out_stats: [k_out, n_examples, n_views] φ of the OUT reference models.
        fix_variance: global IN and OUT spreads instead of per-example ones.

    Returns:
        float64 [n_examples]: mean over views of logpdf_IN(φ) − logpdf_OUT(φ).

    Raises:
        BnmemError: malformed shapes or no references on a side.
    """
    target = _check_target(target)
    g_in = fit_gaussian(in_stats, fix_variance)
    g_out = fit_gaussian(out_stats, fix_variance)
    return (g_in.logpdf(target) - g_out.logpdf(target)).mean(axis=1)


def lira_offline(
    target: np.ndarray, out_stats: np.ndarray, fix_variance: bool = False, one_sided: bool = True
) -> np.ndarray:
    """Offline LiRA: how far above the OUT Gaussian the target's φ lies.

    Args:
        target: [n_examples, n_views] φ of the target model.
        out_stats: [k_out, n_examples, n_views] φ of the OUT reference models.
        fix_variance: a global OUT spread instead of per-example ones.
        one_sided: the paper's test (default). With False, the reference
            code's two-sided score −logpdf_OUT(φ).

    Returns:
        float64 [n_examples]: mean over views of −log Pr[Z > φ] (one-sided)
        or of −logpdf_OUT(φ) (two-sided), Z ~ OUT Gaussian.

    Raises:
        BnmemError: malformed shapes or no OUT references.
    """
    target = _check_target(target)
    g_out = fit_gaussian(out_stats, fix_variance)
    if one_sided:
        return (-g_out.log_sf(target)).mean(axis=1)
    return (-g_out.logpdf(target)).mean(axis=1)


def global_threshold(target: np.ndarray) -> np.ndarray:
    """Global-threshold attack: the target's φ averaged over views, no references.

    Args:
        target: [n_examples, n_views] φ of the target model.

    Returns:
        float64 [n_examples].
    """
    return _check_target(target).mean(axis=1)


def loss_attack(target_loss: np.ndarray) -> np.ndarray:
    """Loss baseline (Yeom et al. 2018): minus the target's cross-entropy, averaged over views.

    Args:
        target_loss: [n_examples, n_views] cross-entropy of the target model.

    Returns:
        float64 [n_examples].
    """
    return -_check_target(target_loss).mean(axis=1)
