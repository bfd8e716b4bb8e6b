"""Feldman–Zhang memorization scores from shadow models.

    mem(i) = P[f(x_i) = y_i | i IN] − P[f(x_i) = y_i | i OUT]

(Feldman & Zhang, "What Neural Networks Memorize and Why", NeurIPS 2020),
estimated from the shadow models of a LiRA run: each example is IN for about
half of the M models and OUT for the others (the keep matrix). y_i is the label
the models were trained with (the flipped one for a flipped example).

Two variants, both from a per-model value in [0, 1]:

- **top-1**: the fraction of the model's query views whose predicted class is
  y_i (:func:`top1_values`);
- **confidence**: the model's p_y averaged over views, p_y = sigmoid(φ) because
  φ is the logit of p_y (:func:`confidence_values`).

A model is the unit: views of one model are not independent trials, so they are
averaged inside the model first. Each example's interval is Newcombe's hybrid
score interval for a difference of two proportions (Wilson on each side, with
n = its IN and OUT model counts); with fractional per-model values it is the
usual approximation. Everything is vectorized over models, views and examples;
:func:`mem_scores_loop` is the slow loop it is tested against.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from bnmem.errors import BnmemError

Z95 = 1.959963984540054  # two-sided 95% normal quantile
ABOVE = 0.5  # the "highly memorized" cut of the summaries (Feldman & Zhang's examples use 0.5 too)


def top1_values(pred: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-model top-1 correctness: [M, N, V] predicted classes, [N] labels → [M, N] fraction of views correct."""
    pred = np.asarray(pred)
    labels = np.asarray(labels)
    if pred.ndim != 3 or labels.shape != (pred.shape[1],):
        raise BnmemError(f"pred must be [models, examples, views] and labels [examples], got {pred.shape}, "
                         f"{labels.shape}")
    return (pred == labels[None, :, None]).mean(axis=2)


def confidence_values(phi: np.ndarray) -> np.ndarray:
    """Per-model p_y averaged over views: [M, N, V] φ → [M, N], p_y = sigmoid(φ) (stable in both tails)."""
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 3:
        raise BnmemError(f"phi must be [models, examples, views], got {phi.shape}")
    return (0.5 * (1.0 + np.tanh(0.5 * phi))).mean(axis=2)


def _check(values: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(values, dtype=np.float64)
    keep = np.asarray(keep, dtype=bool)
    if values.shape != keep.shape or values.ndim != 2:
        raise BnmemError(f"values {values.shape} and keep {keep.shape} must both be [models, examples]")
    return values, keep


def wilson(p: np.ndarray, n: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of a proportion p from n trials (nan where n = 0)."""
    p = np.asarray(p, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = 1.0 + z * z / n
        centre = (p + z * z / (2 * n)) / denom
        half = z / denom * np.sqrt(np.maximum(p * (1 - p), 0.0) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def mem_scores(values: np.ndarray, keep: np.ndarray, z: float = Z95) -> dict[str, np.ndarray]:
    """Memorization score of every example with its interval.

    Args:
        values: [M, N] per-model value in [0, 1] (:func:`top1_values` or :func:`confidence_values`).
        keep: [M, N] bool, True where the model trained on the example.
        z: normal quantile of the interval (default 95%).

    Returns:
        ``mem``, ``in_mean``, ``out_mean``, ``ci_low``, ``ci_high`` (float64 [N]; nan where an
        example is never IN or never OUT) and ``n_in``, ``n_out`` (int [N]).
    """
    values, keep = _check(values, keep)
    n_in = keep.sum(axis=0)
    n_out = keep.shape[0] - n_in
    with np.errstate(divide="ignore", invalid="ignore"):
        p_in = np.where(keep, values, 0.0).sum(axis=0) / n_in
        p_out = np.where(keep, 0.0, values).sum(axis=0) / n_out
    l1, u1 = wilson(p_in, n_in, z)
    l2, u2 = wilson(p_out, n_out, z)
    mem = p_in - p_out
    return {
        "mem": mem, "in_mean": p_in, "out_mean": p_out,
        "ci_low": mem - np.sqrt((p_in - l1) ** 2 + (u2 - p_out) ** 2),
        "ci_high": mem + np.sqrt((u1 - p_in) ** 2 + (p_out - l2) ** 2),
        "n_in": n_in.astype(np.int64), "n_out": n_out.astype(np.int64),
    }


def mem_scores_loop(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The slow, obviously-correct oracle of ``mem_scores(...)["mem"]``: one example and model at a time."""
    values, keep = _check(values, keep)
    out = np.empty(values.shape[1])
    for i in range(values.shape[1]):
        ins = [values[m, i] for m in range(values.shape[0]) if keep[m, i]]
        outs = [values[m, i] for m in range(values.shape[0]) if not keep[m, i]]
        out[i] = sum(ins) / len(ins) - sum(outs) / len(outs) if ins and outs else math.nan
    return out


def leave_one_model_out(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """mem of every example with each model deleted in turn: [M, N] (row m: model m left out)."""
    values, keep = _check(values, keep)
    s_in = np.where(keep, values, 0.0)
    s_out = np.where(keep, 0.0, values)
    n_in = keep.sum(axis=0)[None, :] - keep
    n_out = (~keep).sum(axis=0)[None, :] - ~keep
    with np.errstate(divide="ignore", invalid="ignore"):
        return (s_in.sum(axis=0) - s_in) / n_in - (s_out.sum(axis=0) - s_out) / n_out


def subset_summary(mem: np.ndarray, subsets: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Per subset: mean mem, the fraction of examples with mem > 0.5, and the count (finite scores only)."""
    mem = np.asarray(mem, dtype=np.float64)
    out: dict[str, dict[str, Any]] = {}
    for name, mask in subsets.items():
        x = mem[np.asarray(mask, dtype=bool) & np.isfinite(mem)]
        out[name] = {"mean": float(x.mean()) if x.size else math.nan,
                     "frac_above_half": float((x > ABOVE).mean()) if x.size else math.nan, "n": int(x.size)}
    return out


def top_k(mem: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest finite scores, largest first (ties: lower index first)."""
    mem = np.asarray(mem, dtype=np.float64)
    idx = np.flatnonzero(np.isfinite(mem))
    order = idx[np.lexsort((idx, -mem[idx]))]
    return order[:k]


def top_k_overlap(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Fraction of the k most-memorized examples under ``a`` that are also among the k under ``b``."""
    ta, tb = top_k(a, k), top_k(b, k)
    if not ta.size:
        return math.nan
    return len(set(ta.tolist()) & set(tb.tolist())) / len(ta)
