"""Per-sample squared gradient norms from one batched forward/backward ("ghost norms").

The identities used for fast DP clipping: when a layer's parameters act on each
example separately, the per-sample gradient of a parameter is built from the
layer's input activations ``a_i`` and the gradient ``g_i`` of the summed loss
with respect to the layer's output, both of which one ordinary batched
forward/backward provides (the identities are in :mod:`bnmem.measure.ghost_layers`):

* ``nn.Linear`` on (N, in) inputs: ∇W_i = g_i a_iᵀ, so ||∇W_i||² = ||a_i||²·||g_i||²
  and ||∇b_i||² = ||g_i||². With extra (sequence) dims, ∇W_i = G_iᵀ A_i.
* ``nn.Conv2d`` via unfold: with A_i (L, Cin·k·k) the unfolded input patches and
  G_i (L, Cout) the output gradients at the L output positions, ∇W_i = G_iᵀ A_i.
  ||G_iᵀ A_i||_F² is computed either as the Gram form ⟨A_iA_iᵀ, G_iG_iᵀ⟩
  (cost L²·(d_in + d_out)) or by materializing the small per-sample gradient
  (cost L·d_in·d_out), whichever is cheaper. ||∇b_i||² = ||Σ_L G_i||².
  During the measurement each ungrouped Conv2d's forward runs as patches @ kernel
  (one GEMM for the batch), so the patches the norm needs come for free.
  Grouped and depthwise convolutions apply the identity per group and add.
* Affine parameters of normalization layers that normalize each example on its
  own (BatchNorm in eval mode with running statistics, GroupNorm, LayerNorm, also
  over (N, L, D) sequences): ∇γ_i = Σ_positions g_i·x̂_i and ∇β_i = Σ_positions g_i.
* ``nn.MultiheadAttention``: its packed q/k/v projections are tapped
  (:mod:`bnmem.measure.ghost_attention`) and treated as Linear layers.
* ``nn.Embedding``: rows gathered per token; a Gram identity over equal indices.
* Any other layer with parameters of its own (LayerNorm2d, a layer scale, a class
  token or position embedding added to the activations, ...): per-sample
  vector-Jacobian products through that module alone, vectorized with vmap.

Valid only when every example's loss depends on its own forward pass alone (BN in
eval mode): the gradient of the summed loss with respect to example i's layer
output then equals that of loss_i. In-place operations after a layer (``ReLU(inplace=True)``,
``out += identity``) are harmless: each layer's output is handed on as a copy, so
the tensor whose gradient is taken is never modified. Layers these identities do
not cover raise :class:`GhostUnsupported`, and callers fall back to ``torch.func.vmap``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnmem.measure.ghost_attention import (
    AttentionUnsupported,
    Projection,
    attention_sq,
    tap_attention,
    unsupported_attention,
)
from bnmem.measure.ghost_layers import (
    conv2d_sq,
    embedding_sq,
    grouped_conv2d_sq,
    is_plain,
    local_vmap_sq,
    norm_affine_sq,
    linear_sq,
    own_params,
    patch_convs,
    symmetric_padding,
)
from bnmem.measure.hooks import removed_after, unreached


class GhostUnsupported(ValueError):
    """The model has a layer (or a use of a layer) the ghost identities do not cover."""


def layer_kind(m: nn.Module) -> str:
    """Which identity covers a parameterized module: linear, conv, grouped_conv, norm, attention,
    embedding, or ``local`` (per-module vmap over its own parameters)."""
    if isinstance(m, nn.MultiheadAttention):
        return "attention"
    if is_plain(m, nn.Linear):
        return "linear"
    if is_plain(m, nn.Conv2d):
        return "conv" if m.groups == 1 else "grouped_conv"
    if is_plain(m, _BatchNorm) or type(m) in (nn.GroupNorm, nn.LayerNorm):
        return "norm"
    if is_plain(m, nn.Embedding):
        return "embedding"
    return "local"


def unsupported_reason(model: nn.Module) -> str | None:
    """Why :func:`ghost_sq_norms` cannot handle ``model`` (None when it can).

    A static check on layer types and settings. Layers without an identity of
    their own are measured by per-module vmap, which assumes they treat each
    example on its own; callers check that at run time against the
    per-example loop (:func:`bnmem.measure.gradnorms.eval_sq_norms`).

    Args:
        model: the model (eval-mode definition is assumed).

    Returns:
        A short reason, or None.
    """
    for name, m in model.named_modules():
        if not own_params(m):
            continue
        label = f"{name or 'model'} ({type(m).__name__})"
        kind = layer_kind(m)
        if kind in ("conv", "grouped_conv"):
            if m.padding_mode != "zeros":
                return f"{label}: padding_mode {m.padding_mode!r}"
            if symmetric_padding(m) is None:
                return f"{label}: padding 'same' with an even kernel (uneven padding)"
        if isinstance(m, _BatchNorm) and (m.training or not m.track_running_stats or m.running_var is None):
            # Batch statistics couple the examples of a batch: no per-example identity.
            return f"{label}: BatchNorm not in eval mode with running statistics"
        if kind == "attention" and unsupported_attention(m):
            return f"{label}: {unsupported_attention(m)}"
        if kind == "embedding" and (m.max_norm is not None or m.scale_grad_by_freq or m.sparse):
            return f"{label}: max_norm, scale_grad_by_freq or sparse gradients"
    return None


@dataclass
class _Record:
    module: nn.Module
    inp: tuple[torch.Tensor, ...]
    out: torch.Tensor | None
    versions: tuple[int, ...]
    calls: int = 1
    problem: str | None = None
    projections: list[Projection] = field(default_factory=list)


def _record(module: nn.Module, args: tuple, kwargs: dict, output: object) -> _Record:
    if isinstance(module, nn.MultiheadAttention):
        return _Record(module, (), None, ())
    tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
    problem = None
    if not isinstance(output, torch.Tensor):
        problem = f"returns {type(output).__name__}, not a tensor"
    elif len(tensors) != len(args) or not tensors:
        problem = "takes non-tensor positional arguments"
    elif any(v is not None for v in kwargs.values()) and layer_kind(module) == "local":
        problem = "is called with keyword arguments"
    inp = tuple(a.detach() for a in tensors)  # shares the version counter: in-place changes show
    return _Record(module, inp, output if isinstance(output, torch.Tensor) else None,
                   tuple(a._version for a in tensors), problem=problem)


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
            forward (weight sharing) or not through its forward, or has its input
            modified in place (autograd could not train such a model either).
    """
    reason = unsupported_reason(model)
    if reason is not None:
        raise GhostUnsupported(reason)
    layers = [(n, m) for n, m in model.named_modules() if own_params(m)]
    names = [n for n, _ in layers]
    loss, records, patches, taps = _recorded_forward(model, x, y, layers)
    outputs = _layer_outputs(names, records, taps)
    grads = list(torch.autograd.grad(loss, outputs, allow_unused=True))
    return _sq_norms(names, records, grads, patches, x.shape[0])


