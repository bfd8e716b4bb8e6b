"""The accelerator options of a training recipe: bf16 autocast and the memory format of image batches.

Both are fields of :class:`bnmem.config.TrainConfig` (so they are recorded with every run's config and
are part of a shadow model's training identity), read here once for the plain trainer and the ensemble
engines:

- ``precision``: ``float32`` (default: the numbers every test and CPU run rests on) or ``bf16``: the
  forward pass under ``torch.autocast(dtype=torch.bfloat16)`` (matmuls and convolutions in bfloat16,
  accumulating in float32), the loss computed from float32 logits; parameters, gradients, optimizer
  state and BN running statistics stay in the data's dtype. Meant for CUDA; it runs on the CPU too
  (slowly, through the CPU's autocast), which is how the tests check the wiring.
- ``channels_last``: ``auto`` (default: image batches channels_last, except for the vmap engine on
  CUDA, whose batch norm refuses them under vmap), ``on`` or ``off``.
- ``compile``: ``off`` (default), ``default`` or ``reduce-overhead`` (CUDA graphs): ``torch.compile`` of
  the training forward pass (the plain trainer's model, the grouped network's forward, the vmap engine's
  vmapped gradient). Off until benchmarks/gpu_check.py shows it pays; the tests trace it with dynamo's
  ``eager`` backend (:data:`COMPILE_BACKEND`), which checks the wiring and the numbers, not inductor's
  kernels.
"""

from __future__ import annotations

import contextlib
from typing import Callable, TypeVar

import torch

from bnmem.config import TrainConfig

F = TypeVar("F", bound=Callable)
# The backend torch.compile uses: inductor (generated kernels); the tests set "eager" (tracing only).
COMPILE_BACKEND = "inductor"


def autocast_dtype(cfg: TrainConfig, device: torch.device | str) -> torch.dtype | None:
    """The dtype the forward pass autocasts to (None: no autocast)."""
    return torch.bfloat16 if cfg.precision == "bf16" else None


def autocast(cfg: TrainConfig, device: torch.device | str) -> contextlib.AbstractContextManager:
    """The forward pass's autocast context for ``cfg`` on ``device`` (a no-op for float32)."""
    dtype = autocast_dtype(cfg, device)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def channels_last(cfg: TrainConfig, default: bool) -> bool:
    """Whether image batches go channels_last: ``default`` (the engine's own choice) unless the recipe says."""
    return default if cfg.channels_last == "auto" else cfg.channels_last == "on"


def compiled(fn: F, cfg: TrainConfig) -> F:
    """``fn`` under ``torch.compile`` as ``cfg.compile`` says (itself when off)."""
    if cfg.compile == "off":
        return fn
    mode = {} if COMPILE_BACKEND != "inductor" or cfg.compile == "default" else {"mode": cfg.compile}
    return torch.compile(fn, backend=COMPILE_BACKEND, **mode)
