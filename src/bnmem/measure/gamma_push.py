"""Which training examples push BN's γ up: the per-example terms of each γ's gradient.

For a BN layer y = γ·x̂ + β the gradient of a loss summed over a batch is

    ∂L/∂γ_c = Σ_i Σ_{spatial} (∂L/∂y_{i,c,·}) · x̂_{i,c,·},

one term per example i, exactly: the batch statistics inside x̂ do not depend
on γ. The term of example i times −sign(γ_c) is its push on |γ_c| under a
gradient step. :func:`gamma_pushes` sums the pushes of the outliers and of all
examples over the training set, in training mode (batch statistics: the
gradient the optimizer follows), with BN's running statistics untouched.
Claim 7 of the analysis plan compares the outliers' share of the push with
their share of the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bnmem.measure.predict import bn_query_mode
from bnmem.measure.hooks import removed_after
from bnmem.models.norms import batch_sigma, batchnorm_layers

# Keeps the pass's batch order apart from the data seed's other streams.
_PUSH_STREAM = 0x7A11


def _batch_order(n: int, batch_size: int, seed: int) -> list[np.ndarray]:
    perm = np.random.default_rng([int(seed), _PUSH_STREAM]).permutation(n)
    return [perm[i:i + batch_size] for i in range(0, n, batch_size) if len(perm[i:i + batch_size]) >= 2]


def gamma_pushes(model: nn.Module, x: torch.Tensor, y: torch.Tensor, outlier: np.ndarray, batch_size: int,
                 seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """Per BN layer and channel, the summed push on |γ| of the outliers and of every example.

    Args:
        model: a model with affine BatchNorm layers (others are skipped).
        x, y: the training set.
        outlier: boolean mask over the training set.
        batch_size: normalization batch (the training batch size).
        seed: seeds the batch order (a fixed permutation).

    Returns:
        ``{layer: {"outlier": [per channel], "all": [per channel]}}`` of Σ_i −sign(γ_c)·∂ℓ_i/∂γ_c
        (cross-entropy summed over examples); the model's weights, buffers, gradients and mode are unchanged.
    """
    layers = [(n, m) for n, m in batchnorm_layers(model) if getattr(m, "weight", None) is not None]
    if not layers:
        return {}
    ref = next(t for t in model.parameters() if t.is_floating_point())
    mask = torch.as_tensor(np.asarray(outlier, dtype=bool), device=ref.device)
    # Summed on the model's device in float64; one transfer at the end, not one per layer and batch.
    sums = {n: {"outlier": torch.zeros(m.num_features, dtype=torch.float64, device=ref.device),
                "all": torch.zeros(m.num_features, dtype=torch.float64, device=ref.device)} for n, m in layers}
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def make_hook(name: str, eps: float):
        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
            inp = args[0].detach()
            dims = [d for d in range(inp.ndim) if d != 1]
            shape = [1, -1] + [1] * (inp.ndim - 2)
            x_hat = (inp - inp.mean(dim=dims).view(shape)) / batch_sigma(inp, eps).view(shape)
            seen[name] = (out, x_hat)

        return hook

    handles = [m.register_forward_hook(make_hook(n, m.eps)) for n, m in layers]
    with removed_after(handles):
        with bn_query_mode(model, "batch"), torch.enable_grad():
            for b in _batch_order(x.shape[0], batch_size, seed):
                idx = torch.as_tensor(b)
                seen.clear()
                logits = model(x[idx].to(device=ref.device, dtype=ref.dtype))
                loss = F.cross_entropy(logits, y[idx].to(ref.device), reduction="sum")
                outs = [seen[n][0] for n, _ in layers]
                grads = torch.autograd.grad(loss, outs)
                for (n, m), g in zip(layers, grads):
                    x_hat = seen[n][1]
                    terms = (g.detach() * x_hat).sum(dim=[d for d in range(g.ndim) if d > 1]) if g.ndim > 2 \
                        else g.detach() * x_hat  # [batch, channels]
                    push = (-terms * torch.sign(m.weight.detach())).double()
                    sums[n]["all"] += push.sum(0)
                    sums[n]["outlier"] += push[mask[idx]].sum(0)
    return {n: {k: v.cpu().tolist() for k, v in s.items()} for n, s in sums.items()}


def outlier_excess_share(pushes: list[dict[str, dict[str, list[float]]]], outlier_fraction: float
                         ) -> dict[str, Any] | None:
    """One model's statistic from its pushes summed over measured epochs: over the BN channels whose |γ| the
    gradient pushed up in total, the median of (the outliers' share of that push − their share of the data).

    Returns:
        ``{"excess_share", "channels", "channels_pushed_up"}``, or None without pushes or outliers.
    """
    if not pushes or not outlier_fraction:
        return None
    layers = list(pushes[0])
    out = np.concatenate([np.sum([p[n]["outlier"] for p in pushes], axis=0) for n in layers])
    tot = np.concatenate([np.sum([p[n]["all"] for p in pushes], axis=0) for n in layers])
    up = tot > 0
    if not up.any():
        return {"excess_share": None, "channels": int(tot.size), "channels_pushed_up": 0}
    return {"excess_share": float(np.median(out[up] / tot[up]) - outlier_fraction), "channels": int(tot.size),
            "channels_pushed_up": int(up.sum())}
