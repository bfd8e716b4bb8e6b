"""Two-hidden-layer MLP with a swappable 1-D norm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bnmem.errors import BnmemError
from bnmem.models.norms import norm_factory


class MLP(nn.Module):
    """flatten -> [Linear -> norm -> ReLU] x 2 -> Linear.

    Forward: ``x.flatten(1)`` (logical NCHW order) -> fc1 -> norm1 -> relu ->
    fc2 -> norm2 -> relu -> fc3. Norms are the 1-D variants of the factory
    (BatchNorm1d, LayerNorm(width), GroupNorm(groups, width), Identity).

    Initialization: PyTorch defaults everywhere (Linear: Kaiming-uniform with
    a=sqrt(5); norms γ=1, β=0). Linear biases are kept for every norm.

    Args:
        input_shape: (C, H, W) of the images (flattened to C*H*W features).
        num_classes: number of logits.
        norm: ``batch``, ``none``, ``group`` or ``layer``.
        width: hidden width (default 256).
    """

    def __init__(
        self, input_shape: tuple[int, int, int], num_classes: int, norm: str = "batch", width: int = 256
    ) -> None:
        super().__init__()
        if width < 1:
            raise BnmemError(f"mlp width must be >= 1, got {width}")
        make_norm = norm_factory(norm, dims=1)
        c, h, w = input_shape
        self.input_shape = tuple(input_shape)
        self.num_classes = num_classes
        self.norm_kind = norm
        self.fc1 = nn.Linear(c * h * w, width)
        self.norm1 = make_norm(width)
        self.fc2 = nn.Linear(width, width)
        self.norm2 = make_norm(width)
        self.fc3 = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (N, C, H, W). Returns: logits (N, num_classes)."""
        x = x.flatten(1)
        x = F.relu(self.norm1(self.fc1(x)))
        x = F.relu(self.norm2(self.fc2(x)))
        return self.fc3(x)
