"""Training augmentation (random shifts/crops, horizontal flips) and the query views that match it.

An augmentation is a pure re-indexing of pixels: example ``n`` of a batch is
read at rows ``i + dy`` and columns ``j + dx`` (columns mirrored first when it
is flipped), with out-of-image positions reflected back into the image
(``reflect``) or set to 0, the normalized mean colour (``zero``). This is a
random crop of the padded image, then a flip: the standard CIFAR recipe.

Reproducibility. The per-example parameters ``(dy, dx, flip)`` of an epoch are
drawn from their own stream of (model seed, epoch), separate from the data
order of :mod:`bnmem.train.batching`, one row per batch slot: the s-th batch's
b-th example of that epoch gets ``params[s, b]``. The plain trainer and the
ensemble engines both call :func:`epoch_params` and :func:`apply` (copies
only, no arithmetic), so augmented training stays bitwise equal between them
and a resumed run sees the same augmented batches.

Query views. LiRA scores a model on the views it was trained on. For an
augmentation with maximal shift ``p``, :func:`matched_views` gives the 9
shifts ``{-p, 0, p}²`` of the image (as the LiRA reference queries CIFAR
models: mirror × shifts of 0 and ±4 pixels), and with flips each of them
mirrored as well (18 views); without augmentation only the identity. Each
view is :func:`apply` with one fixed parameter, i.e. exactly a transform the
trainer draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from bnmem.errors import BnmemError

AUGMENTS = ("none", "shift", "crop-flip")
PADDINGS = ("reflect", "zero")
# Horizontal flip is label-preserving only for natural images; a flipped digit
# (or clothing item, whose images are canonically oriented) is another input.
FLIP_DATASETS = ("cifar10", "cifar100")
# Keeps the augmentation stream apart from every other seeded stream of a model.
_STREAM = 0xA06

View = Callable[[torch.Tensor], torch.Tensor]


def default_pad(height: int) -> int:
    """Maximal shift when ``augment_pad`` is not set: ``max(1, H // 8)``.

    1 pixel on 8-px digits, 3 on 28-px MNIST/Fashion-MNIST, 4 on 32-px CIFAR
    (the standard ``RandomCrop(32, padding=4)``).
    """
    return max(1, int(height) // 8)


@dataclass(frozen=True)
class AugmentSpec:
    """A resolved augmentation: kind, maximal shift in pixels, padding mode.

    Attributes:
        kind: ``none``, ``shift`` (random shift by up to ``pad`` pixels per
            axis) or ``crop-flip`` (the same, then a horizontal flip with
            probability 1/2).
        pad: maximal shift per axis (0 for ``none``).
        padding: ``reflect`` or ``zero``.
    """

    kind: str = "none"
    pad: int = 0
    padding: str = "reflect"

    @property
    def active(self) -> bool:
        return self.kind != "none"

    @property
    def flips(self) -> bool:
        return self.kind == "crop-flip"

    def describe(self) -> str:
        """One line for results files and reports."""
        if not self.active:
            return "none"
        flip = " + horizontal flip (p=1/2)" if self.flips else ""
        return f"random shift by up to {self.pad} px per axis ({self.padding} padding){flip}"


NO_AUGMENT = AugmentSpec()


def resolve(kind: str, pad: int | None, padding: str, input_shape: tuple[int, ...],
            dataset: str | None = None) -> AugmentSpec:
    """Check an augmentation against the data it is applied to.

    Args:
        kind: one of :data:`AUGMENTS`.
        pad: maximal shift, or None for :func:`default_pad`.
        padding: one of :data:`PADDINGS`.
        input_shape: (C, H, W) of the inputs (a flat shape rejects any augmentation).
        dataset: the dataset's name; flips are refused outside :data:`FLIP_DATASETS`.

    Returns:
        The resolved spec.

    Raises:
        BnmemError: unknown kind or padding, non-image inputs, flips on a
            dataset whose images are not mirror-symmetric, or a shift that
            reflection cannot realize (``pad >= H`` or ``W``).
    """
    if kind not in AUGMENTS:
        raise BnmemError(f"unknown augment {kind!r}; choose one of {', '.join(AUGMENTS)}")
    if padding not in PADDINGS:
        raise BnmemError(f"unknown augment padding {padding!r}; choose one of {', '.join(PADDINGS)}")
    if kind == "none":
        return NO_AUGMENT
    if len(input_shape) != 3:
        raise BnmemError(f"augment {kind!r} needs image inputs (C, H, W), got input shape {tuple(input_shape)}")
    if kind == "crop-flip" and dataset is not None and dataset not in FLIP_DATASETS:
        raise BnmemError(f"augment 'crop-flip' flips images, which only {', '.join(FLIP_DATASETS)} allow; "
                         f"a flipped {dataset} image is another input. Use augment 'shift'")
    h, w = int(input_shape[1]), int(input_shape[2])
    p = default_pad(h) if pad is None else int(pad)
    if not 1 <= p < min(h, w):
        raise BnmemError(f"augment_pad must lie in 1..{min(h, w) - 1} for {h}x{w} images, got {p}")
    return AugmentSpec(kind, p, padding)


def spec_of(train_cfg, input_shape: tuple[int, ...], dataset: str | None = None) -> AugmentSpec:
    """The :class:`AugmentSpec` of a :class:`~bnmem.config.TrainConfig` for inputs of ``input_shape``."""
    return resolve(train_cfg.augment, train_cfg.augment_pad, train_cfg.augment_padding, input_shape, dataset)


def epoch_params(spec: AugmentSpec, n_batches: int, batch_size: int, seed: int, epoch: int) -> torch.Tensor:
    """Per-example augmentation parameters of one epoch of one model.

    Args:
        spec: the augmentation (must be active).
        n_batches: batches of the epoch (:func:`~bnmem.train.batching.epoch_batches`).
        batch_size: examples per batch.
        seed: the model's seed.
        epoch: 0-based epoch.

    Returns:
        int64 [n_batches, batch_size, 3]: ``(dy, dx, flip)`` of each batch slot.
    """
    rng = np.random.default_rng([_STREAM, int(seed) % 2**63, int(epoch)])
    shifts = rng.integers(-spec.pad, spec.pad + 1, size=(n_batches, batch_size, 2))
    flips = rng.integers(0, 2, size=(n_batches, batch_size, 1)) if spec.flips else np.zeros((n_batches, batch_size, 1))
    return torch.from_numpy(np.concatenate([shifts, flips], axis=2).astype(np.int64))


def _source(pos: torch.Tensor, size: int, padding: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Where output position ``pos`` reads from, and (zero padding) which positions are inside."""
    if padding == "reflect":
        # pad < size, so one reflection at each edge suffices (as F.pad(mode="reflect")).
        pos = pos.abs()
        return torch.where(pos > size - 1, 2 * (size - 1) - pos, pos), None
    inside = (pos >= 0) & (pos < size)
    return pos.clamp(0, size - 1), inside


def apply_nhwc(x: torch.Tensor, params: torch.Tensor, padding: str) -> torch.Tensor:
    """Augment images laid out [M, H, W, C] (any strides).

    Args:
        x: images [M, H, W, C].
        params: int64 [M, 3] ``(dy, dx, flip)`` per image.
        padding: ``reflect`` or ``zero``.

    Returns:
        A new contiguous [M, H, W, C] tensor; ``out[n, i, j] = x[n, i + dy, j' + dx]``
        with ``j' = W - 1 - j`` where flipped, else ``j``.
    """
    m, h, w, _ = x.shape
    params = params.to(x.device)
    dy, dx, flip = params[:, 0:1], params[:, 1:2], params[:, 2:3].bool()
    i = torch.arange(h, device=x.device).unsqueeze(0)
    j = torch.arange(w, device=x.device).unsqueeze(0)
    rows, row_in = _source(i + dy, h, padding)
    cols, col_in = _source(torch.where(flip, w - 1 - j, j) + dx, w, padding)
    out = x[torch.arange(m, device=x.device)[:, None, None], rows[:, :, None], cols[:, None, :]]
    if padding == "zero":
        inside = (row_in[:, :, None] & col_in[:, None, :]).unsqueeze(-1)
        out = torch.where(inside, out, torch.zeros((), dtype=out.dtype, device=out.device))
    return out


def apply(x: torch.Tensor, params: torch.Tensor, padding: str) -> torch.Tensor:
    """:func:`apply_nhwc` for images [M, C, H, W]; returns [M, C, H, W] in channels_last memory."""
    return apply_nhwc(x.permute(0, 2, 3, 1), params, padding).permute(0, 3, 1, 2)


def matched_views(spec: AugmentSpec) -> list[tuple[str, View]]:
    """The query views of a model trained with ``spec`` (see the module docstring).

    Args:
        spec: the training augmentation.

    Returns:
        ``[(name, fn)]`` with ``identity`` first; ``fn`` maps [N, C, H, W] to
        [N, C, H, W]. Only the identity when ``spec`` is inactive.
    """
    views: list[tuple[str, View]] = [("identity", lambda x: x)]
    if not spec.active:
        return views
    p = spec.pad
    for flip in ((0, 1) if spec.flips else (0,)):
        for dy in (-p, 0, p):
            for dx in (-p, 0, p):
                if (dy, dx, flip) == (0, 0, 0):
                    continue
                name = ("flip" if flip else "") + ("+" if flip and (dx or dy) else "")
                name += f"shift({dx:+d},{dy:+d})" if dx or dy else ""
                param = torch.tensor([[dy, dx, flip]], dtype=torch.int64)
                views.append((name, lambda x, param=param: apply(x, param.expand(len(x), 3), spec.padding)))
    return views
