"""bnmem.data.corruption's helpers on their own: boundaries, dtypes and the noise images' statistics.

Label flips are covered by tests/test_data.py (bookkeeping) and tests/test_properties.py
(never the same class, uniform over the others).
"""

from __future__ import annotations

import numpy as np
import pytest

from bnmem.data.corruption import (
    append_ood,
    check_heldout_classes,
    check_rate,
    default_heldout_classes,
    flip_labels,
    keep_classes,
    make_rng,
    noise_images,
    ood_count,
    pick_ood,
    subsample_indices,
    validation_positions,
)
from bnmem.errors import BnmemError


def test_subsample_all_is_arange_int64():
    got = subsample_indices(7, None, np.random.default_rng(0))
    assert got.dtype == np.int64 and got.tolist() == list(range(7))


@pytest.mark.parametrize("size", [1, 6, 7])
def test_subsample_sizes_at_the_bounds(size):
    got = subsample_indices(7, size, np.random.default_rng(0))
    assert got.dtype == np.int64 and len(got) == size and len(set(got.tolist())) == size
    assert (np.diff(got) > 0).all() and got.min() >= 0 and got.max() < 7
    if size == 7:
        assert got.tolist() == list(range(7))  # size n is the whole split, as size None


@pytest.mark.parametrize("size", [0, 8])
def test_subsample_out_of_range(size):
    with pytest.raises(BnmemError, match=rf"train_size {size} is outside 1..7"):
        subsample_indices(7, size, np.random.default_rng(0))


def test_noise_images_match_the_clean_channel_statistics():
    rng = np.random.default_rng(0)
    # Two channels with means 0.3 / 0.6 and stds 0.05 / 0.1: clipping to [0, 1] is negligible.
    x = np.concatenate([rng.normal(0.3, 0.05, (200, 1, 4, 4)), rng.normal(0.6, 0.1, (200, 1, 4, 4))], axis=1)
    out = noise_images(500, x.astype(np.float32), np.random.default_rng(1))
    assert out.dtype == np.float32 and out.shape == (500, 2, 4, 4)
    assert out.min() >= 0.0 and out.max() <= 1.0
    np.testing.assert_allclose(out.mean(axis=(0, 2, 3)), x.mean(axis=(0, 2, 3)), atol=0.01)
    np.testing.assert_allclose(out.std(axis=(0, 2, 3)), x.std(axis=(0, 2, 3)), rtol=0.05)


def test_noise_images_statistics_are_float64_whatever_the_input():
    """Low-precision input: the per-channel statistics are still accumulated in float64."""
    x = np.random.default_rng(2).random((300, 1, 8, 8)).astype(np.float16)
    got = noise_images(4, x, np.random.default_rng(3))
    x64 = x.astype(np.float64)
    mean, std = x64.mean(axis=(0, 2, 3)), x64.std(axis=(0, 2, 3))
    want = np.random.default_rng(3).standard_normal((4, 1, 8, 8)) * std[None, :, None, None] + mean[None, :, None, None]
    np.testing.assert_array_equal(got, np.clip(want, 0.0, 1.0).astype(np.float32))


@pytest.mark.parametrize("num_classes, want", [(10, [8, 9]), (3, [2]), (2, [1]), (100, list(range(80, 100)))])
def test_default_heldout_classes_are_the_last_fifth(num_classes, want):
    assert default_heldout_classes(num_classes) == want


def test_heldout_classes_may_leave_exactly_two():
    assert check_heldout_classes([3, 2], 4) == [2, 3]
    with pytest.raises(BnmemError, match="fewer than two classes"):
        check_heldout_classes([1, 2, 3], 4)


def test_keep_classes_relabels_in_the_given_order_and_handles_empty():
    x = np.arange(6)[:, None]
    y = np.array([0, 2, 1, 2, 3, 0], dtype=np.uint8)
    xk, yk = keep_classes(x, y, [2, 0])
    assert xk[:, 0].tolist() == [0, 1, 3, 5] and yk.tolist() == [1, 0, 0, 1] and yk.dtype == np.int64
    xe, ye = keep_classes(x, y, [])
    assert len(xe) == 0 and len(ye) == 0
    xn, yn = keep_classes(x[:0], y[:0], [1])
    assert len(xn) == 0 and len(yn) == 0


def test_pick_ood_may_take_the_whole_pool_once():
    pool = np.arange(5)
    got = pick_ood(pool, 5, np.random.default_rng(0), "pool")
    assert sorted(got.tolist()) == [0, 1, 2, 3, 4]
    with pytest.raises(BnmemError, match="needs 6 OOD images but pool has only 5"):
        pick_ood(pool, 6, np.random.default_rng(0), "pool")


@pytest.mark.parametrize("seed", [True, 1.5, -1, "3"])
def test_make_rng_refuses_non_integer_seeds(seed):
    with pytest.raises(BnmemError, match="data seed must be a non-negative integer"):
        make_rng(seed, 0)


def test_rate_messages_name_the_rate():
    with pytest.raises(BnmemError, match=r"^rate rate 2 is outside \[0, 1\)$"):
        check_rate(2)
    with pytest.raises(BnmemError, match=r"^label_noise rate 1.5 is outside"):
        flip_labels(np.zeros(4, dtype=np.int64), 1.5, 3, np.random.default_rng(0))
    with pytest.raises(BnmemError, match=r"^ood rate 1.0 is outside"):
        ood_count(1.0, 10)


def test_flip_labels_single_flip_and_int64_output():
    y = np.arange(10, dtype=np.uint8) % 3
    y_new, noisy = flip_labels(y, 0.1, 3, np.random.default_rng(0))  # round(0.1 * 10) = 1 flip
    assert noisy.sum() == 1 and (y_new != y).sum() == 1 and y_new.dtype == np.int64


def test_append_ood_labels_cover_every_class_and_keep_the_image_dtype():
    x = np.zeros((3, 1, 2, 2), dtype=np.float32)
    x_ood = np.ones((400, 1, 2, 2), dtype=np.float64)
    x_all, y_all, is_ood = append_ood(x, np.array([0, 1, 2]), x_ood, 4, np.random.default_rng(0))
    assert x_all.dtype == np.float32 and x_all.shape == (403, 1, 2, 2) and y_all.dtype == np.int64
    assert is_ood.tolist() == [False] * 3 + [True] * 400
    assert sorted(set(y_all[3:].tolist())) == [0, 1, 2, 3]  # uniform over all classes, 0 included


def test_a_validation_split_of_one_example_is_allowed_and_one_of_every_example_refused():
    got = validation_positions(4, 0.25, np.random.default_rng(0))
    assert got.dtype == np.int64 and got.size == 1 and 0 <= got[0] < 4
    with pytest.raises(BnmemError, match="empty split"):
        validation_positions(3, 1.0, np.random.default_rng(0))
