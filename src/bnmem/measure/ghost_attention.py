"""Ghost norms for ``nn.MultiheadAttention``: its packed input projections, tapped.

``nn.MultiheadAttention`` projects query, key and value with slices of one packed
``in_proj_weight`` inside ``F.multi_head_attention_forward``, where no hook can see
the projected tensors. While the ghost norms are measured, each attention
module's forward is replaced by an equivalent one that projects q, k and v itself
(three ``F.linear`` calls on the same weight slices), records each projection's
input and output, runs the attention with identity projections (x·I = x exactly
in floating point) and applies ``out_proj`` as an ordinary ``nn.Linear`` (whose
identity then applies). Each projection slot is a Linear, so its per-sample
gradient is G_iᵀ A_i over the sequence positions; the slots occupy disjoint
rows of the packed weight, so their squared norms add.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bnmem.measure.ghost_layers import frob_sq_of_gt_a, swapped_forwards

SLOTS = ("q", "k", "v")


class AttentionUnsupported(ValueError):
    """An attention call the tapped forward does not reproduce (raised during the forward)."""


@dataclass
class Projection:
    """One tapped projection: its slot, its input and output, and the batch dim of both."""

    slot: str
    inp: torch.Tensor
    out: torch.Tensor
    batch_dim: int
    version: int


def unsupported_attention(m: nn.MultiheadAttention) -> str | None:
    """Why the tapped forward cannot stand in for ``m`` (None when it can)."""
    if m.bias_k is not None or m.bias_v is not None:
        return "add_bias_kv (bias_k/bias_v)"
    if not isinstance(m.out_proj, nn.Linear) or type(m.out_proj).forward is not nn.Linear.forward:
        return "out_proj is not an nn.Linear"
    return None


def _tapped_forward(m: nn.MultiheadAttention, taps: dict[nn.Module, list[Projection]]):
    def forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        if query.dim() != 3:
            raise AttentionUnsupported("unbatched attention input")
        if m._qkv_same_embed_dim:
            weights = m.in_proj_weight.chunk(3)
        else:
            weights = (m.q_proj_weight, m.k_proj_weight, m.v_proj_weight)
        biases = m.in_proj_bias.chunk(3) if m.in_proj_bias is not None else (None, None, None)
        batch_dim = 0 if m.batch_first else 1
        projected = []
        for slot, x, w, b in zip(SLOTS, (query, key, value), weights, biases):
            p = F.linear(x, w, b)
            taps.setdefault(m, []).append(Projection(slot, x.detach(), p, batch_dim, x._version))
            projected.append(p)
        q, k, v = projected
        if m.batch_first:  # F.multi_head_attention_forward takes (L, N, E)
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))
        eye = torch.eye(m.embed_dim, dtype=q.dtype, device=q.device)
        attn, attn_weights = F.multi_head_attention_forward(
            q, k, v, m.embed_dim, m.num_heads, None, None, None, None, m.add_zero_attn, m.dropout, eye, None,
            training=m.training, key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=True, q_proj_weight=eye, k_proj_weight=eye,
            v_proj_weight=eye, average_attn_weights=average_attn_weights, is_causal=is_causal)
        # out_proj as a module call (hooked like any Linear), on batch-first (N, L, E).
        out = m.out_proj(attn.transpose(0, 1))
        return (out if m.batch_first else out.transpose(0, 1)), attn_weights

    return forward


def tap_attention(model: nn.Module, taps: dict[nn.Module, list[Projection]]):
    """Route every supported ``nn.MultiheadAttention`` through the tapped forward for the duration
    (a context manager)."""
    def forward(m: nn.Module):
        if isinstance(m, nn.MultiheadAttention) and unsupported_attention(m) is None:
            return _tapped_forward(m, taps)
        return None

    return swapped_forwards(model, forward)


def attention_sq(m: nn.MultiheadAttention, projections: list[Projection],
                 grads: list[torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """Per-sample squared norms of the input-projection parameters (``out_proj`` is a Linear of its own).

    Args:
        m: the attention module.
        projections: its three tapped projections.
        grads: the gradient of the summed loss with respect to each projection's output.

    Returns:
        ``{"in_proj_weight", "in_proj_bias"}`` (packed) or ``{"q_proj_weight", ...}`` (separate).
    """
    out: dict[str, torch.Tensor] = {}

    def add(name: str, v: torch.Tensor) -> None:
        out[name] = out[name] + v if name in out else v

    for pr, g in zip(projections, grads):
        a = pr.inp
        if g is None:
            g = torch.zeros_like(pr.out)
        if pr.batch_dim == 1:
            a, g = a.transpose(0, 1), g.transpose(0, 1)
        n = a.shape[0]
        a3, g3 = a.reshape(n, -1, a.shape[-1]), g.reshape(n, -1, g.shape[-1])
        wname = "in_proj_weight" if m._qkv_same_embed_dim else f"{pr.slot}_proj_weight"
        if getattr(m, wname).requires_grad:
            add(wname, frob_sq_of_gt_a(a3, g3))
        if m.in_proj_bias is not None and m.in_proj_bias.requires_grad:
            add("in_proj_bias", g3.sum(1).pow(2).sum(1))
    return out
