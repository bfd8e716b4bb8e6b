"""The per-layer identities of the ghost norms: per-sample squared gradient norms of one layer's parameters.

Each function takes a layer, its input ``a`` and the gradient ``g`` of the
summed loss with respect to its output (both batched, example first) and
returns ``{parameter_name: (N,) squared norms}``; see :mod:`bnmem.measure.ghost`
for when these equal the per-example gradients.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn.modules.batchnorm import _BatchNorm


def own_params(module: nn.Module) -> dict[str, nn.Parameter]:
    """The trainable parameters a module holds itself (not its children's)."""
    return {n: p for n, p in module.named_parameters(recurse=False) if p.requires_grad}


def is_plain(m: nn.Module, kind: type) -> bool:
    """``m`` is a ``kind`` (or a subclass) that runs ``kind``'s own forward, so ``kind``'s identity applies."""
    return isinstance(m, kind) and type(m).forward is kind.forward


def frob_sq_of_gt_a(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-sample ||G_iᵀ A_i||_F² for A (N, L, d_in), G (N, L, d_out), by the cheaper route."""
    n, length, d_in = a.shape
    d_out = g.shape[2]
    if length * length * (d_in + d_out) < length * d_in * d_out:
        # Gram form: never forms the d_out x d_in per-sample gradient.
        return (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum(dim=(1, 2))
    # vector_norm reduces without allocating the squared copy of the per-sample gradients.
    return torch.linalg.vector_norm(torch.bmm(g.transpose(1, 2), a), dim=(1, 2)).pow(2)


def linear_sq(m: nn.Linear, a: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
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
        out["weight"] = frob_sq_of_gt_a(a3, g3)
    if m.bias is not None and m.bias.requires_grad:
        out["bias"] = g3.sum(1).pow(2).sum(1)
    return out


def symmetric_padding(m: nn.Conv2d) -> tuple[int, int] | None:
    """The conv's zero padding per side as (ph, pw); None for ``"same"`` that pads unevenly (even kernels)."""
    if m.padding == "valid":
        return (0, 0)
    if m.padding == "same":
        total = [d * (k - 1) for d, k in zip(m.dilation, m.kernel_size)]
        return None if any(t % 2 for t in total) else (total[0] // 2, total[1] // 2)
    return tuple(m.padding)


def _padding(m: nn.Conv2d) -> tuple[int, int]:
    pad = symmetric_padding(m)
    if pad is None:
        raise ValueError(f"{m}: uneven 'same' padding")  # unsupported_reason refuses these first
    return pad


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
def swapped_forwards(model: nn.Module, make_forward: Callable[[nn.Module], Callable | None]) -> Iterator[None]:
    """Give every module for which ``make_forward(module)`` returns a function that instance-level
    ``forward`` for the duration, then restore the class's. Modules that already have an
    instance-level ``forward`` (patched by someone else) are left alone."""
    patched = []
    for m in model.modules():
        if "forward" in vars(m):
            continue
        fn = make_forward(m)
        if fn is not None:
            m.forward = fn
            patched.append(m)
    try:
        yield
    finally:
        for m in patched:
            del m.forward


def patch_convs(model: nn.Module, store: dict):
    """Route every Conv2d's forward through :class:`_PatchConv` for the duration (a context manager).

    Grouped convolutions keep their own forward (their patches are built per group
    afterwards); convs patched by someone else fall back to ``F.unfold``.
    """
    def forward(m: nn.Module) -> Callable | None:
        if is_plain(m, nn.Conv2d) and m.groups == 1:
            return lambda x: _PatchConv.apply(x, m.weight, m.bias, m, store)
        return None

    return swapped_forwards(model, forward)


def conv2d_sq(m: nn.Conv2d, a: torch.Tensor, g: torch.Tensor, cols: torch.Tensor | None) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    if m.weight.requires_grad:
        if cols is None:
            cols = conv_patches(m, a)
        # (N, Ho, Wo, Cout): free for the channels_last gradients of a patched conv.
        gl = g.permute(0, 2, 3, 1).reshape(g.shape[0], -1, g.shape[1])
        out["weight"] = frob_sq_of_gt_a(cols, gl)
    gf = g.flatten(2)  # (N, Cout, L)
    if m.bias is not None and m.bias.requires_grad:
        out["bias"] = gf.sum(2).pow(2).sum(1)
    return out


def grouped_conv2d_sq(m: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    """A grouped (or depthwise) conv: the unfold identity per group, summed over the groups.

    Group k maps input channels [k·Cin/G, (k+1)·Cin/G) to output channels
    [k·Cout/G, (k+1)·Cout/G); its weight slice's per-sample gradient is
    G_{i,k}ᵀ A_{i,k}, and the slices are disjoint, so the squared norms add.
    """
    out: dict[str, torch.Tensor] = {}
    n, groups = a.shape[0], m.groups
    if m.weight.requires_grad:
        cols = conv_patches(m, a)  # (N, L, kh·kw·Cin), ordered (kh, kw, c)
        length = cols.shape[1]
        cin_g, cout_g = m.in_channels // groups, m.out_channels // groups
        cols = cols.view(n, length, -1, groups, cin_g).permute(0, 3, 1, 2, 4).reshape(n * groups, length, -1)
        gl = g.permute(0, 2, 3, 1).reshape(n, length, groups, cout_g).permute(0, 2, 1, 3).reshape(
            n * groups, length, cout_g)
        out["weight"] = frob_sq_of_gt_a(cols, gl).view(n, groups).sum(1)
    if m.bias is not None and m.bias.requires_grad:
        out["bias"] = g.flatten(2).sum(2).pow(2).sum(1)
    return out


def _normalized(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x̂: the layer's input normalized exactly as the layer does, before its affine map."""
    if isinstance(m, _BatchNorm):
        shape = [1, -1] + [1] * (x.ndim - 2)
        return (x - m.running_mean.view(shape)) / torch.sqrt(m.running_var.view(shape) + m.eps)
    if isinstance(m, nn.GroupNorm):
        return F.group_norm(x, m.num_groups, eps=m.eps)
    return F.layer_norm(x, m.normalized_shape, eps=m.eps)


def norm_affine_sq(m: nn.Module, a: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    """BN (eval), GroupNorm, LayerNorm: ∇γ_i = Σ_positions g_i·x̂_i, ∇β_i = Σ_positions g_i.

    For LayerNorm over the trailing dims of an (N, L, D) sequence (or (N, H, W, C)
    channels-last maps) the affine is shared by every position, so the sum runs
    over the dims between the batch and the normalized ones.
    """
    if isinstance(m, nn.LayerNorm):
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


def embedding_sq(m: nn.Embedding, idx: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    """``nn.Embedding``: row r of ∇W_i is the sum of g_i at the positions where idx_i = r, so
    ||∇W_i||² = Σ_{t,t'} [idx_t = idx_t'] ⟨g_t, g_t'⟩ (positions at ``padding_idx`` get no gradient)."""
    if not m.weight.requires_grad:
        return {}
    n = idx.shape[0]
    idx, g = idx.reshape(n, -1), g.reshape(n, -1, g.shape[-1])
    same = idx[:, :, None] == idx[:, None, :]
    if m.padding_idx is not None:
        keep = idx != m.padding_idx
        same = same & keep[:, :, None] & keep[:, None, :]
    return {"weight": (torch.bmm(g, g.transpose(1, 2)) * same).sum(dim=(1, 2))}


def local_vmap_sq(m: nn.Module, args: tuple[torch.Tensor, ...], g: torch.Tensor) -> dict[str, torch.Tensor]:
    """Any other layer that treats each example on its own: vmap over the layer alone.

    Per-sample gradients of the layer's *own* parameters (a LayerNorm2d's affine,
    a layer scale, a class token or position embedding, ...) are the vector-Jacobian
    products of g_i through this one module, one example at a time, vectorized.
    Memory: N x the module's own parameters (children keep their values and are
    not differentiated).
    """
    own = {n: p.detach() for n, p in own_params(m).items()}

    def contracted(params: dict[str, torch.Tensor], xs: tuple[torch.Tensor, ...], gi: torch.Tensor) -> torch.Tensor:
        out = functional_call(m, params, tuple(x.unsqueeze(0) for x in xs))
        return (out * gi.unsqueeze(0)).sum()

    with warnings.catch_warnings():
        # attention kernels without a vmap batching rule run through torch's slower fallback: still exact
        warnings.filterwarnings("ignore", message=".*performance drop because we have not yet implemented the batching")
        grads = vmap(grad(contracted), in_dims=(None, 0, 0))(own, args, g)
    return {n: torch.linalg.vector_norm(v.reshape(v.shape[0], -1), dim=1).pow(2) for n, v in grads.items()}