def _recorded_forward(model: nn.Module, x: torch.Tensor, y: torch.Tensor, layers: list[tuple[str, nn.Module]],
                      reduction: str = "sum") -> tuple[torch.Tensor, dict[str, _Record], dict[nn.Module, torch.Tensor],
                                                      dict[nn.Module, list[Projection]]]:
    """The loss of one forward (summed, or per example with ``reduction="none"``), with every layer's inputs
    and output recorded (conv patches and attention projections tapped).

    Raises:
        GhostUnsupported: a layer is not called through its forward, or attention not run the supported way.
    """
    records: dict[str, _Record] = {}

    def make_hook(name: str):
        def hook(module: nn.Module, args: tuple, kwargs: dict, output: object) -> object:
            if name in records:
                records[name].calls += 1
                return None
            records[name] = _record(module, args, kwargs, output)
            # A tap: what flows on is a copy, so in-place ops downstream (ReLU(inplace=True),
            # `out += identity`) never touch the tensor whose gradient is taken.
            return output.clone() if records[name].out is not None else None

        return hook

    handles = [m.register_forward_hook(make_hook(n), with_kwargs=True) for n, m in layers]
    patches: dict[nn.Module, torch.Tensor] = {}
    taps: dict[nn.Module, list[Projection]] = {}
    try:
        with removed_after(handles), torch.enable_grad(), patch_convs(model, patches), tap_attention(model, taps):
            logits = model(x)
            loss = F.cross_entropy(logits, y, reduction=reduction)
    except AttentionUnsupported as e:
        raise GhostUnsupported(str(e)) from None
    missing = unreached(layers, records)
    if missing:
        # An unused layer has zero gradient; a layer reached some other way would be missed.
        raise GhostUnsupported(f"layers not called through their forward: {missing}")
    return loss, records, patches, taps


