"""RMIA (Zarifzadeh, Liu, Shokri, "Low-Cost High-Power Membership Inference Attacks", ICML 2024).

For a target model θ and a candidate x, RMIA compares x against a population
of points z known not to be in θ's training set:

    LR_θ(x, z) = (p(x|θ) / p(x)) / (p(z|θ) / p(z)),
    score(x)   = fraction of z in the population with LR_θ(x, z) >= γ,

where p(x|θ) is θ's probability of x's true label (averaged over query views)
and p(x) is the same probability averaged over reference models:

- online: p(x) = ½ (mean over IN references + mean over OUT references), the
  paper's "average over models trained with and without x". Averaging the two
  sides separately (instead of all references together) keeps the weights ½/½
  when the counts differ, which in a leave-one-out evaluation they do by one,
  in a direction that depends on the target's membership of x.
- offline: only OUT references, with the paper's linear correction for the
  missing IN half, p(x) = ½ ((1 + a) p_OUT(x) + (1 − a)).

The same formula gives p(z) for population points. All ratios are handled as
logs: a memorized or hopeless example can have p_y below 1e-300, where a ratio
of probabilities would turn into 0/0.

Defaults: γ = 1 and a = 0.3, both from the authors' ml_privacy_meter code
(it counts pairs with LR > 1, and its default ``offline_a`` is 0.3). The paper
treats both as hyperparameters, and the authors' code tunes a per run by
attacking one reference model with another, so 0.3 is a starting point, not a
constant.
The paper's "≥ γ" is kept here (the authors' code uses ">"); the two differ
only on exact ties, and the one tie that always occurs, a candidate paired with
itself when it is also in the population, is counted one half at γ = 1 (see
:func:`rmia_scores`).

Note: for a fixed population, score(x) is a non-decreasing function of
p(x|θ)/p(x) alone. At γ = 1 the per-target ROC of RMIA is exactly that of the
ratio; other γ coarsen it, and γ > 1 saturates the top (every member whose
ratio exceeds γ times the population's largest ties at 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from bnmem.errors import BnmemError


@dataclass(frozen=True)
class RMIAParams:
    """RMIA settings.

    Attributes:
        gamma: LR threshold γ > 0 a (x, z) pair must reach to count.
        a: offline linear-approximation coefficient, in [0, 1].
        online: use IN and OUT references (True) or OUT only (False).
    """

    gamma: float = 1.0
    a: float = 0.3
    online: bool = True

    def __post_init__(self) -> None:
        if not (self.gamma > 0 and np.isfinite(self.gamma)):
            raise BnmemError(f"RMIA gamma must be a positive number, got {self.gamma}")
        if not 0.0 <= self.a <= 1.0:
            raise BnmemError(f"RMIA offline coefficient a must lie in [0, 1], got {self.a}")


def view_log_mean(log_p: np.ndarray) -> np.ndarray:
    """log of the mean over views (last axis) of probabilities given as logs.

    Args:
        log_p: [..., n_views] log p_y.

    Returns:
        [...] log( mean_v p_y ).
    """
    log_p = np.asarray(log_p, dtype=np.float64)
    return logsumexp(log_p, axis=-1) - np.log(log_p.shape[-1])


def _ref_log_mean(ref_log_p: np.ndarray) -> np.ndarray:
    ref_log_p = np.asarray(ref_log_p, dtype=np.float64)
    if ref_log_p.ndim != 2 or ref_log_p.shape[0] < 1:
        raise BnmemError(
            f"reference log-probabilities must be [k >= 1, n_examples], got shape {ref_log_p.shape}"
        )
    return logsumexp(ref_log_p, axis=0) - np.log(ref_log_p.shape[0])


def log_marginal(
    ref_log_p_out: np.ndarray, ref_log_p_in: np.ndarray | None = None, a: float = 0.3, online: bool = True
) -> np.ndarray:
    """log p(x): the reference models' probability of the true label.

    Args:
        ref_log_p_out: [k_out, n_examples] view-averaged log p_y of OUT references.
        ref_log_p_in: [k_in, n_examples] the same for IN references (online only).
        a: offline coefficient in [0, 1].
        online: ½(mean IN + mean OUT) when True, else ½((1+a)·mean OUT + 1 − a).

    Returns:
        float64 [n_examples] log p(x).

    Raises:
        BnmemError: no references on a needed side.
    """
    log_out = _ref_log_mean(ref_log_p_out)
    if online:
        if ref_log_p_in is None:
            raise BnmemError("online RMIA needs IN reference models")
        return np.logaddexp(_ref_log_mean(ref_log_p_in), log_out) - np.log(2.0)
    # log(1 - a) is -inf at a = 1, where logaddexp returns the first term.
    with np.errstate(divide="ignore"):
        return np.logaddexp(np.log1p(a) + log_out, np.log1p(-a)) - np.log(2.0)


def rmia_log_ratio(
    target_log_p: np.ndarray,
    ref_log_p_out: np.ndarray,
    ref_log_p_in: np.ndarray | None = None,
    params: RMIAParams = RMIAParams(),
) -> np.ndarray:
    """log( p(x|θ) / p(x) ) for every example.

    Args:
        target_log_p: [n_examples] view-averaged log p_y of the target model.
        ref_log_p_out: [k_out, n_examples] view-averaged log p_y of OUT references.
        ref_log_p_in: [k_in, n_examples] of IN references (needed when ``params.online``).
        params: :class:`RMIAParams`.

    Returns:
        float64 [n_examples].
    """
    target_log_p = np.asarray(target_log_p, dtype=np.float64)
    return target_log_p - log_marginal(ref_log_p_out, ref_log_p_in, params.a, params.online)


def rmia_scores(log_ratio: np.ndarray, population: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """Fraction of population points z with LR(x, z) >= γ, for every candidate x.

    LR(x, z) >= γ  ⇔  log r_z <= log r_x − log γ, so one sort of the population
    and a binary search per x give all counts in O((n + |Z|) log |Z|).

    When the candidate x is itself in the population, the self-pair has
    LR = 1: it counts fully for γ < 1, not at all for γ > 1, and one half at
    γ = 1, where it sits exactly on the threshold (the mid-rank convention of
    rank statistics). Counting it fully or not at all at γ = 1 ties every
    candidate with its neighbour in the population order (a member just above
    a non-member, or just below), which biases the AUC by about ±1/(2·n_members)
    and, when counted fully, ties the population's top point with every member
    above it, pinning the TPR at zero false positives to 0. With the half count,
    the γ = 1 score orders candidates exactly as p(x|θ)/p(x) does.

    Args:
        log_ratio: [n_examples] log( p(x|θ)/p(x) ) of every candidate x.
        population: bool mask [n_examples] or integer indices of the z points;
            they should not be training examples of the target.
        gamma: γ > 0.

    Returns:
        float64 [n_examples] in [0, 1]: the (weighted) count divided by |Z|.

    Raises:
        BnmemError: empty population, or γ <= 0.
    """
    log_ratio = np.asarray(log_ratio, dtype=np.float64)
    in_population = np.zeros(log_ratio.shape, dtype=bool)
    in_population[np.asarray(population)] = True
    log_rz = np.sort(log_ratio[in_population])
    if log_rz.size == 0:
        raise BnmemError("the RMIA population is empty")
    if not gamma > 0:
        raise BnmemError(f"RMIA gamma must be positive, got {gamma}")
    bound = log_ratio - np.log(gamma)
    counts = np.searchsorted(log_rz, bound, side="right").astype(np.float64)
    if gamma == 1.0:
        # searchsorted counted the self-pair (log r_x <= log r_x); keep half of it.
        counts -= 0.5 * in_population
    return counts / log_rz.size
