"""Query views of image batches: identity, horizontal flip and small pixel shifts.

Membership attacks query a model on each example under several views (the
LiRA protocol); the lira lens and the audit's shadow models use the same list.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

View = Callable[[torch.Tensor], torch.Tensor]


def shift_size(height: int) -> int:
    """Shift of the ``shift`` views: 1 pixel for small images (8x8 digits), 2 from 28 px up."""
    return 2 if height >= 28 else 1


def shifted(x: torch.Tensor, dx: int, dy: int) -> torch.Tensor:
    """``x`` [N, C, H, W] moved by ``dx`` pixels right and ``dy`` down, reflect-padded.

    Reflection (as the LiRA reference's shift views) keeps border pixels in the
    image's own distribution; zero padding would paint the mean colour in.
    """
    s = max(abs(dx), abs(dy))
    if s == 0:
        return x
    h, w = x.shape[-2:]
    padded = F.pad(x, (s, s, s, s), mode="reflect")
    return padded[..., s - dy : s - dy + h, s - dx : s - dx + w]


def make_views(views: list[str], input_shape: tuple[int, int, int]) -> list[tuple[str, View]]:
    """The expanded list of named views.

    ``identity`` and (if asked) ``flip`` are the base images; ``shift`` adds the
    four axis shifts (right, left, down, up) of each base image.

    Args:
        views: canonical view names of a :class:`LiraConfig`.
        input_shape: (C, H, W).

    Returns:
        ``[(name, fn)]``, e.g. ``identity``, ``shift(+1,0)``, ...
    """
    bases: list[tuple[str, View]] = [("identity", lambda x: x)]
    if "flip" in views:
        bases.append(("flip", lambda x: x.flip(-1)))
    out = list(bases)
    if "shift" in views:
        s = shift_size(input_shape[1])
        for base, fn in bases:
            for dx, dy in ((s, 0), (-s, 0), (0, s), (0, -s)):
                name = f"shift({dx:+d},{dy:+d})" if base == "identity" else f"{base}+shift({dx:+d},{dy:+d})"
                out.append((name, lambda x, fn=fn, dx=dx, dy=dy: shifted(fn(x), dx, dy)))
    return out