def _layer_outputs(names: list[str], records: dict[str, _Record], taps: dict[nn.Module, list[Projection]]
                   ) -> list[torch.Tensor]:
    """The tensors whose gradients the identities need, in layer order (three projections per attention layer).

    Raises:
        GhostUnsupported: shared weights, a layer the per-module vmap cannot take, or an input modified in place.
    """
    outputs: list[torch.Tensor] = []
    for n in names:
        r = records[n]
        if r.calls != 1:
            raise GhostUnsupported(f"{n} is called {r.calls} times per forward (shared weights)")
        if isinstance(r.module, nn.MultiheadAttention):
            r.projections = taps.get(r.module, [])
            if len(r.projections) != 3:
                raise GhostUnsupported(f"{n}: attention not run through its forward")
            if any(p.inp._version != p.version for p in r.projections):
                raise GhostUnsupported(f"{n}: its input is modified in place")
            outputs += [p.out for p in r.projections]
            continue
        if r.problem is not None and (r.out is None or layer_kind(r.module) == "local"):
            # the per-module vmap needs tensor inputs (batch first) and one tensor output
            raise GhostUnsupported(f"{n} ({type(r.module).__name__}) {r.problem}")
        if tuple(a._version for a in r.inp) != r.versions:
            raise GhostUnsupported(f"{n}: its input is modified in place")
        outputs.append(r.out)
    return outputs


def _sq_norms(names: list[str], records: dict[str, _Record], grads: list[torch.Tensor | None],
              patches: dict[nn.Module, torch.Tensor], n_examples: int) -> dict[str, torch.Tensor]:
    """Each parameter's per-sample squared norms from its layer's recorded inputs and output gradients."""
    result: dict[str, torch.Tensor] = {}
    for n in names:
        r = records[n]
        m = r.module
        if isinstance(m, nn.MultiheadAttention):
            gs, grads = grads[:3], grads[3:]
            parts = attention_sq(m, r.projections, gs)
        else:
            g, grads = grads[0], grads[1:]
            g = torch.zeros_like(r.out) if g is None else g
            parts = _layer_sq(m, r.inp, g, patches)
        for pname, v in parts.items():
            if v.shape != (n_examples,):
                raise GhostUnsupported(f"{n}.{pname}: the batch is not dim 0 of its input ({tuple(v.shape)})")
            result[f"{n}.{pname}" if n else pname] = v.detach()
    return result


def _layer_sq(m: nn.Module, inp: tuple[torch.Tensor, ...], g: torch.Tensor,
              patches: dict[nn.Module, torch.Tensor]) -> dict[str, torch.Tensor]:
    kind = layer_kind(m)
    if kind == "linear":
        return linear_sq(m, inp[0], g)
    if kind == "conv":
        return conv2d_sq(m, inp[0], g, patches.get(m))
    if kind == "grouped_conv":
        return grouped_conv2d_sq(m, inp[0], g)
    if kind == "norm":
        return norm_affine_sq(m, inp[0], g)
    if kind == "embedding":
        return embedding_sq(m, inp[0], g)
    with torch.enable_grad():
        return local_vmap_sq(m, inp, g)
