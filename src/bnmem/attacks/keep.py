"""Which examples each model trains on, and which reference models describe each example.

The keep matrix follows the construction of the LiRA reference code
(tensorflow/privacy, research/mi_lira_2021/train.py): one seeded uniform matrix
of shape [n_models, n_examples] is argsorted along the models axis, and a model
keeps an example when the entry of the argsort at its row is below n_models / 2.
Each column of the argsort is a permutation of 0..n_models-1, so every example
is IN for exactly half of the models, which is what makes the per-example
IN/OUT Gaussians of LiRA estimable for every example.

The audit's shadow copies use :func:`paired_keep_matrix` instead: complementary pairs of halves,
drawn pair by pair, so the matrix of M models is the first M rows of any larger one. Every
example is again IN for exactly half of the models, and a rerun with more copies keeps (and
reuses) the copies it already trained.
"""

from __future__ import annotations

import numpy as np

from bnmem.errors import BnmemError


def keep_matrix(n_models: int, n_examples: int, seed: int) -> np.ndarray:
    """Balanced membership matrix: every example is IN for exactly half the models.

    The uniform draw uses numpy's legacy ``RandomState(seed)`` (as the reference
    does with ``np.random.seed``), so the same ``(n_models, n_examples, seed)``
    gives the same matrix as the reference code on any machine.

    Args:
        n_models: number of models; must be even and at least 2.
        n_examples: number of candidate training examples; at least 1.
        seed: seed of the uniform draw.

    Returns:
        bool array [n_models, n_examples]; ``keep[m, j]`` is True when model m
        trains on example j. Every column sums to ``n_models // 2``.

    Raises:
        BnmemError: ``n_models`` odd or < 2, or ``n_examples`` < 1.
    """
    if n_models < 2 or n_models % 2:
        raise BnmemError(
            f"the keep matrix needs an even number of models (>= 2) so every example is IN "
            f"for exactly half of them; got n_models={n_models}"
        )
    if n_examples < 1:
        raise BnmemError(f"n_examples must be at least 1, got {n_examples}")
    uniform = np.random.RandomState(seed).uniform(0.0, 1.0, size=(n_models, n_examples))
    order = uniform.argsort(axis=0)
    return order < n_models // 2


def paired_keep_matrix(n_models: int, n_examples: int, seed: int) -> np.ndarray:
    """Balanced membership matrix built from complementary pairs: model 2j trains on a seeded random half
    (``n_examples // 2`` examples, drawn from ``(seed, j)`` alone), model 2j+1 on the rest.

    Every example is IN for exactly one model of each pair, so for exactly half of the models, as in
    :func:`keep_matrix`; unlike it, the rows do not depend on ``n_models``:
    ``paired_keep_matrix(M, n, s) == paired_keep_matrix(M', n, s)[:M]`` for any even M < M'.

    Raises:
        BnmemError: ``n_models`` odd or < 2, or ``n_examples`` < 1.
    """
    if n_models < 2 or n_models % 2:
        raise BnmemError(f"the keep matrix needs an even number of models (>= 2) so every example is IN "
                         f"for exactly half of them; got n_models={n_models}")
    if n_examples < 1:
        raise BnmemError(f"n_examples must be at least 1, got {n_examples}")
    keep = np.zeros((n_models, n_examples), dtype=bool)
    for j in range(n_models // 2):
        half = np.random.default_rng([seed, j, 0x9A12]).permutation(n_examples)[: n_examples // 2]
        keep[2 * j, half] = True
        keep[2 * j + 1] = ~keep[2 * j]
    return keep


def first_k_references(member: np.ndarray, k: int) -> np.ndarray:
    """Indices of the first ``k`` reference models (in model order) that satisfy ``member``.

    The LiRA reference truncates each example's IN (and OUT) samples to the
    smallest count over all examples, keeping the models with the lowest
    indices. Doing the same here keeps our numbers equal to the reference's and,
    in a leave-one-out evaluation, stops the number of references (which
    differs by one between the target's members and non-members) from leaking
    membership.

    Args:
        member: bool [n_refs, n_examples]; which reference models qualify per
            example (e.g. ``keep_refs`` for IN, ``~keep_refs`` for OUT).
        k: how many to take per example; every column must have at least k.

    Returns:
        int array [k, n_examples] of row indices into ``member``, ascending per column.

    Raises:
        BnmemError: some example has fewer than ``k`` qualifying models.
    """
    member = np.asarray(member, dtype=bool)
    counts = member.sum(axis=0)
    if k < 0 or (member.shape[1] and counts.min() < k):
        raise BnmemError(f"cannot take {k} reference models per example: some example has only {counts.min()}")
    # A stable argsort of ~member puts qualifying rows first, in index order.
    return np.argsort(~member, axis=0, kind="stable")[:k]


def split_references(keep_refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per example, the IN and OUT reference models used by LiRA, truncated as the reference does.

    Args:
        keep_refs: bool [n_refs, n_examples], membership of the reference models
            (the target model removed).

    Returns:
        ``(idx_in, idx_out)``: int arrays [k_in, n_examples] and [k_out, n_examples]
        of row indices into ``keep_refs``; ``k_in`` (``k_out``) is the smallest
        number of IN (OUT) reference models over all examples. Either may have
        zero rows.
    """
    keep_refs = np.asarray(keep_refs, dtype=bool)
    if keep_refs.ndim != 2:
        raise BnmemError(f"keep must be 2-D [n_models, n_examples], got shape {keep_refs.shape}")
    if keep_refs.shape[1] == 0:
        empty = np.zeros((0, 0), dtype=np.intp)
        return empty, empty
    k_in = int(keep_refs.sum(axis=0).min())
    k_out = int((~keep_refs).sum(axis=0).min())
    return first_k_references(keep_refs, k_in), first_k_references(~keep_refs, k_out)
