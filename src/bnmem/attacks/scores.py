"""Per-example statistics of a model's logits that the attacks consume.

All work is in float64 on logits, through log-softmax / logsumexp, never on
rounded probabilities: a confidently memorized example has p_y within 1e-8 of 1
in float32, where log(p / (1 - p)) collapses to inf or to a few distinct values,
and the high-confidence tail is exactly where LiRA finds its low-FPR members.

Shapes: ``logits`` is [n_models, n_examples, n_views, n_classes] (any float
dtype), ``labels`` is [n_examples]. Every function returns [n_models,
n_examples, n_views] in float64. Work runs one model at a time so a large
float32 array is never copied to float64 whole.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from bnmem.errors import BnmemError


def check_logits(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate shapes and label range; return the arrays (labels as intp).

    Args:
        logits: [n_models, n_examples, n_views, n_classes].
        labels: [n_examples] integer class indices.

    Returns:
        ``(logits, labels)`` with ``labels`` as an intp array.

    Raises:
        BnmemError: wrong number of dimensions, mismatched example counts,
            fewer than two classes, labels out of range, or non-finite logits.
    """
    logits = np.asarray(logits)
    labels = np.asarray(labels)
    if logits.ndim != 4:
        raise BnmemError(
            f"logits must be [n_models, n_examples, n_views, n_classes], got shape {logits.shape}"
        )
    if labels.ndim != 1 or labels.shape[0] != logits.shape[1]:
        raise BnmemError(f"labels must be [n_examples={logits.shape[1]}], got shape {labels.shape}")
    if logits.shape[3] < 2:
        raise BnmemError(f"need at least two classes, got {logits.shape[3]}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise BnmemError(f"labels must be integers, got dtype {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() >= logits.shape[3]):
        raise BnmemError(f"labels must lie in [0, {logits.shape[3] - 1}]")
    finite = np.isfinite(logits).all(axis=(1, 2, 3))
    if not finite.all():
        bad = np.flatnonzero(~finite).tolist()
        raise BnmemError(f"logits of model(s) {bad} contain NaN or inf (diverged training?)")
    return logits, labels.astype(np.intp)


def _per_model(logits: np.ndarray, labels: np.ndarray, fn) -> np.ndarray:
    logits, labels = check_logits(logits, labels)
    n_models, n_examples, n_views, _ = logits.shape
    out = np.empty((n_models, n_examples, n_views), dtype=np.float64)
    idx = labels[:, None, None]
    for m in range(n_models):
        z = np.asarray(logits[m], dtype=np.float64)  # [N, V, C]
        z_true = np.take_along_axis(z, np.broadcast_to(idx, z.shape[:2] + (1,)), axis=-1)[..., 0]
        out[m] = fn(z, z_true, idx)
    return out


def lira_statistic(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """LiRA's scaled confidence φ = log p_y − log Σ_{y'≠y} p_{y'}.

    The softmax normalizer cancels between the two terms, so
    φ = z_y − logsumexp_{y'≠y} z_{y'}: exact for any logit gap, no exp of a
    large number and no subtraction of nearly equal probabilities.

    Args:
        logits: [n_models, n_examples, n_views, n_classes].
        labels: [n_examples].

    Returns:
        float64 [n_models, n_examples, n_views].

    Raises:
        BnmemError: see :func:`check_logits`.
    """

    def phi(z: np.ndarray, z_true: np.ndarray, idx: np.ndarray) -> np.ndarray:
        others = z.copy()
        np.put_along_axis(others, np.broadcast_to(idx, z.shape[:2] + (1,)), -np.inf, axis=-1)
        return z_true - logsumexp(others, axis=-1)

    return _per_model(logits, labels, phi)


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-example, per-view cross-entropy loss −log p_y.

    Computed as softplus(−φ) = log(1 + Σ_{y'≠y} e^{z_{y'} − z_y}) rather than
    logsumexp(z) − z_y: the latter cancels to exactly 0 once the true class
    dominates, which would tie every confidently fitted example in the loss
    attack; the former keeps full relative precision (e.g. 5.6e-52).

    Args:
        logits: [n_models, n_examples, n_views, n_classes].
        labels: [n_examples].

    Returns:
        float64 [n_models, n_examples, n_views], all >= 0.

    Raises:
        BnmemError: see :func:`check_logits`.
    """
    return loss_from_phi(lira_statistic(logits, labels))


def loss_from_phi(phi: np.ndarray) -> np.ndarray:
    """Cross-entropy from φ: −log p_y = log(1 + e^{−φ}), accurate in both tails.

    Args:
        phi: any shape, the LiRA statistic.

    Returns:
        float64 array of the same shape.
    """
    phi = np.asarray(phi, dtype=np.float64)
    # np.logaddexp(0, −φ)'s own algorithm (the larger argument plus log1p(exp(−|difference|))) with numpy's
    # vectorized exp and log1p: the ufunc's scalar loop is several times slower on large arrays.
    # −|φ| as min(φ, −φ) (the two differ only in the sign of a zero, which exp does not see), sharing −φ with
    # max(−φ, 0): two temporaries, every other step in place.
    neg = np.negative(phi)
    out = np.minimum(phi, neg)
    np.exp(out, out=out)
    np.log1p(out, out=out)
    out += np.maximum(neg, 0.0, out=neg)
    return out


def true_class_log_prob(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """log p_y from log-softmax (the negative of :func:`cross_entropy`).

    Args:
        logits: [n_models, n_examples, n_views, n_classes].
        labels: [n_examples].

    Returns:
        float64 [n_models, n_examples, n_views], all <= 0.
    """
    return -cross_entropy(logits, labels)


def true_class_prob(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Probability of the true class, p_y (the signal RMIA compares across models).

    Args:
        logits: [n_models, n_examples, n_views, n_classes].
        labels: [n_examples].

    Returns:
        float64 [n_models, n_examples, n_views] in [0, 1].
    """
    return np.exp(true_class_log_prob(logits, labels))
