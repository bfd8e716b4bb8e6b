"""CIFAR-style ResNets (BasicBlock, post-activation) with a swappable norm."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bnmem.models.norms import NormFactory, kaiming_init_convs, norm_factory


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (He et al. 2016, post-activation).

    Forward: ``relu(norm2(conv2(relu(norm1(conv1(x))))) + shortcut(x))`` where
    ``shortcut`` is the identity, or ``1x1 conv (stride s) -> norm`` when the
    stride or the channel count changes. Convs have no bias (identical for
    every norm).

    Args:
        in_channels: input channels.
        out_channels: output channels.
        stride: stride of the first conv and of the projection.
        make_norm: the norm factory (``norm_factory(norm)``).
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, make_norm: NormFactory) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.norm1 = make_norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.norm2 = make_norm(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.shortcut: nn.Module = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), make_norm(out_channels)
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))

    def zero_init_branch(self) -> None:
        """Make the residual branch output zero, so the block starts as relu(shortcut(x)).

        Zeroes the γ of ``norm2`` when it has one; otherwise (``none``) the
        weight of ``conv2``. Zeroing a conv that feeds a norm would instead feed
        the norm a constant and blow up its gradient (1/sqrt(eps)), hence the split.
        """
        weight = getattr(self.norm2, "weight", None)
        if isinstance(weight, nn.Parameter):
            nn.init.zeros_(weight)
        else:
            nn.init.zeros_(self.conv2.weight)


class ResNet(nn.Module):
    """CIFAR-style ResNet: 3x3 stem (no max pool), stages of BasicBlocks, global average pool, linear.

    Forward: conv1 (3x3, stride 1) -> norm1 -> relu -> layer1 ... layerK ->
    adaptive_avg_pool2d(1) -> flatten -> fc. Stage i > 1 starts with stride 2.
    Global pooling makes any input of at least 1x1 after the strides work
    (8x8 digits end at 2x2 in resnet20 and 1x1 in resnet18).

    Initialization: convs Kaiming-normal (fan_in, ReLU gain); fc PyTorch
    default; norm layers γ=1, β=0. With ``zero_init_residual`` every residual
    branch is made to output zero at init (Fixup-like; see
    :meth:`BasicBlock.zero_init_branch`). Its default ``None`` means "only for
    norm='none'": the unnormalized variant zeroes the last conv of each branch,
    which keeps its activations from doubling in variance at every block and
    makes it trainable; the normalized variants keep the standard γ=1, because
    γ (through γ/σ) is what this study measures and zeroing half of the γ's
    would bias it.

    Pairing across norms: built after the same ``torch.manual_seed``, every
    layer that two norms' models both have starts from the same weights
    (norm layers draw no random numbers), except, by default, each residual
    branch's last conv of the ``none`` model, which starts at zero. Results
    state this difference, measured from the models
    (:func:`bnmem.models.pairing.init_pairing`); ``zero_init_residual=False``
    makes the pair identical everywhere.

    Args:
        input_shape: (C, H, W).
        num_classes: number of logits.
        norm: ``batch``, ``none``, ``group`` or ``layer``.
        widths: channels of each stage (the stem has ``widths[0]``).
        blocks: number of BasicBlocks per stage.
        zero_init_residual: zero-init each residual branch's last layer
            (None: only when norm='none').
    """

    def __init__(
        self,
        input_shape: tuple[int, int, int],
        num_classes: int,
        norm: str = "batch",
        widths: Sequence[int] = (16, 32, 64),
        blocks: Sequence[int] = (3, 3, 3),
        zero_init_residual: bool | None = None,
    ) -> None:
        super().__init__()
        if len(widths) != len(blocks) or not widths:
            raise ValueError("widths and blocks must be non-empty and of equal length")
        make_norm = norm_factory(norm, dims=2)
        self.input_shape = tuple(input_shape)
        self.num_classes = num_classes
        self.norm_kind = norm
        self.conv1 = nn.Conv2d(input_shape[0], widths[0], 3, stride=1, padding=1, bias=False)
        self.norm1 = make_norm(widths[0])
        in_ch = widths[0]
        # Stages are registered as layer1..layerK (torchvision-style names that
        # read well in per-layer γ/σ reports).
        self.num_stages = len(widths)
        for i, (width, n) in enumerate(zip(widths, blocks)):
            stride = 1 if i == 0 else 2
            stage = nn.Sequential(
                *(BasicBlock(in_ch if j == 0 else width, width, stride if j == 0 else 1, make_norm) for j in range(n))
            )
            self.add_module(f"layer{i + 1}", stage)
            in_ch = width
        self.fc = nn.Linear(in_ch, num_classes)

        kaiming_init_convs(self)
        if zero_init_residual is None:
            zero_init_residual = norm == "none"
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    m.zero_init_branch()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (N, C, H, W), NCHW or channels_last. Returns: logits (N, num_classes)."""
        x = F.relu(self.norm1(self.conv1(x)))
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def resnet20(
    input_shape: tuple[int, int, int], num_classes: int, norm: str = "batch", zero_init_residual: bool | None = None
) -> ResNet:
    """ResNet-20 (He et al. 2016, CIFAR): 16-ch stem, stages 16/32/64 with 3 BasicBlocks each.

    Args/Returns: see :class:`ResNet`.
    """
    return ResNet(input_shape, num_classes, norm, (16, 32, 64), (3, 3, 3), zero_init_residual)


def resnet18(
    input_shape: tuple[int, int, int], num_classes: int, norm: str = "batch", zero_init_residual: bool | None = None
) -> ResNet:
    """CIFAR ResNet-18: 64-ch 3x3 stem, no max pool, stages 64/128/256/512 with [2, 2, 2, 2] BasicBlocks.

    Args/Returns: see :class:`ResNet`.
    """
    return ResNet(input_shape, num_classes, norm, (64, 128, 256, 512), (2, 2, 2, 2), zero_init_residual)
