"""Training augmentation: the pixel copies against torch's own pad/flip, seeded draws, matched views."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import augment, load_dataset
from bnmem.errors import BnmemError
from bnmem.train import seeded_model, train_model


@pytest.fixture(scope="module")
def ds():
    return load_dataset(DataConfig(dataset="digits", train_size=300, seed=0))


def _reference(x: torch.Tensor, dy: int, dx: int, flip: int, pad: int, padding: str) -> torch.Tensor:
    """Obviously-correct crop of the padded image, then a mirror (torch's own F.pad)."""
    h, w = x.shape[-2:]
    mode = "reflect" if padding == "reflect" else "constant"
    padded = F.pad(x, (pad, pad, pad, pad), mode=mode)
    out = padded[..., pad + dy : pad + dy + h, pad + dx : pad + dx + w]
    return out.flip(-1) if flip else out


@pytest.mark.parametrize("padding", ["reflect", "zero"])
def test_apply_is_a_crop_of_the_padded_image_then_a_flip(padding):
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(60, 3, 8, 8)).astype(np.float32)) - 0.5  # negative values too
    pad = 3
    params = torch.from_numpy(np.stack([rng.integers(-pad, pad + 1, 60), rng.integers(-pad, pad + 1, 60),
                                        rng.integers(0, 2, 60)], axis=1))
    got = augment.apply(x, params, padding)
    for n in range(60):
        dy, dx, flip = params[n].tolist()
        assert torch.equal(got[n], _reference(x[n : n + 1], dy, dx, flip, pad, padding)[0]), (n, dy, dx, flip)


def test_epoch_params_are_seeded_per_model_and_epoch():
    spec = augment.AugmentSpec("crop-flip", 2, "reflect")
    a = augment.epoch_params(spec, 5, 16, seed=3, epoch=1)
    assert a.shape == (5, 16, 3) and a.dtype == torch.int64
    assert torch.equal(a, augment.epoch_params(spec, 5, 16, seed=3, epoch=1))
    assert not torch.equal(a, augment.epoch_params(spec, 5, 16, seed=3, epoch=2))
    assert not torch.equal(a, augment.epoch_params(spec, 5, 16, seed=4, epoch=1))
    assert a[..., :2].abs().max() == 2 and set(a[..., 2].unique().tolist()) == {0, 1}
    shift = augment.epoch_params(augment.AugmentSpec("shift", 1, "zero"), 5, 16, 3, 1)
    assert shift[..., 2].eq(0).all() and shift[..., :2].abs().max() == 1


def test_resolve_checks_the_data():
    assert augment.resolve("none", None, "reflect", (1, 8, 8)) == augment.AugmentSpec()
    assert augment.resolve("shift", None, "zero", (1, 8, 8), "digits").pad == 1
    assert augment.resolve("crop-flip", None, "reflect", (3, 32, 32), "cifar10").pad == 4
    with pytest.raises(BnmemError, match="flip"):
        augment.resolve("crop-flip", None, "reflect", (1, 28, 28), "mnist")
    with pytest.raises(BnmemError, match="image"):
        augment.resolve("shift", None, "reflect", (64,), "digits")
    with pytest.raises(BnmemError, match="augment_pad"):
        augment.resolve("shift", 8, "reflect", (1, 8, 8), "digits")


def test_augmented_training_is_reproducible_and_differs_from_plain(ds):
    mc = ModelConfig(arch="lenet", norm="batch")
    cfg = TrainConfig(epochs=2, batch_size=32, augment="shift")

    def run(c: TrainConfig) -> torch.Tensor:
        return train_model(seeded_model(mc, ds, 1), ds, c, 1, measure=False, progress=False).model.conv1.weight

    a, b = run(cfg), run(cfg)
    assert torch.equal(a, b)
    assert not torch.allclose(a, run(cfg.model_copy(update={"augment": "none"})))


def test_crop_flip_on_digits_is_one_line_error(ds):
    mc = ModelConfig(arch="lenet", norm="batch")
    with pytest.raises(BnmemError, match="flip"):
        train_model(seeded_model(mc, ds, 0), ds, TrainConfig(epochs=1, augment="crop-flip"), 0, progress=False)


def test_matched_views_are_transforms_the_trainer_draws(ds):
    x = ds.x_train[:10]
    assert [n for n, _ in augment.matched_views(augment.AugmentSpec())] == ["identity"]
    spec = augment.AugmentSpec("crop-flip", 2, "zero")
    views = augment.matched_views(spec)
    assert len(views) == 18 and views[0][0] == "identity" and len({n for n, _ in views}) == 18
    support = [(0, 0, 0)] + [(dy, dx, f) for f in (0, 1) for dy in (-2, 0, 2) for dx in (-2, 0, 2)
                             if (dy, dx, f) != (0, 0, 0)]
    for (name, fn), (dy, dx, f) in zip(views, support):
        # Each view is augment.apply with one parameter in the training support.
        assert torch.equal(fn(x), _reference(x, dy, dx, f, 2, "zero")), name
    assert len(augment.matched_views(augment.AugmentSpec("shift", 1, "reflect"))) == 9
