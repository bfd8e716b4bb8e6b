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

from typing import Callable

import numpy as np
import torch

# What an augmentation is and whether the inputs can take it (pure, so the config can check it).
from bnmem.augment_spec import (  # noqa: F401 - part of this module's interface
    AUGMENTS,
    FLIP_DATASETS,
    NO_AUGMENT,
    PADDINGS,
    AugmentSpec,
    default_pad,
    resolve,
    spec_of,
)

# Keeps the augmentation stream apart from every other seeded stream of a model.
_STREAM = 0xA06

View = Callable[[torch.Tensor], torch.Tensor]


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
