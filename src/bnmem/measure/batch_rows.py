"""Batch-definition per-sample gradient norms from per-row layer-output gradients ("rows").

In a training-mode BN batch B, example i's own loss ``loss_i`` depends on every
example j of the batch through the batch statistics, so its gradient with respect
to a layer's weight sums over the whole batch: for a Linear layer with inputs
``a_j`` and output gradients ``g_ij = ∂loss_i/∂out_j``, ∇W loss_i = Σ_j g_ij a_jᵀ,
i.e. ``G_iᵀ A`` with A (B, d_in) shared by all rows and G_i (B, d_out) row i's
output gradients. A conv is the same with A the unfolded input patches
(B·L, Cin·k·k); BN's affine gradients are ∇γ = Σ_{j, positions} g_ij·x̂_j and
∇β = Σ g_ij with x̂ normalized by the batch statistics.

So one forward (convs run as patches @ kernel, keeping the patches) and one
backward per row *with respect to the layer outputs only* give every row's
parameter gradient as one GEMM per layer over all rows, instead of a full
parameter backward per row (the per-row conv weight kernels dominated the old
path on small images). Exact up to float64 summation order; the slow per-row
loop (:func:`bnmem.measure.gradnorms.batch_sq_norms_one` with ``loop``) is the
oracle it is tested against, and the first batch of every call is self-checked
against it on two rows.

Layers covered: ``nn.Linear`` on (N, d) inputs, ungrouped zero-padded ``nn.Conv2d``,
BatchNorm (training-mode batch statistics) and any parameter-free module. Anything
else raises :class:`~bnmem.measure.ghost.GhostUnsupported`; callers use the
batched Jacobian then.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnmem.measure.ghost import GhostUnsupported, _layer_outputs, _recorded_forward
from bnmem.measure.ghost_layers import conv_patches, is_plain, own_params, swapped_forwards, symmetric_padding

# Convs whose dense matrix (input size x output size) has at most this many entries run as one GEMM.
_DENSE_CONV = 2**22
# Rows per stacked chunk: at most ~256 MB of per-row layer-output gradients and per-row weight gradients.
_ROW_BYTES = 256 * 2**20


def rows_unsupported(model: nn.Module) -> str | None:
    """Why :func:`rows_sq_norms` cannot measure ``model`` (None when it can)."""
    for name, m in model.named_modules():
        if not own_params(m):
            continue
        label = f"{name or 'model'} ({type(m).__name__})"
        if is_plain(m, nn.Linear):
            continue
        if is_plain(m, nn.Conv2d):
            if m.groups != 1 or m.padding_mode != "zeros" or symmetric_padding(m) is None:
                return f"{label}: grouped, non-zero or uneven padding"
            continue
        if is_plain(m, _BatchNorm) and (m.training or m.running_mean is None):
            continue
        return f"{label}: no per-row identity for this layer"
    return None


def _dense_conv(m: nn.Module):
    """A forward for a small-image conv as one GEMM with its dense (C·H·W, Cout·Ho·Wo) matrix.

    The per-row backward then takes the conv's input gradient as a GEMM too (the
    float64 conv kernels loop over the examples; on 8x8 digits that GEMM was ~6x
    faster). The matrix holds the weights themselves (the conv of basis images adds
    only zeros), so only the summation order changes. It is a constant: the weight
    gradients come from the patches identity, not from autograd.
    """
    if not is_plain(m, nn.Conv2d):
        return None
    cache: dict[tuple[int, ...], torch.Tensor] = {}
    (ph, pw), (kh, kw), (sh, sw), (dh, dw) = symmetric_padding(m), m.kernel_size, m.stride, m.dilation

    def forward(x: torch.Tensor) -> torch.Tensor:
        c, h, w = x.shape[1:]
        ho, wo = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if c * h * w * m.out_channels * ho * wo > _DENSE_CONV:
            return m._conv_forward(x, m.weight, m.bias)
        if (c, h, w) not in cache:
            basis = torch.eye(c * h * w, dtype=x.dtype, device=x.device).view(-1, c, h, w)
            cache[(c, h, w)] = F.conv2d(basis, m.weight.detach(), None, m.stride, (ph, pw), m.dilation).flatten(1)
        out = (x.flatten(1) @ cache[(c, h, w)]).view(x.shape[0], m.out_channels, ho, wo)
        return out if m.bias is None else out + m.bias.view(1, -1, 1, 1)

    return forward


def _sq(t: torch.Tensor) -> torch.Tensor:
    """Squares in float64 (a float32 model's gradients are squared and summed as the old paths did)."""
    return t.double().pow(2)


def _zeros(r: int, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros(r, dtype=torch.float64, device=like.device)


def _channel_first(g: torch.Tensor) -> torch.Tensor:
    """One row's layer-output gradient (B, C, ...) as (C, B, positions): the layout its GEMM wants."""
    return g.reshape(g.shape[0], g.shape[1], -1).transpose(0, 1)


class _RowBuffer:
    """One layer's per-row output gradients, stored as each row arrives (no stacked copy to permute later).

    Linear and conv: (R, C, B, positions), so that row r's weight gradient Σ_j g_rj a_jᵀ is one
    slice of a single (R·C, B·positions) @ (B·positions, d_in) GEMM. BN: (C, R, B·positions), so that
    Σ_{j, positions} g_rj·x̂_j is one batched matrix-vector product over the channels.
    """

    def __init__(self, m: nn.Module, out: torch.Tensor, n_rows: int) -> None:
        self.module = m
        b, c = out.shape[0], out.shape[1]
        length = out[0, 0].numel()
        self.bn = isinstance(m, _BatchNorm)
        shape = (c, n_rows, b, length) if self.bn else (n_rows, c, b, length)
        self.g = out.new_empty(shape)  # every row's slice is written by put (zeroing first cost more than the GEMMs)

    def put(self, r: int, g: torch.Tensor | None) -> None:
        dest = self.g[:, r] if self.bn else self.g[r]
        if g is None:
            dest.zero_()  # a layer the row does not reach: zero gradient
        else:
            dest.copy_(_channel_first(g))

    def sq_norms(self, a: torch.Tensor, cols: torch.Tensor | None) -> torch.Tensor:
        """(R,) squared norms of the rows' gradients of this layer's parameters; ``a`` its input."""
        m, g = self.module, self.g
        if self.bn:
            c, r = g.shape[:2]
            g = g.view(c, r, -1)
            out = _sq(g.sum(2)).sum(0) if m.bias is not None and m.bias.requires_grad else _zeros(r, g)
            if m.weight is not None and m.weight.requires_grad:
                xhat = _channel_first(F.batch_norm(a, None, None, training=True, eps=m.eps)).reshape(c, -1, 1)
                out = out + _sq(torch.bmm(g, xhat)).sum(dim=(0, 2))
            return out
        r, c = g.shape[:2]
        out = _sq(g.sum(dim=(2, 3))).sum(1) if m.bias is not None and m.bias.requires_grad else _zeros(r, g)
        if m.weight.requires_grad:
            if isinstance(m, nn.Conv2d):
                inp = conv_patches(m, a) if cols is None else cols  # (B, L, Cin·k·k)
            elif a.ndim == 2:
                inp = a
            else:
                raise GhostUnsupported("a Linear layer on inputs with extra dims")
            w = g.view(r * c, -1) @ inp.reshape(-1, inp.shape[-1])  # rows' weight gradients, (R·C, d_in)
            out = out + torch.linalg.vector_norm(w.view(r, -1), dim=1, dtype=torch.float64).pow(2)
        return out


def rows_sq_norms(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, rows: list[int] | None = None,
                  max_bytes: int | None = None) -> torch.Tensor:
    """Squared batch-definition norms of (some of) the examples of one batch, by per-row layer-output gradients.

    The model must already be in BN batch mode (see :func:`bnmem.measure.predict.bn_query_mode`);
    its dtype sets the precision.

    Args:
        model: the model (see :func:`rows_unsupported`).
        xb, yb: one batch.
        rows: positions in the batch whose norms are wanted (default: all); the batch statistics
            are always those of the whole batch.
        max_bytes: memory for the stacked per-row gradients (default and cap: 256 MB); rows are
            processed in chunks that fit, at least one row at a time.

    Returns:
        (len(rows),) float64 squared norms of ∇θ loss_i with the forward pass normalized by this batch
        (a float32 model's gradients in float32, squared and summed in float64).

    Raises:
        GhostUnsupported: a layer this path does not cover, or one used unusually.
    """
    reason = rows_unsupported(model)
    if reason is not None:
        raise GhostUnsupported(reason)
    layers = [(n, m) for n, m in model.named_modules() if own_params(m)]
    names = [n for n, _ in layers]
    with swapped_forwards(model, _dense_conv):
        losses, records, patches, _ = _recorded_forward(model, xb, yb, layers, reduction="none")
    outputs = _layer_outputs(names, records, {})
    rows = list(range(losses.shape[0])) if rows is None else list(rows)
    per_row = xb.element_size() * (sum(o.numel() for o in outputs) + sum(p.numel() for p in model.parameters()))
    chunk = max(1, min(_ROW_BYTES, _ROW_BYTES if max_bytes is None else max_bytes) // per_row)
    total = [_rows_chunk(names, records, patches, outputs, losses, rows[s:s + chunk], s + chunk >= len(rows))
             for s in range(0, len(rows), chunk)]
    return torch.cat(total).detach() if total else _zeros(0, xb)


def _rows_chunk(names: list[str], records: dict, patches: dict, outputs: list[torch.Tensor], losses: torch.Tensor,
                rows: list[int], last: bool) -> torch.Tensor:
    """The squared norms of ``rows``: one backward per row to the layer outputs, then one GEMM per layer."""
    buffers = [_RowBuffer(records[n].module, out, len(rows)) for n, out in zip(names, outputs)]
    for k, i in enumerate(rows):
        grads = torch.autograd.grad(losses[i], outputs, retain_graph=not (last and k == len(rows) - 1),
                                    allow_unused=True)
        for buf, g in zip(buffers, grads):
            buf.put(k, g)
    total = _zeros(len(rows), losses)
    for n, buf in zip(names, buffers):
        total += buf.sq_norms(records[n].inp[0], patches.get(records[n].module))
    return total.detach()
