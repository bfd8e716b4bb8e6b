"""Outlier injection with exact bookkeeping: label flips and OOD images.

Every function takes its randomness from a numpy ``Generator`` the caller
seeds (see :func:`make_rng`), so the same seed gives the same corrupted subset
whatever else the experiment varies (norm layer, model seed). Nothing here
shuffles the data: flipped examples keep their position and OOD examples are
appended after the in-distribution ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from bnmem.errors import BnmemError

# One independent random stream per step, so that e.g. enabling OOD injection
# does not change which labels get flipped for the same seed.
STREAM_SUBSAMPLE = 0
STREAM_FLIP = 1
STREAM_OOD = 2
STREAM_VAL = 3


def make_rng(seed: int, stream: int) -> np.random.Generator:
    """The generator of one corruption step.

    Args:
        seed: the data seed (``DataConfig.seed``), a non-negative integer.
        stream: which step (``STREAM_*``).

    Returns:
        A generator that depends only on ``(seed, stream)``.

    Raises:
        BnmemError: the seed is negative or not an integer.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise BnmemError(f"data seed must be a non-negative integer, got {seed!r}")
    return np.random.default_rng([int(seed), int(stream)])


def check_rate(rate: float, what: str = "rate") -> float:
    """Validate a corruption fraction.

    Args:
        rate: the fraction.
        what: its name, for the message (``label_noise``, ``ood``).

    Returns:
        ``rate`` as a float.

    Raises:
        BnmemError: ``rate`` is not a number in [0, 1).
    """
    try:
        value = float(rate)
    except (TypeError, ValueError):
        raise BnmemError(f"{what} must be a number in [0, 1), got {rate!r}") from None
    # 1.0 is excluded: all-flipped labels is a relabeling, and an OOD fraction
    # of 1 would need infinitely many OOD images.
    if not (math.isfinite(value) and 0.0 <= value < 1.0):
        raise BnmemError(f"{what} rate {rate} is outside [0, 1)")
    return value


def subsample_indices(n: int, size: int | None, rng: np.random.Generator) -> np.ndarray:
    """Indices of the first ``size`` examples of a seeded permutation, in original order.

    Sorting the kept indices means ``size=None`` and ``size=n`` give the same
    data in the same order.

    Args:
        n: number of examples available.
        size: how many to keep (None: all).
        rng: random generator.

    Returns:
        Sorted int64 indices.

    Raises:
        BnmemError: ``size`` is not in ``1..n``.
    """
    if size is None:
        return np.arange(n, dtype=np.int64)
    if size < 1 or size > n:
        raise BnmemError(f"train_size {size} is outside 1..{n} (the training split has {n} examples)")
    return np.sort(rng.permutation(n)[:size]).astype(np.int64)


