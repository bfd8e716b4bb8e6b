"""How many models one vectorized network holds: the chunk size from the device's free memory.

A chunk of K models needs, per model,

- its state: parameters, their gradients and the optimizer's state (SGD's momentum buffer, Adam's
  two moments), plus the BN buffers;
- its activations for one training batch: the tensors autograd saves for the backward pass,
  counted exactly by probe forward passes of one model under
  ``torch.autograd.graph.saved_tensors_hooks`` (each storage once, parameters excluded), scaled to
  the batch (two probes, on 2 and 4 examples, separate the per-example part from the per-step part),
  times :data:`BACKWARD_PEAK` for the activation gradients alive during the backward pass.

The chunk is the largest K whose total fills at most :data:`FREE_FRACTION` of the free memory:
``torch.cuda.mem_get_info`` plus the blocks PyTorch's allocator holds unused, on CUDA; on the CPU
(and other devices without a free-memory query) the documented bound :data:`CPU_MEMORY_BOUND`
stands in for it. Nothing here changes a model's arithmetic: the chunk only decides which models
share a network (see :mod:`bnmem.train.ensemble` for when that changes the last bits).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

# The share of the free memory a chunk may fill: the rest absorbs the allocator's fragmentation,
# cuDNN's workspaces and the estimate's error (the GPU check prints the peak against the estimate).
FREE_FRACTION = 0.6
# Activation gradients alive at once during the backward pass, as a multiple of the saved activations.
BACKWARD_PEAK = 2.0
# Stand-in for free memory on the CPU and on devices without a free-memory query: the bound the
# ensemble's chunks stay under there (the fixed activation budget that earlier code used everywhere).
CPU_MEMORY_BOUND = 4 * 2**30


@dataclass(frozen=True)
class ModelBytes:
    """One model's share of a chunk's memory, in bytes."""

    state: int  # parameters + gradients + optimizer state + buffers
    activations: int  # saved for the backward pass at the batch size, times BACKWARD_PEAK

    @property
    def total(self) -> int:
        return self.state + self.activations


def optimizer_slots(optimizer: str, momentum: float) -> int:
    """Tensors of a parameter's shape the optimizer keeps: SGD's momentum buffer (when momentum > 0),
    Adam's two moments."""
    if optimizer == "adam":
        return 2
    return 1 if momentum > 0 else 0


def _saved_bytes(probe: nn.Module, x: torch.Tensor, autocast_dtype: torch.dtype | None) -> int:
    """Bytes of the storages autograd saves in one forward pass of ``probe`` on ``x`` (parameters excluded)."""
    params = {p.untyped_storage().data_ptr() for p in probe.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and ptr != 0:
            seen[ptr] = max(seen.get(ptr, 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            probe(x)
    return sum(seen.values())


def saved_activation_bytes(model: nn.Module, input_shape: tuple[int, ...], dtype: torch.dtype,
                           autocast_dtype: torch.dtype | None = None) -> tuple[float, float]:
    """Bytes autograd saves for the backward pass: (per training example, per step whatever the batch).

    Measured by training-mode forward passes of a deep copy of ``model`` on the CPU on 2 and on 4 random
    examples (BN refuses a batch of one value per channel), each saved storage counted once and parameters
    excluded; the difference is the per-example part, the rest (e.g. the parameters' bfloat16 copies under
    autocast) is per step. The model itself and the caller's random state are untouched. ``autocast_dtype``
    (e.g. bfloat16): the probe runs under the CPU's autocast, so saved tensors are counted at the
    precision training keeps them.
    """
    import copy

    probe = copy.deepcopy(model).to(device="cpu", dtype=dtype).train()
    with torch.random.fork_rng(devices=[]):
        two, four = (_saved_bytes(probe, torch.randn(n, *input_shape, dtype=dtype), autocast_dtype)
                     for n in (2, 4))
    per_example = max(0.0, (four - two) / 2)
    return per_example, max(0.0, two - 2 * per_example)


def model_bytes(model: nn.Module, input_shape: tuple[int, ...], batch_size: int, dtype: torch.dtype,
                optimizer: str = "sgd", momentum: float = 0.9,
                autocast_dtype: torch.dtype | None = None) -> ModelBytes:
    """One model's memory in a chunk training batches of ``batch_size`` examples (see the module docstring)."""
    width = torch.finfo(dtype).bits // 8
    n_params = sum(p.numel() for p in model.parameters())
    n_buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    state = n_params * width * (2 + optimizer_slots(optimizer, momentum)) + n_buffers
    per_example, per_step = saved_activation_bytes(model, input_shape, dtype, autocast_dtype)
    act = (per_example * batch_size + per_step) * BACKWARD_PEAK
    return ModelBytes(state=int(state), activations=int(act))


def free_bytes(device: torch.device) -> int:
    """Memory a chunk may draw on: on CUDA the driver's free memory plus what PyTorch's allocator holds
    unused; elsewhere :data:`CPU_MEMORY_BOUND`."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + cached)
    return CPU_MEMORY_BOUND


def chunk_size(per_model: ModelBytes | int, free: int, most: int, multiple: int = 1,
               fraction: float = FREE_FRACTION) -> int:
    """Models per network: as many as fill ``fraction`` of ``free`` bytes, between 1 (``multiple`` for
    grouped networks, which pad to it anyway) and ``most``, rounded down to a multiple of ``multiple``.

    Args:
        per_model: one model's bytes (:func:`model_bytes`).
        free: the free memory (:func:`free_bytes`).
        most: the cap (e.g. the CPU's cache-friendly chunk).
        multiple: the grouped network's model multiple (1 for vmap).
        fraction: the share of ``free`` to fill.
    """
    need = per_model.total if isinstance(per_model, ModelBytes) else int(per_model)
    k = int(max(1, min(most, (fraction * free) // max(need, 1))))
    return max(multiple, k - k % multiple)
