"""A small DenseNet-BC (Huang et al. 2017) with a swappable norm."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bnmem.errors import BnmemError
from bnmem.models.norms import NormFactory, kaiming_init_convs, norm_factory


class DenseLayer(nn.Module):
    """Bottleneck dense layer (pre-activation): appends ``growth`` new channels.

    Forward: ``cat([x, conv2(relu(norm2(conv1(relu(norm1(x))))))], dim=1)`` with
    conv1 1x1 (in -> 4*growth) and conv2 3x3 (4*growth -> growth), no biases.

    Args:
        in_channels: input channels.
        growth: channels added by this layer.
        make_norm: the norm factory.
    """

    def __init__(self, in_channels: int, growth: int, make_norm: NormFactory) -> None:
        super().__init__()
        self.norm1 = make_norm(in_channels)
        self.conv1 = nn.Conv2d(in_channels, 4 * growth, 1, bias=False)
        self.norm2 = make_norm(4 * growth)
        self.conv2 = nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.relu(self.norm1(x)))
        out = self.conv2(F.relu(self.norm2(out)))
        return torch.cat([x, out], dim=1)


class Transition(nn.Module):
    """norm -> relu -> 1x1 conv (compression) -> 2x2 average pool.

    The pool is skipped when the feature map is already smaller than 2x2, so
    tiny inputs still work (shape-only condition, identical for every input
    of a given size).

    Args:
        in_channels: input channels.
        out_channels: output channels.
        make_norm: the norm factory.
    """

    def __init__(self, in_channels: int, out_channels: int, make_norm: NormFactory) -> None:
        super().__init__()
        self.norm = make_norm(in_channels)
        self.conv = nn.Conv2d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(F.relu(self.norm(x)))
        if x.shape[-2] >= 2 and x.shape[-1] >= 2:
            x = F.avg_pool2d(x, 2)
        return x


class DenseNet(nn.Module):
    """DenseNet-BC for small images: 3x3 stem, 3 dense blocks, 2 transitions, global pool, linear.

    Forward: conv1 (3x3, C -> 2*growth) -> block1 -> trans1 -> block2 -> trans2
    -> block3 -> norm_final -> relu -> adaptive_avg_pool2d(1) -> flatten -> fc.
    Each block has ``(depth - 4) // 6`` :class:`DenseLayer` s (two convs each);
    transitions keep ``floor(compression * C)`` channels and halve H and W.
    With the defaults (depth 22, growth 12) the channel counts are
    24 -> 60 -> 30 -> 66 -> 33 -> 69 and 32x32 inputs end at 8x8, 8x8 at 2x2.

    Initialization: convs Kaiming-normal (fan_in, ReLU gain), fc PyTorch
    default, norm layers γ=1, β=0, for every norm. There is no residual sum
    (concatenation keeps each layer's scale), so no zero-init is needed for
    the ``none`` variant.

    Args:
        input_shape: (C, H, W).
        num_classes: number of logits.
        norm: ``batch``, ``none``, ``group`` or ``layer``.
        depth: total depth, ``6 * n + 4`` (default 22: 3 layers per block).
        growth: growth rate k (default 12).
        compression: channel fraction kept by transitions (default 0.5).

    Raises:
        BnmemError: depth not of the form 6n+4 with n >= 1, growth < 1, or
            compression outside (0, 1].
    """

    def __init__(
        self,
        input_shape: tuple[int, int, int],
        num_classes: int,
        norm: str = "batch",
        depth: int = 22,
        growth: int = 12,
        compression: float = 0.5,
    ) -> None:
        super().__init__()
        if depth < 10 or (depth - 4) % 6 != 0:
            raise BnmemError(f"densenet depth must be 6n+4 with n >= 1 (10, 16, 22, 40, ...), got {depth}")
        if growth < 1:
            raise BnmemError(f"densenet growth must be >= 1, got {growth}")
        if not 0.0 < compression <= 1.0:
            raise BnmemError(f"densenet compression must be in (0, 1], got {compression}")
        make_norm = norm_factory(norm, dims=2)
        self.input_shape = tuple(input_shape)
        self.num_classes = num_classes
        self.norm_kind = norm
        n_layers = (depth - 4) // 6

        channels = 2 * growth
        self.conv1 = nn.Conv2d(input_shape[0], channels, 3, padding=1, bias=False)
        for b in range(1, 4):
            block = nn.Sequential()
            for i in range(n_layers):
                block.add_module(f"dense{i + 1}", DenseLayer(channels, growth, make_norm))
                channels += growth
            self.add_module(f"block{b}", block)
            if b < 3:
                out = max(1, math.floor(compression * channels))
                self.add_module(f"trans{b}", Transition(channels, out, make_norm))
                channels = out
        self.norm_final = make_norm(channels)
        self.fc = nn.Linear(channels, num_classes)
        kaiming_init_convs(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (N, C, H, W), NCHW or channels_last. Returns: logits (N, num_classes)."""
        x = self.conv1(x)
        x = self.trans1(self.block1(x))
        x = self.trans2(self.block2(x))
        x = F.relu(self.norm_final(self.block3(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)
