"""Batch-definition per-sample gradient norms from per-row layer-output gradients ("rows").

In a training-mode BN batch B, example i's own loss ``loss_i`` depends on every
example j of the batch through the batch statistics, so its gradient with respect
to a layer's weight sums over the whole batch: for a Linear layer with inputs
``a_j`` and output gradients ``g_ij = ∂loss_i/∂out_j``, ∇W loss_i = Σ_j g_ij a_jᵀ,
i.e. ``G_iᵀ A`` with A (B, d_in) shared by all rows and G_i (B, d_out) row i's
output gradients. A conv is the same with A the unfolded input patches
(B·L, Cin·k·k); BN's affine gradients are ∇γ = Σ_{j, positions} g_ij·x̂_j and
∇β = Σ g_ij with x̂ normalized by the batch statistics.

So one forward (small-image convs run as one dense GEMM, keeping the patches)
and one batched backward (autograd's ``is_grads_batched``, up to 32 rows at a
time) *with respect to the layer outputs only* give every row's parameter
gradient as one GEMM per layer over all rows, instead of a full parameter
backward per row (the per-row conv weight kernels dominated that path on small
images). A row may be any weighted sum of the batch's losses
(:func:`stacked_rows`): claim 7's push pass takes the outliers' and everyone's
summed loss and one row per measured example from the same backward. Exact up
to float64 summation order; the slow per-row loop
(:func:`bnmem.measure.gradnorms.batch_sq_norms_one` with ``loop``) is the oracle
it is tested against, and the first batch of every call is self-checked
against it on two rows.

Layers covered: ``nn.Linear`` on (N, d) inputs, ungrouped zero-padded ``nn.Conv2d``,
BatchNorm (training-mode batch statistics) and any parameter-free module. Anything
else raises :class:`~bnmem.measure.ghost.GhostUnsupported`; callers use the
batched Jacobian then.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnmem.measure.ghost import GhostUnsupported, _layer_outputs, _recorded_forward
from bnmem.measure.ghost_layers import conv_patches, is_plain, own_params, swapped_forwards, symmetric_padding
from bnmem.measure.hooks import removed_after
from bnmem.measure.predict import bn_query_mode

# Convs whose dense matrix (input size x output size) has at most this many entries run as one GEMM.
_DENSE_CONV = 2**22
# The stacked rows pay where each conv's dense GEMM costs at most this many times the conv (see stacked_pays).
_DENSE_WORK = 4
# Rows per stacked chunk: at most ~256 MB of per-row layer-output gradients and per-row weight gradients,
# and at most 32 rows (16 to 64 measured alike on digits; 4 was slower).
_ROW_BYTES = 256 * 2**20
_STACK_ROWS = 32


def stacked_pays(model: nn.Module, x: torch.Tensor) -> bool:
    """Whether stacked rows are expected to beat per-row Jacobian backwards on ``model`` with inputs like ``x``.

    Measured (``benchmarks/bench_hooks.py``, claim 7's push pass, float32, batch 64 on digits): faster
    where every conv runs as a dense GEMM of at most 4x the conv's own multiply-adds (LeNet: 1.4-1.5x;
    an MLP: 1.5x), slower where a conv's dense matrix is much larger than its kernel work (ResNet-20,
    8x8 inputs, 3x3 kernels: 7x, 1.4x slower) and no faster through the patches (ResNet-20: 1.04x slower).
    One forward of two examples in eval mode finds each conv's input size; nothing else is touched.
    """
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    sizes: dict[nn.Module, tuple[int, ...]] = {}

    def seen(mod: nn.Module, args: tuple) -> None:
        sizes.setdefault(mod, tuple(args[0].shape[1:]))  # returns None: the arguments pass unchanged

    handles = [m.register_forward_pre_hook(seen) for m in convs]
    ref = next(t for t in model.parameters() if t.is_floating_point())
    with removed_after(handles), bn_query_mode(model, "eval"), torch.no_grad():
        model(x[:2].to(device=ref.device, dtype=ref.dtype))
    for m in convs:
        c, h, w = sizes.get(m, (0, 0, 0))
        dense = c * h * w * m.out_channels * h * w  # ~ the dense matrix (stride 1, same size)
        if dense > _DENSE_CONV or h * w > _DENSE_WORK * m.kernel_size[0] * m.kernel_size[1]:
            return False
    return True


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


def _dense_conv(m: nn.Module, cache: dict | None = None):
    """A forward for a small-image conv as one GEMM with its dense (C·H·W, Cout·Ho·Wo) matrix.

    The per-row backward then takes the conv's input gradient as a GEMM too (the
    float64 conv kernels loop over the examples; on 8x8 digits that GEMM was ~6x
    faster). The matrix holds the weights themselves (the conv of basis images adds
    only zeros), so only the summation order changes. It is a constant: the weight
    gradients come from the patches identity, not from autograd.
    """
    if not is_plain(m, nn.Conv2d):
        return None
    cache = {} if cache is None else cache  # (C, H, W) -> dense matrix
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
        out = out if m.bias is None else out + m.bias.view(1, -1, 1, 1)
        if torch.is_grad_enabled() and not out.requires_grad:
            out.requires_grad_()  # a first conv without bias: its output gradient is still wanted (a leaf)
        return out

    return forward


def _sq(t: torch.Tensor) -> torch.Tensor:
    """Squares in float64 (a float32 model's gradients are squared and summed as the old paths did)."""
    return t.double().pow(2)


def _zeros(r: int, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros(r, dtype=torch.float64, device=like.device)


class StackedRows:
    """The layer-output gradients of several weighted sums of one batch's losses, from one batched backward.

    Row r is Σ_j weights[r, j]·loss_j (a unit row: one example's own loss; a mask: a group's summed loss).
    Every parameter gradient of a row follows from its layer-output gradient by the identities of this
    module (the layer's input is shared by all rows), so no row needs a backward to the parameters.
    """

    def __init__(self, names: list[str], records: dict, patches: dict, grads: list[torch.Tensor],
                 affine: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
        self.names = names
        self._index = {n: k for k, n in enumerate(names)}
        self._records, self._patches, self._grads = records, patches, grads
        self._x_hat: dict[str, torch.Tensor] = {}
        # BN layers' (R, C) γ and β gradients where the backward gave them (else from the identity)
        self._affine: dict[str, tuple[torch.Tensor, torch.Tensor]] = dict(affine or {})

    def module(self, name: str) -> nn.Module:
        return self._records[name].module

    def output_grad(self, name: str) -> torch.Tensor:
        """(R, *output shape) gradients of the rows with respect to the layer's output."""
        return self._grads[self._index[name]]

    def x_hat(self, name: str) -> torch.Tensor:
        """A BN layer's input normalized by the batch statistics (what its γ multiplies)."""
        if name not in self._x_hat:
            m = self.module(name)
            self._x_hat[name] = F.batch_norm(self._records[name].inp[0], None, None, training=True, eps=m.eps)
        return self._x_hat[name]

    def bn_affine(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """A BN layer's (R, C) gradients of γ and β: Σ_{j, positions} g·x̂ and Σ g."""
        if name not in self._affine:
            g = self.output_grad(name)
            dims = [1] + list(range(3, g.ndim))
            self._affine[name] = (g * self.x_hat(name)).sum(dim=dims), g.sum(dim=dims)
        return self._affine[name]

    def sq_norms(self) -> torch.Tensor:
        """(R,) float64 squared norms of every row's gradient over all trainable parameters."""
        total = _zeros(self._grads[0].shape[0], self._grads[0])
        for n in self.names:
            total = total + self._layer_sq(n)
        return total

    def _layer_sq(self, name: str) -> torch.Tensor:
        m, g, a = self.module(name), self.output_grad(name), self._records[name].inp[0]
        r = g.shape[0]
        if isinstance(m, _BatchNorm):
            g_gamma, g_beta = self.bn_affine(name)
            out = _sq(g_beta).sum(1) if m.bias is not None and m.bias.requires_grad else _zeros(r, g)
            return out + _sq(g_gamma).sum(1) if m.weight is not None and m.weight.requires_grad else out
        dims = [1] + list(range(3, g.ndim))
        out = _sq(g.sum(dim=dims)).sum(1) if m.bias is not None and m.bias.requires_grad else _zeros(r, g)
        if not m.weight.requires_grad:
            return out
        c = g.shape[2]
        if isinstance(m, nn.Conv2d):
            cols = self._patches.get(m)
            cols = conv_patches(m, a) if cols is None else cols  # (B, L, Cin·k·k), L in (ho, wo) order
            gt = g.flatten(3).permute(0, 2, 1, 3).reshape(r * c, -1)  # (R·C, B·L)
            w = gt @ cols.reshape(-1, cols.shape[-1])
        elif a.ndim == 2:
            w = g.transpose(1, 2) @ a  # (R, C, d_in)
        else:
            raise GhostUnsupported("a Linear layer on inputs with extra dims")
        return out + torch.linalg.vector_norm(w.reshape(r, -1), dim=1, dtype=torch.float64).pow(2)


def dense_conv_forwards(cache: dict) -> Callable[[nn.Module], Callable | None]:
    """:func:`_dense_conv` with one cache of dense matrices for every call (the weights must not change)."""
    return lambda m: _dense_conv(m, cache.setdefault(m, {}))


def _recorded_outputs(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, cache: dict | None
                      ) -> tuple[torch.Tensor, list[str], dict, dict, list[torch.Tensor]]:
    """One forward with small convs as dense GEMMs: the loss vector, the layer names, records, patches and outputs."""
    reason = rows_unsupported(model)
    if reason is not None:
        raise GhostUnsupported(reason)
    layers = [(n, m) for n, m in model.named_modules() if own_params(m)]
    names = [n for n, _ in layers]
    with swapped_forwards(model, dense_conv_forwards({} if cache is None else cache)):
        losses, records, patches, _ = _recorded_forward(model, xb, yb, layers, reduction="none")
    return losses, names, records, patches, _layer_outputs(names, records, {})


def stacked_rows(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, weights: torch.Tensor,
                 cache: dict | None = None) -> StackedRows:
    """One forward and one batched backward for the rows ``weights`` (R, B) of one batch's loss vector.

    The model must already be in BN batch mode (see :func:`bnmem.measure.predict.bn_query_mode`);
    its dtype sets the precision. ``cache`` keeps the small-image convs' dense matrices between
    calls on the same weights (default: built for this call).

    Raises:
        GhostUnsupported: a layer this path does not cover (see :func:`rows_unsupported`).
    """
    losses, names, records, patches, outputs = _recorded_outputs(model, xb, yb, cache)
    return _stacked(losses, names, records, patches, outputs, weights.to(losses.dtype), False)


def _stacked(losses: torch.Tensor, names: list[str], records: dict, patches: dict, outputs: list[torch.Tensor],
             weights: torch.Tensor, retain_graph: bool) -> StackedRows:
    """The rows' gradients to the layer outputs and, in the same backward, to BN layers' γ and β (the BN
    backward kernel gives them at no extra pass over the per-row gradients)."""
    affine = [(n, m) for n in names if isinstance(m := records[n].module, _BatchNorm)
              and m.weight is not None and m.bias is not None and m.weight.requires_grad and m.bias.requires_grad]
    params = [p for _, m in affine for p in (m.weight, m.bias)]
    grads = batched_grads(losses, outputs + params, weights, retain_graph)
    k = len(outputs)
    by_layer = {n: (grads[k + 2 * i], grads[k + 2 * i + 1]) for i, (n, _) in enumerate(affine)}
    return StackedRows(names, records, patches, grads[:k], by_layer)


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
            processed in chunks that fit (at most 32 rows, at least one), one batched backward each.

    Returns:
        (len(rows),) float64 squared norms of ∇θ loss_i with the forward pass normalized by this batch
        (a float32 model's gradients in float32, squared and summed in float64).

    Raises:
        GhostUnsupported: a layer this path does not cover, or one used unusually.
    """
    losses, names, records, patches, outputs = _recorded_outputs(model, xb, yb, None)
    rows = list(range(losses.shape[0])) if rows is None else list(rows)
    per_row = xb.element_size() * (sum(o.numel() for o in outputs) + sum(p.numel() for p in model.parameters()))
    chunk = max(1, min(_STACK_ROWS, min(_ROW_BYTES, _ROW_BYTES if max_bytes is None else max_bytes) // per_row))
    eye = torch.eye(losses.shape[0], dtype=losses.dtype, device=losses.device)
    total = []
    for s in range(0, len(rows), chunk):
        part = _stacked(losses, names, records, patches, outputs, eye[rows[s:s + chunk]], s + chunk < len(rows))
        total.append(part.sq_norms().detach())
    return torch.cat(total) if total else _zeros(0, xb)


def batched_grads(losses: torch.Tensor, inputs: list[torch.Tensor], weights: torch.Tensor,
                  retain_graph: bool = True) -> list[torch.Tensor]:
    """(R, *input shape) gradients of Σ_j weights[r, j]·losses[j] for every row r, in one batched backward
    (one backward per row where an op has no batching rule: same numbers)."""
    try:
        grads = torch.autograd.grad(losses, inputs, grad_outputs=weights, is_grads_batched=True,
                                    retain_graph=retain_graph, allow_unused=True)
    except RuntimeError:
        per = [torch.autograd.grad(losses, inputs, grad_outputs=w, retain_graph=True, allow_unused=True)
               for w in weights]
        grads = tuple(torch.stack([p[k] if p[k] is not None else torch.zeros_like(inputs[k]) for p in per])
                      if per else None for k in range(len(inputs)))
    return [g if g is not None else torch.zeros((weights.shape[0], *t.shape), dtype=t.dtype, device=t.device)
            for g, t in zip(grads, inputs)]
