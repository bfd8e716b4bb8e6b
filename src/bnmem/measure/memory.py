"""Memory budgets for the per-sample gradient paths: how many examples fit in one vectorized call.

Every per-sample path holds, besides the float64 model, something per example
in the chunk: ``vmap`` the full per-sample gradient (the parameter count) and the
activations of a batched forward/backward; ``ghost`` the activations, the copies
of the layer outputs it taps, the unfolded convolution patches and the largest
per-layer Gram or per-sample weight gradient. :func:`footprint` measures the
activation sizes from one forward pass of one example; :func:`fit_chunk` turns
them and a budget into a chunk size, or one clear error when not even one
example fits. The estimates are deliberately generous (autograd keeps more
than the layer outputs), so a chunk that fits the estimate fits the machine.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import torch
from torch import nn

from bnmem.errors import BnmemError
from bnmem.measure.hooks import removed_after

# Default budget: this fraction of the memory available when the measurement starts.
DEFAULT_FRACTION = 0.5
# Autograd keeps roughly the layer outputs (plus inputs of nonlinearities) and the backward
# holds a gradient of the same size: this multiple of the summed layer outputs covers both.
ACTIVATION_FACTOR = 4
MAX_CHUNK = 256
_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
          "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}


def parse_size(text: str | int | float) -> int:
    """Bytes from ``"8GB"``, ``"512MiB"``, ``"1.5g"`` or a plain number of bytes (units are powers of 1024).

    Raises:
        BnmemError: not a positive size.
    """
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        if match is None or match.group(2).lower() not in _UNITS:
            raise BnmemError(f"--max-memory: cannot read {text!r} as a size (e.g. 8GB, 512MB, 1.5G)")
        value, unit = float(match.group(1)), match.group(2).lower()
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise BnmemError(f"--max-memory must be positive, got {text!r}")
    return size


def fmt_bytes(n: float, base: int = 1024) -> str:
    """``1.2 GB``-style text (powers of ``base``: 1024 for memory, 1000 for disk estimates)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < base:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= base
    return f"{n:.1f} TB"


def available_memory(device: torch.device | str = "cpu") -> int:
    """Bytes free now: the GPU's free memory, or the system's available RAM (MemAvailable)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def default_budget(device: torch.device | str = "cpu") -> int:
    """A safe share (:data:`DEFAULT_FRACTION`) of the memory available on ``device``."""
    return int(DEFAULT_FRACTION * available_memory(device))


@dataclass
class Footprint:
    """Sizes, in bytes at the model's dtype, that set the memory of the per-sample paths.

    Attributes:
        params: trainable parameters (one per-sample gradient).
        model: parameters and buffers.
        activations: summed outputs of every leaf module for one example.
        patches: unfolded convolution inputs for one example (ghost).
        layer_temp: the largest per-layer Gram matrices or per-sample weight gradient of one example (ghost).
        local_params: parameters measured by per-module vmap (ghost, per example).
    """

    params: int
    model: int
    activations: int
    patches: int = 0
    layer_temp: int = 0
    local_params: int = 0

    def per_example(self, method: str) -> int:
        """Bytes one more example in a chunk costs on ``method`` (``ghost``, ``vmap``, ``loop``)."""
        act = ACTIVATION_FACTOR * self.activations
        if method == "vmap":
            # the per-sample gradients, autograd's copy of them, and allocator slack (measured:
            # 2x alone ran 3% over a 400 MB budget on a 4.5 M-parameter MLP)
            return 3 * self.params + act
        if method == "ghost":
            # + the tapped copies of the layer outputs (one more activation's worth)
            return act + self.activations + self.patches + self.layer_temp + 2 * self.local_params
        return 0

    def fixed(self, method: str) -> int:
        """Bytes needed whatever the chunk: the model, and for ``loop`` one example's gradient and graph."""
        if method == "loop":
            return self.model + 2 * self.params + ACTIVATION_FACTOR * self.activations
        return self.model


