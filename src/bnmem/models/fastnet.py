"""A small, wide conv net in the style of fast CIFAR training, and its normalization-free twin.

The layout follows the fast CIFAR-10 trainers' recipe (a few wide 3x3 conv layers, max-pooling
halving the map after the first conv of each stage, GELU, a global max pool and a linear
read-out), written here from that description:

    stem:    conv3x3(C_in -> widths[0]) -> norm -> GELU
    stage i: conv3x3 -> maxpool2 -> norm -> GELU -> conv3x3 -> norm -> GELU     (i = 1..len(widths)-1)
    head:    global max pool -> linear (no bias) -> logits * ``logit_scale``

Three stages halve an input three times (32 -> 4 on CIFAR, 8 -> 1 on the 8x8 digits; a map of
1x1 stays 1x1: the pool uses ``ceil_mode``), so the same network takes both. Convs have no bias
for every norm (as in the ResNets here): BN's β is the shift; ``norm='none'`` has none.

The normalization-free twin (``norm='none'``) is the same network with every norm replaced by
``nn.Identity`` and nothing else added: no norm layer, no weight standardization, no statistics
of any kind, in training or at query time. What keeps it trainable is its initialization alone
(signal-propagation style, data-independent, the same for both twins): every conv filter is drawn
Gaussian, centred (its taps sum to zero) and scaled to GELU's Kaiming gain over its fan-in, so each
layer keeps the second moment of its input at initialization (GELU passes ~0.425 of a unit
Gaussian's second moment; the gain 1/sqrt(0.425) restores it), and the positive mean of the GELU
outputs is not fed forward (without the centring a plain conv stack's features collapse onto one
shared direction, "mean shift", and the twin trained up to 5 points behind BN on the digits). See
docs/gpu/README.md for why this is the fair "no normalization" counterpart and what it is not.
Both variants are built from the same random numbers (the init draws nothing else), so
``seeded_model`` pairs them exactly (``bnmem.models.pairing``).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bnmem.models.norms import norm_factory

# E[GELU(z)^2] for z ~ N(0, 1) (numerical integral): the fraction of a unit input's second moment
# a GELU passes on. The init's gain is its inverse square root (as sqrt(2) is ReLU's).
GELU_SECOND_MOMENT = 0.42522


def gelu_gain() -> float:
    """The Kaiming gain of GELU: 1/sqrt(E[GELU(z)^2]) for a unit Gaussian z."""
    return 1.0 / math.sqrt(GELU_SECOND_MOMENT)


class ConvBlock(nn.Module):
    """conv3x3 (no bias) -> [maxpool2] -> norm -> GELU.

    Args:
        in_channels, out_channels: channel counts.
        pool: max-pool 2x2 (ceil mode) between the conv and the norm.
        make_norm: the norm factory (``norm_factory(norm)``).
    """

    def __init__(self, in_channels: int, out_channels: int, pool: bool, make_norm) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.pool = pool
        self.norm = make_norm(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if self.pool:
            h = F.max_pool2d(h, 2, ceil_mode=True)
        return F.gelu(self.norm(h))


class FastNet(nn.Module):
    """The fast CIFAR network (see the module docstring).

    Args:
        input_shape: (C, H, W); any H, W >= 1.
        num_classes: number of logits.
        norm: ``batch``, ``none``, ``group`` or ``layer``.
        widths: the stem's width, then each stage's (default 32, 64, 256, 256: the widths of the
            fast CIFAR-10 trainers' networks).
        logit_scale: constant factor on the logits (a temperature; the wide max-pooled features
            give large logits at init otherwise).

    Initialization: conv filters Gaussian, centred, scaled to the GELU gain :func:`gelu_gain` over
    the fan-in (module docstring); the linear read-out PyTorch's default; norm layers γ=1, β=0.
    """

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, norm: str = "batch",
                 widths: Sequence[int] = (32, 64, 256, 256), logit_scale: float = 1 / 8) -> None:
        super().__init__()
        widths = tuple(int(w) for w in widths)
        if len(widths) < 2 or min(widths) < 1:
            raise ValueError("widths needs the stem's and at least one stage's width, all positive")
        make_norm = norm_factory(norm, dims=2)
        self.input_shape = tuple(input_shape)
        self.num_classes = num_classes
        self.norm_kind = norm
        self.logit_scale = float(logit_scale)
        self.stem = ConvBlock(input_shape[0], widths[0], False, make_norm)
        self.num_stages = len(widths) - 1
        for i, (w_in, w) in enumerate(zip(widths[:-1], widths[1:])):
            stage = nn.Sequential(ConvBlock(w_in, w, True, make_norm), ConvBlock(w, w, False, make_norm))
            self.add_module(f"layer{i + 1}", stage)
        self.fc = nn.Linear(widths[-1], num_classes, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
                with torch.no_grad():
                    nn.init.normal_(m.weight, 0.0, 1.0)
                    # Each filter's taps sum to zero, then scaled to the gain: a constant (the mean of the
                    # GELU outputs below) maps to zero away from the borders (see the module docstring).
                    w = m.weight - m.weight.mean(dim=(1, 2, 3), keepdim=True)
                    m.weight.copy_(w / w.pow(2).mean(dim=(1, 2, 3), keepdim=True).sqrt()
                                   * (gelu_gain() / math.sqrt(fan_in)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (N, C, H, W), NCHW or channels_last. Returns: logits (N, num_classes)."""
        h = self.stem(x)
        for i in range(self.num_stages):
            h = getattr(self, f"layer{i + 1}")(h)
        h = torch.amax(h, dim=(2, 3))
        return self.fc(h) * self.logit_scale


def fastnet(input_shape: tuple[int, int, int], num_classes: int, norm: str = "batch",
            width: float = 1.0) -> FastNet:
    """The fast CIFAR network at widths (32, 64, 256, 256) times ``width`` (rounded, at least 1).

    Args/Returns: see :class:`FastNet`; ``width`` scales every layer (e.g. 0.25 for quick tests).
    """
    widths = tuple(max(1, round(w * width)) for w in (32, 64, 256, 256))
    return FastNet(input_shape, num_classes, norm, widths)
