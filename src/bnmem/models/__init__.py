"""Architectures with one swappable normalization, built by name.

Every constructor has the signature ``(input_shape, num_classes, norm, **extra)``
and receives its norm layers from :func:`norm_factory`, so the ``batch``,
``none``, ``group`` and ``layer`` variants of an architecture differ only in
their normalization modules (and, for ResNets with ``norm='none'``, in the
zero-init of each residual branch's last conv; see :class:`ResNet`).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from torch import nn

from bnmem.errors import BnmemError
from bnmem.names import ARCH_ALIASES
from bnmem.models.densenet import DenseNet
from bnmem.models.fastnet import FastNet, fastnet
from bnmem.models.lenet import LeNet
from bnmem.models.mlp import MLP
from bnmem.models.norms import (
    NORMS,
    batchnorm_layers,
    is_norm_layer,
    kaiming_init_convs,
    norm_factory,
    norm_layers,
    num_groups,
)
from bnmem.models.resnet import BasicBlock, ResNet, resnet18, resnet20

# Canonical architecture name -> constructor(input_shape, num_classes, norm, **extra).
# Lists exactly bnmem.names.ARCHS, in its order (checked by tests/test_models.py); aliases
# (bnmem.names.ARCH_ALIASES) are resolved by ``canonical_arch``.
MODELS: dict[str, Callable[..., nn.Module]] = {
    "lenet": LeNet,
    "mlp": MLP,
    "resnet20": resnet20,
    "resnet18": resnet18,
    "densenet": DenseNet,
    "fastnet": fastnet,
}

# Parameters every constructor takes positionally; anything else is an extra.
_COMMON = ("input_shape", "num_classes", "norm")


def canonical_arch(arch: str) -> str:
    """Resolve an alias (``resnet`` -> ``resnet20``) and check the name.

    Raises:
        BnmemError: unknown architecture (the message lists the choices).
    """
    name = ARCH_ALIASES.get(arch, arch)
    if name not in MODELS:
        aliases = ", ".join(f"{a!r} = {t!r}" for a, t in ARCH_ALIASES.items())
        raise BnmemError(f"unknown architecture {arch!r}; choose one of {', '.join(MODELS)} (aliases: {aliases})")
    return name


def model_options(arch: str) -> dict[str, Any]:
    """Architecture-specific keyword arguments of ``arch`` and their defaults."""
    sig = inspect.signature(MODELS[canonical_arch(arch)])
    return {k: p.default for k, p in sig.parameters.items() if k not in _COMMON}


def build_model(
    arch: str, input_shape: tuple[int, int, int], num_classes: int, norm: str = "batch", **kwargs: Any
) -> nn.Module:
    """Build an architecture by name.

    Args:
        arch: one of ``MODELS`` (``lenet``, ``mlp``, ``resnet20``, ``resnet18``,
            ``densenet``) or an alias (``resnet``).
        input_shape: (C, H, W) of one example, e.g. (1, 8, 8), (1, 28, 28), (3, 32, 32).
        num_classes: number of output logits.
        norm: ``batch``, ``none``, ``group`` or ``layer``.
        **kwargs: architecture-specific options (see :func:`model_options`),
            e.g. ``depth``/``growth`` for densenet, ``width`` for mlp,
            ``zero_init_residual`` for the ResNets.

    Returns:
        The model in train mode, on CPU, float32. It accepts NCHW or
        channels_last input and returns logits of shape (N, num_classes).

    Raises:
        BnmemError: unknown arch, norm or option, or a malformed input shape.
    """
    name = canonical_arch(arch)
    if norm not in NORMS:
        raise BnmemError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}")
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise BnmemError(f"input_shape must be (C, H, W) with positive sizes, got {tuple(input_shape)}")
    if int(num_classes) < 1:
        raise BnmemError(f"num_classes must be >= 1, got {num_classes}")
    options = model_options(name)
    unknown = sorted(set(kwargs) - set(options))
    if unknown:
        raise BnmemError(
            f"unknown option(s) {', '.join(unknown)} for {name}; "
            f"it accepts: {', '.join(options) if options else 'none'}"
        )
    return MODELS[name](shape, int(num_classes), norm, **kwargs)


__all__ = [
    "MODELS",
    "BasicBlock",
    "DenseNet",
    "FastNet",
    "LeNet",
    "MLP",
    "ResNet",
    "batchnorm_layers",
    "build_model",
    "canonical_arch",
    "fastnet",
    "is_norm_layer",
    "kaiming_init_convs",
    "model_options",
    "norm_factory",
    "norm_layers",
    "num_groups",
    "resnet18",
    "resnet20",
]