def _gram_or_grad(length: int, d_in: int, d_out: int) -> int:
    """Elements of the per-example temporary the ghost identity builds (same rule as its choice of route)."""
    if length * length * (d_in + d_out) < length * d_in * d_out:
        return 2 * length * length
    return d_in * d_out


@torch.no_grad()
def footprint(model: nn.Module, x1: torch.Tensor) -> Footprint:
    """Measure :class:`Footprint` with one forward pass of one example (eval mode; hooks on every module).

    Args:
        model: the model, in the dtype and on the device of the measurement.
        x1: one example, batched (1, ...), same dtype and device.
    """
    from bnmem.measure.ghost import layer_kind
    from bnmem.measure.ghost_layers import own_params

    params = [p for p in model.parameters() if p.requires_grad]
    size = params[0].element_size() if params else 8
    fp = Footprint(params=sum(p.numel() for p in params) * size,
                   model=sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers())),
                   activations=0)
    if isinstance(model, torch.jit.ScriptModule):
        return fp  # no hooks on TorchScript modules; the loop is all that runs on them
    temps = [0]

    def hook(m: nn.Module, args: tuple, out: object) -> None:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if not any(True for _ in m.children()):
            fp.activations += sum(o.numel() * o.element_size() for o in outs if isinstance(o, torch.Tensor))
        if not own_params(m):
            return
        kind = layer_kind(m)
        a = args[0] if args and isinstance(args[0], torch.Tensor) else None
        o = outs[0] if isinstance(outs[0], torch.Tensor) else None
        if kind in ("conv", "grouped_conv") and o is not None and a is not None:
            length = o.shape[-1] * o.shape[-2]
            k = m.kernel_size[0] * m.kernel_size[1]
            fp.patches += length * k * m.in_channels * size
            g = m.groups
            temps.append(g * _gram_or_grad(length, k * m.in_channels // g, m.out_channels // g) * size)
        elif kind == "linear" and a is not None and a.ndim > 2:
            length = a.numel() // a.shape[-1]
            temps.append(_gram_or_grad(length, m.in_features, m.out_features) * size)
        elif kind == "attention" and a is not None:
            length = a.numel() // a.shape[-1]
            # three tapped projections, their copies, and the attention matrix per head
            fp.activations += 6 * length * m.embed_dim * size + m.num_heads * length * length * size
            temps.append(_gram_or_grad(length, m.embed_dim, m.embed_dim) * size)
        elif kind == "embedding" and a is not None:
            temps.append(a.numel() ** 2 * size)
        elif kind == "local":
            fp.local_params += sum(p.numel() for p in own_params(m).values()) * size

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    with removed_after(handles):
        was = model.training
        model.eval()
        model(x1)
        model.train(was)
    fp.layer_temp = max(temps)
    return fp


def fit_chunk(fp: Footprint, method: str, budget: int, requested: int | None = None) -> int:
    """Examples per vectorized call of ``method`` that fit ``budget`` bytes.

    Args:
        fp: the model's footprint.
        method: ``ghost``, ``vmap`` or ``loop`` (always 1).
        budget: bytes.
        requested: an upper bound asked by the caller (None: :data:`MAX_CHUNK`).

    Returns:
        The chunk size, >= 1.

    Raises:
        BnmemError: the budget cannot hold even one example.
    """
    fixed, per = fp.fixed(method), fp.per_example(method)
    if fixed + max(per, 1) > budget:
        raise BnmemError(
            f"--max-memory {fmt_bytes(budget)} cannot hold one example of the {method} gradient-norm path "
            f"(the float64 model takes {fmt_bytes(fp.model)}, one example about {fmt_bytes(fixed + per - fp.model)}); "
            f"give at least {fmt_bytes(fixed + per)}"
            # `--max-memory 8` is 8 bytes: show the unit the user most likely meant
            + (f" (a number without a unit is bytes: --max-memory {budget}GB is {budget} gigabytes)"
               if budget < 2**20 else ""))
    if method == "loop":
        return 1
    cap = MAX_CHUNK if requested is None else requested
    return max(1, min(cap, math.floor((budget - fixed) / max(per, 1))))
