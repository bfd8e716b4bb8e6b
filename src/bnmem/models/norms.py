"""The one normalization factory every architecture uses, and audit helpers.

Architectures never construct a norm layer themselves: they receive
``norm_factory(norm)`` and call it with a channel count. A ``batch`` and a
``none`` model of the same architecture therefore differ only in the modules
this factory returns.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

from bnmem.errors import BnmemError
from bnmem.names import NORMS  # the normalization choices every architecture accepts (its norm= argument)

NormFactory = Callable[[int], nn.Module]

# Upper bound on GroupNorm's group count (the usual GroupNorm paper default is
# 32, but our narrowest layers have 6-16 channels, so 8 keeps >1 channel per
# group in most layers).
MAX_GROUPS = 8

# Classes counted as "normalization layers" when auditing an arbitrary model.
_NORM_TYPES: tuple[type, ...] = (_BatchNorm, _InstanceNorm, nn.GroupNorm, nn.LayerNorm)
if hasattr(nn, "RMSNorm"):  # torch >= 2.4
    _NORM_TYPES = _NORM_TYPES + (nn.RMSNorm,)


def num_groups(channels: int, max_groups: int = MAX_GROUPS) -> int:
    """The largest divisor of ``channels`` that is at most ``max_groups``.

    Args:
        channels: number of channels C (>= 1).
        max_groups: upper bound on the group count.

    Returns:
        The group count used by ``norm='group'``. Note that for C=6 (LeNet's
        first conv) this is 6, i.e. one channel per group (instance-norm-like);
        for a prime C > 8 it is 1 (layer-norm-like).
    """
    for g in range(min(channels, max_groups), 0, -1):
        if channels % g == 0:
            return g
    raise ValueError(f"channels must be >= 1, got {channels}")


def norm_factory(norm: str, dims: int = 2) -> NormFactory:
    """Return a constructor ``f(C) -> nn.Module`` for one kind of normalization.

    Args:
        norm: ``batch``, ``none``, ``group`` or ``layer``.
        dims: 2 for conv feature maps (N, C, H, W); 1 for vectors (N, C).

    Returns:
        A callable taking the channel/feature count C:

        - ``batch``: ``BatchNorm2d(C)`` / ``BatchNorm1d(C)`` (PyTorch defaults:
          eps 1e-5, momentum 0.1, γ=1, β=0).
        - ``none``: ``nn.Identity()`` (no parameters, no buffers).
        - ``group``: ``GroupNorm(num_groups(C), C)``: groups = the largest
          divisor of C that is <= 8.
        - ``layer``: ``GroupNorm(1, C)`` on feature maps (normalizes each
          example over C, H, W with a per-channel affine), ``LayerNorm(C)`` on
          vectors.

    Raises:
        BnmemError: unknown ``norm``.
        ValueError: ``dims`` not 1 or 2 (a programming error).
    """
    if norm not in NORMS:
        raise BnmemError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}")
    if dims not in (1, 2):
        raise ValueError(f"dims must be 1 or 2, got {dims}")
    if norm == "batch":
        return nn.BatchNorm2d if dims == 2 else nn.BatchNorm1d
    if norm == "none":
        return lambda channels: nn.Identity()
    if norm == "group":
        return lambda channels: nn.GroupNorm(num_groups(channels), channels)
    # norm == "layer"
    if dims == 2:
        return lambda channels: nn.GroupNorm(1, channels)
    return nn.LayerNorm


def is_norm_layer(module: nn.Module) -> bool:
    """True for BatchNorm*, InstanceNorm*, GroupNorm, LayerNorm (and RMSNorm)."""
    return isinstance(module, _NORM_TYPES)


def norm_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """List every normalization layer of any ``nn.Module``.

    Args:
        model: any module (ours or a user's own).

    Returns:
        ``(qualified_name, module)`` pairs in ``named_modules()`` order for
        BatchNorm*, SyncBatchNorm, InstanceNorm*, GroupNorm, LayerNorm and
        RMSNorm layers. ``nn.Identity`` placeholders are not included.
    """
    return [(name, m) for name, m in model.named_modules() if is_norm_layer(m)]


def batchnorm_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """List the batch-normalization layers (``_BatchNorm`` subclasses) of a module.

    Args:
        model: any module.

    Returns:
        ``(qualified_name, module)`` pairs for BatchNorm1d/2d/3d, their lazy
        variants and SyncBatchNorm: the layers with running statistics whose
        γ/σ ratio the study measures. InstanceNorm is excluded even on torch
        versions where it derives from ``_BatchNorm``.
    """
    return [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, _BatchNorm) and not isinstance(m, _InstanceNorm)
    ]


def kaiming_init_convs(model: nn.Module) -> None:
    """Kaiming-normal init (fan_in, ReLU gain) for every conv; conv biases to zero.

    Shared by all architectures so that every norm variant starts from the same
    recipe. fan_in (not torchvision's fan_out) preserves the forward activation
    scale, which is what keeps the unnormalized (``none``) variants trainable.
    Linear layers keep PyTorch's default init; norm layers keep γ=1, β=0.

    Args:
        model: module whose ``nn.Conv1d/2d/3d`` children are re-initialized in place.
    """
    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def batch_sigma(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-channel batch standard deviation as BN computes it in training mode
    (biased variance over all dims but the channel dim 1)."""
    dims = [d for d in range(x.ndim) if d != 1]
    return torch.sqrt(x.var(dim=dims, unbiased=False) + eps)
