"""What a training augmentation is, and whether the inputs can take it (pure: no torch, no data).

:func:`resolve` checks an augmentation (kind, maximal shift, padding) against the
input shape and the dataset's name and returns an :class:`AugmentSpec`; the
config models call it, so a bad augmentation fails before anything runs, and
:mod:`bnmem.data.augment` applies the spec to batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from bnmem.errors import BnmemError

AUGMENTS = ("none", "shift", "crop-flip")
PADDINGS = ("reflect", "zero")
# Horizontal flip is label-preserving only for natural images; a flipped digit
# (or clothing item, whose images are canonically oriented) is another input.
FLIP_DATASETS = ("cifar10", "cifar100")


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
