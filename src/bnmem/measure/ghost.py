"""Per-sample squared gradient norms from one batched forward/backward ("ghost norms").

The identities used for fast DP clipping: when a layer's parameters act on each
example separately, the per-sample gradient of a parameter is built from the
layer's input activations ``a_i`` and the gradient ``g_i`` of the summed loss
with respect to the layer's output, both of which one ordinary batched
forward/backward provides:

* ``nn.Linear`` on (N, in) inputs: ∇W_i = g_i a_iᵀ, so ||∇W_i||² = ||a_i||²·||g_i||²
  and ||∇b_i||² = ||g_i||². With extra (sequence) dims, ∇W_i = G_iᵀ A_i.
* ``nn.Conv2d`` via unfold: with A_i (L, Cin·k·k) the unfolded input patches and
  G_i (L, Cout) the output gradients at the L output positions, ∇W_i = G_iᵀ A_i.
  ||G_iᵀ A_i||_F² is computed either as the Gram form ⟨A_iA_iᵀ, G_iG_iᵀ⟩
  (cost L²·(d_in + d_out)) or by materializing the small per-sample gradient
  (cost L·d_in·d_out), whichever is cheaper. ||∇b_i||² = ||Σ_L G_i||².
  During the measurement each Conv2d's forward runs as patches @ kernel (one
  GEMM for the batch, :class:`_PatchConv`), so the patches the norm needs come
  for free instead of a second unfold; in float64 on CPU this is also faster
  than PyTorch's per-example im2col convolution.
* Affine parameters of normalization layers that normalize each example on its
  own (BatchNorm in eval mode with running statistics, GroupNorm, LayerNorm):
  ∇γ_i = Σ_spatial g_i·x̂_i and ∇β_i = Σ_spatial g_i, computed directly.

Valid only when every example's loss depends on its own forward pass alone (BN in
eval mode): the gradient of the summed loss with respect to example i's layer
output then equals that of loss_i. Layers these identities do not cover raise
:class:`GhostUnsupported`, and callers fall back to ``torch.func.vmap``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm


class GhostUnsupported(ValueError):
    """The model has a layer (or a use of a layer) the ghost identities do not cover."""


def _own_params(module: nn.Module) -> dict[str, nn.Parameter]:
    return {n: p for n, p in module.named_parameters(recurse=False) if p.requires_grad}


def unsupported_reason(model: nn.Module) -> str | None:
    """Why :func:`ghost_sq_norms` cannot handle ``model`` (None when it can).

    A static check on layer types and settings; in-place modifications of a
    layer's input or output are only detected while running.

    Args:
        model: the model (eval-mode definition is assumed).

    Returns:
        A short reason, or None.
    """
    for name, m in model.named_modules():
        if not _own_params(m):
            continue
        label = f"{name or 'model'} ({type(m).__name__})"
        if type(m) is nn.Linear:
            continue
        if type(m) is nn.Conv2d:
            if m.groups != 1:
                return f"{label}: grouped convolution"
            if m.padding_mode != "zeros":
                return f"{label}: padding_mode {m.padding_mode!r}"
            if isinstance(m.padding, str) and m.padding != "valid":
                return f"{label}: padding {m.padding!r}"
            continue
        if isinstance(m, _BatchNorm) and not isinstance(m, _InstanceNorm):
            if m.training or not m.track_running_stats or m.running_var is None:
                # Batch statistics couple the examples of a batch: no per-example identity.
                return f"{label}: BatchNorm not in eval mode with running statistics"
            continue
        if type(m) in (nn.GroupNorm, nn.LayerNorm):
            continue
        return f"{label}: no ghost-norm identity for this layer type"
    return None


@dataclass
class _Record:
    module: nn.Module
    inp: torch.Tensor
    out: torch.Tensor
    versions: tuple[int, int]
    calls: int = 1


def _frob_sq_of_gt_a(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-sample ||G_iᵀ A_i||_F² for A (N, L, d_in), G (N, L, d_out), by the cheaper route."""
    n, length, d_in = a.shape
    d_out = g.shape[2]
    if length * length * (d_in + d_out) < length * d_in * d_out:
        # Gram form: never forms the d_out x d_in per-sample gradient.
        return (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum(dim=(1, 2))
    # vector_norm reduces without allocating the squared copy of the per-sample gradients.
    return torch.linalg.vector_norm(torch.bmm(g.transpose(1, 2), a), dim=(1, 2)).pow(2)


def _linear(m: nn.Linear, a: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    if a.ndim == 2:
        g2 = g.pow(2).sum(1)
        if m.weight.requires_grad:
            out["weight"] = a.pow(2).sum(1) * g2
        if m.bias is not None and m.bias.requires_grad:
            out["bias"] = g2
        return out
    a3, g3 = a.reshape(a.shape[0], -1, a.shape[-1]), g.reshape(g.shape[0], -1, g.shape[-1])
    if m.weight.requires_grad:
        out["weight"] = _frob_sq_of_gt_a(a3, g3)
    if m.bias is not None and m.bias.requires_grad:
        out["bias"] = g3.sum(1).pow(2).sum(1)
    return out


def _padding(m: nn.Conv2d) -> tuple[int, int]:
    return (0, 0) if m.padding == "valid" else tuple(m.padding)


def conv_patches(m: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """Input patches of a conv, (N, L, kh·kw·Cin) with L = Ho·Wo, ordered (kh, kw, c).

    Built as one strided view of the zero-padded NHWC input and one copy, for the
    whole batch (F.unfold loops over the examples).
    """
    ph, pw = _padding(m)
    xp = F.pad(x, (pw, pw, ph, ph)).permute(0, 2, 3, 1).contiguous()  # (N, Hp, Wp, C)
    n, hp, wp, c = xp.shape
    (kh, kw), (sh, sw), (dh, dw) = m.kernel_size, m.stride, m.dilation
    ho, wo = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    st = xp.stride()
    view = xp.as_strided((n, ho, wo, kh, kw, c), (st[0], st[1] * sh, st[2] * sw, st[1] * dh, st[2] * dw, st[3]))
    return view.reshape(n, ho * wo, kh * kw * c)


class _PatchConv(torch.autograd.Function):
    """Conv2d as patches @ kernel (one GEMM for the batch), keeping the patches for the ghost norm.

    Backward returns only the input gradient: the ghost path differentiates with
    respect to layer outputs, never asks for the weights' (summed) gradient.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, m: nn.Conv2d,
                store: dict) -> torch.Tensor:
        cols = conv_patches(m, x)
        n, length, k = cols.shape
        kernel = weight.permute(0, 2, 3, 1).reshape(weight.shape[0], k)  # (Cout, kh·kw·Cin), patch order
        ph, _ = _padding(m)
        (kh, _), (sh, _), (dh, _) = m.kernel_size, m.stride, m.dilation
        ho = (x.shape[2] + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        # A channels_last output (as the trained model gives) whose NHWC memory is the GEMM's
        # result; allocated as a base tensor, not a view, so in-place ops on it stay legal.
        out = torch.empty((n, weight.shape[0], ho, length // ho), dtype=x.dtype, device=x.device,
                          memory_format=torch.channels_last)
        flat_out = out.permute(0, 2, 3, 1).view(n * length, -1)
        flat = cols.view(n * length, k)
        if bias is not None:
            torch.addmm(bias, flat, kernel.t(), out=flat_out)
        else:
            torch.mm(flat, kernel.t(), out=flat_out)
        store[m] = cols
        ctx.save_for_backward(weight)
        ctx.meta = (x.shape, m.stride, _padding(m), m.dilation)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        gx = None
        if ctx.needs_input_grad[0]:
            # The conv's own input-gradient kernel measured faster here than a GEMM + col2im.
            (weight,) = ctx.saved_tensors
            shape, stride, padding, dilation = ctx.meta
            gx = torch.nn.grad.conv2d_input(shape, weight, grad, stride, padding, dilation)
        return gx, None, None, None, None


@contextmanager
def patch_convs(model: nn.Module, store: dict) -> Iterator[None]:
    """Route every Conv2d's forward through :class:`_PatchConv` for the duration.

    Modules with an instance-level ``forward`` already (patched by someone else)
    are left alone; their norms fall back to ``F.unfold``.
    """
    patched = []
    for m in model.modules():
        if type(m) is nn.Conv2d and "forward" not in vars(m):
            m.forward = (lambda mod: lambda x: _PatchConv.apply(x, mod.weight, mod.bias, mod, store))(m)
            patched.append(m)
    try:
        yield
    finally:
        for m in patched:
            del m.forward


def _conv2d(m: nn.Conv2d, a: torch.Tensor, g: torch.Tensor, cols: torch.Tensor | None) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    if m.weight.requires_grad:
        if cols is None:
            cols = conv_patches(m, a)
        # (N, Ho, Wo, Cout): free for the channels_last gradients of a patched conv.
        gl = g.permute(0, 2, 3, 1).reshape(g.shape[0], -1, g.shape[1])
        out["weight"] = _frob_sq_of_gt_a(cols, gl)
    gf = g.flatten(2)  # (N, Cout, L)
    if m.bias is not None and m.bias.requires_grad:
        out["bias"] = gf.sum(2).pow(2).sum(1)
    return out


def _normalized(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x̂: the layer's input normalized exactly as the layer does, before its affine map."""
    if isinstance(m, _BatchNorm):
        shape = [1, -1] + [1] * (x.ndim - 2)
        return (x - m.running_mean.view(shape)) / torch.sqrt(m.running_var.view(shape) + m.eps)
    if isinstance(m, nn.GroupNorm):
        return F.group_norm(x, m.num_groups, eps=m.eps)
    return F.layer_norm(x, m.normalized_shape, eps=m.eps)


def _norm_affine(m: nn.Module, a: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    if isinstance(m, nn.LayerNorm):
        # Affine over the trailing normalized dims; per-sample grads sum over the dims in between.
        k = len(m.normalized_shape)
        mid = tuple(range(1, g.ndim - k))
    else:
        # Per-channel affine on dim 1; sum over the spatial dims.
        mid = tuple(range(2, g.ndim))

    def per_sample(t: torch.Tensor) -> torch.Tensor:
        t = t.sum(dim=mid) if mid else t
        return t.pow(2).flatten(1).sum(1)

    out: dict[str, torch.Tensor] = {}
    if getattr(m, "weight", None) is not None and m.weight.requires_grad:
        out["weight"] = per_sample(g * _normalized(m, a))
    if getattr(m, "bias", None) is not None and m.bias.requires_grad:
        out["bias"] = per_sample(g)
    return out


def ghost_sq_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-sample squared gradient norm of every trainable parameter, from one forward/backward.

    The loss of example i is ``cross_entropy(model(x)_i, y_i)`` (not divided by
    the batch size). The model must be in eval mode (BN with running
    statistics); its dtype sets the precision (use a float64 copy).

    Args:
        model: the model, every parameterized layer covered by the identities
            (see :func:`unsupported_reason`).
        x: inputs (N, ...) in the model's dtype and device.
        y: int64 labels (N,).

    Returns:
        ``{parameter_name: tensor (N,)}`` of squared norms, for every parameter
        with ``requires_grad``; their sum over names is the squared norm of the
        full per-sample gradient.

    Raises:
        GhostUnsupported: a layer is not covered, is called more than once per
            forward (weight sharing), or has its input/output modified in place.
    """
    reason = unsupported_reason(model)
    if reason is not None:
        raise GhostUnsupported(reason)
    records: dict[str, _Record] = {}

    def make_hook(name: str):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            if name in records:
                records[name].calls += 1
                return
            inp = args[0]
            records[name] = _Record(module, inp.detach(), output, (inp._version, output._version))

        return hook

    layers = [(n, m) for n, m in model.named_modules() if _own_params(m)]
    handles = [m.register_forward_hook(make_hook(n)) for n, m in layers]
    patches: dict[nn.Module, torch.Tensor] = {}
    try:
        with torch.enable_grad(), patch_convs(model, patches):
            logits = model(x)
            loss = F.cross_entropy(logits, y, reduction="sum")
    finally:
        for h in handles:
            h.remove()
    names = [n for n, _ in layers]
    missing = [n for n in names if n not in records]
    if missing:
        # An unused layer has zero gradient; a layer reached some other way would be missed.
        raise GhostUnsupported(f"layers not called through their forward: {missing}")
    for n in names:
        r = records[n]
        if r.calls != 1:
            raise GhostUnsupported(f"{n} is called {r.calls} times per forward (shared weights)")
        if (r.inp._version, r.out._version) != r.versions:
            raise GhostUnsupported(f"{n}: its input or output is modified in place")
    grads = torch.autograd.grad(loss, [records[n].out for n in names])
    result: dict[str, torch.Tensor] = {}
    for n, g in zip(names, grads):
        m, a = records[n].module, records[n].inp
        if isinstance(m, nn.Linear):
            parts = _linear(m, a, g)
        elif isinstance(m, nn.Conv2d):
            parts = _conv2d(m, a, g, patches.get(m))
        else:
            parts = _norm_affine(m, a, g)
        for pname, v in parts.items():
            result[f"{n}.{pname}" if n else pname] = v.detach()
    return result