def flip_labels(
    y: np.ndarray, rate: float, num_classes: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Flip exactly ``round(rate * len(y))`` labels, each to a different class.

    Args:
        y: int labels of the in-distribution training examples.
        rate: fraction to flip, in [0, 1).
        num_classes: number of classes; a new label is uniform among the
            ``num_classes - 1`` classes other than the original.
        rng: random generator.

    Returns:
        ``(new_labels, is_noisy)``: a copy of ``y`` with the flips, and the
        boolean mask of flipped positions.

    Raises:
        BnmemError: bad rate, or fewer than two classes with a positive rate.
    """
    rate = check_rate(rate, "label_noise")
    y = np.asarray(y, dtype=np.int64)
    n_flip = int(round(rate * len(y)))
    is_noisy = np.zeros(len(y), dtype=bool)
    y_new = y.copy()
    if n_flip == 0:
        return y_new, is_noisy
    if num_classes < 2:
        raise BnmemError("label noise needs at least two classes")
    idx = rng.choice(len(y), size=n_flip, replace=False)
    # A shift in 1..C-1 modulo C is uniform over the other classes and can
    # never land on the original one.
    shift = rng.integers(1, num_classes, size=n_flip)
    y_new[idx] = (y[idx] + shift) % num_classes
    is_noisy[idx] = True
    return y_new, is_noisy


def ood_count(rate: float, n_in: int) -> int:
    """Number of OOD examples that make a fraction ``rate`` of the final set.

    Args:
        rate: target OOD fraction, in [0, 1).
        n_in: number of in-distribution training examples.

    Returns:
        ``round(rate * n_in / (1 - rate))``.

    Raises:
        BnmemError: bad rate.
    """
    rate = check_rate(rate, "ood")
    return int(round(rate * n_in / (1.0 - rate)))


def noise_images(n: int, x_clean: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Gaussian images with the per-channel mean/std of ``x_clean``, clipped to [0, 1].

    Args:
        n: how many images.
        x_clean: clean training images, NCHW in [0, 1].
        rng: random generator.

    Returns:
        float32 array of shape ``(n, C, H, W)``.
    """
    mean = x_clean.mean(axis=(0, 2, 3), dtype=np.float64)
    std = x_clean.std(axis=(0, 2, 3), dtype=np.float64)
    shape = (n, *x_clean.shape[1:])
    noise = rng.standard_normal(shape) * std[None, :, None, None] + mean[None, :, None, None]
    return np.clip(noise, 0.0, 1.0).astype(np.float32)


def default_heldout_classes(num_classes: int) -> list[int]:
    """The last 20% of the classes (at least one): digits -> [8, 9]."""
    n_held = max(1, int(round(0.2 * num_classes)))
    return list(range(num_classes - n_held, num_classes))


def check_heldout_classes(heldout: Sequence[int], num_classes: int) -> list[int]:
    """Validate held-out classes.

    Args:
        heldout: class ids to hold out.
        num_classes: classes of the source dataset.

    Returns:
        The sorted class ids.

    Raises:
        BnmemError: empty, repeated or out-of-range ids, or fewer than two
            classes left to train on.
    """
    classes = [int(c) for c in heldout]
    if not classes:
        raise BnmemError("heldout_classes is empty; hold out at least one class")
    if len(set(classes)) != len(classes):
        raise BnmemError(f"heldout_classes {classes} repeats a class")
    bad = [c for c in classes if not 0 <= c < num_classes]
    if bad:
        raise BnmemError(f"heldout_classes {bad} are outside 0..{num_classes - 1}")
    if num_classes - len(classes) < 2:
        raise BnmemError(f"heldout_classes {classes} leave fewer than two classes to train on")
    return sorted(classes)


def validation_positions(n: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted positions of a seeded validation split of ``round(fraction * n)`` of ``n`` examples.

    Args:
        n: examples in the pool.
        fraction: share to hold out, in [0, 0.5].
        rng: random generator.

    Returns:
        Sorted int64 positions (empty for fraction 0).

    Raises:
        BnmemError: the split would leave the pool or the validation split empty.
    """
    n_val = int(round(fraction * n))
    if fraction > 0 and not 0 < n_val < n:
        raise BnmemError(f"val_fraction {fraction} of {n} examples leaves an empty split; change it or train_size")
    return np.sort(rng.choice(n, n_val, replace=False)).astype(np.int64)


def keep_classes(x: np.ndarray, y: np.ndarray, kept: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Keep examples of the ``kept`` classes, relabeled 0..k-1 in the order given.

    Args:
        x: images.
        y: labels.
        kept: original class ids to keep.

    Returns:
        ``(x_kept, y_relabeled)`` (copies).
    """
    y = np.asarray(y, dtype=np.int64)
    lut = np.full(int(max(y.max(initial=0), max(kept, default=0))) + 1, -1, dtype=np.int64)
    lut[np.asarray(kept, dtype=np.int64)] = np.arange(len(kept))
    mask = np.isin(y, kept)
    return x[mask], lut[y[mask]]


def pick_ood(pool: np.ndarray, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """Draw ``n`` distinct images from an OOD pool.

    Args:
        pool: candidate images.
        n: how many.
        rng: random generator.
        what: the pool's name, for the message.

    Returns:
        The images, in the order drawn (a copy).

    Raises:
        BnmemError: the pool has fewer than ``n`` images (repeating an image
            would make it count double toward memorization).
    """
    if n > len(pool):
        raise BnmemError(f"the OOD rate needs {n} OOD images but {what} has only {len(pool)}; lower --ood")
    return pool[rng.choice(len(pool), size=n, replace=False)]


def append_ood(
    x: np.ndarray, y: np.ndarray, x_ood: np.ndarray, num_classes: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Append OOD images, each with a uniformly random label, after ``x``.

    Args:
        x: in-distribution training images.
        y: their labels.
        x_ood: OOD images with the same per-image shape.
        num_classes: classes the model predicts.
        rng: random generator.

    Returns:
        ``(x_all, y_all, is_ood)``.

    Raises:
        BnmemError: the image shapes differ.
    """
    if x_ood.shape[1:] != x.shape[1:]:
        raise BnmemError(f"OOD images have shape {tuple(x_ood.shape[1:])}, the training images {tuple(x.shape[1:])}")
    y_ood = rng.integers(0, num_classes, size=len(x_ood), dtype=np.int64)
    x_all = np.concatenate([x, x_ood.astype(x.dtype, copy=False)])
    y_all = np.concatenate([np.asarray(y, dtype=np.int64), y_ood])
    is_ood = np.zeros(len(x_all), dtype=bool)
    is_ood[len(x) :] = True
    return x_all, y_all, is_ood
