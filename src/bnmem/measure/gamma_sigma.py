"""BN scale statistics: γ, σ and |γ|/σ per channel, for any module with BatchNorm layers.

BN multiplies an outlier's per-step margin growth by (γ/σ)² (see
:mod:`bnmem.theory`); a channel with |γ|/σ > 1 amplifies. σ is either the
running estimate BN uses at evaluation, sqrt(running_var + eps) (``running``),
or the standard deviation of the layer's input over one training batch, exactly
as BN normalizes in training mode and as the γ/σ regularizer penalizes it,
sqrt(Var_batch + eps) with the biased variance (``batch``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from bnmem.errors import BnmemError
from bnmem.measure.hooks import removed_after, unreached
from bnmem.measure.predict import bn_query_mode
from bnmem.models.norms import batchnorm_layers
from bnmem.models.norms import batch_sigma

SigmaMode = Literal["running", "batch"]
SIGMA_MODES = ("running", "batch")


def _layer_summary(gamma: np.ndarray, sigma: np.ndarray) -> dict[str, Any]:
    ratio = np.abs(gamma) / sigma
    return {
        "n_channels": int(ratio.size),
        "median_ratio": float(np.median(ratio)),
        "mean_ratio": float(ratio.mean()),
        "max_ratio": float(ratio.max()),
        "frac_above_1": float((ratio > 1).mean()),
        "gamma": gamma.tolist(),
        "sigma": sigma.tolist(),
        "ratio": ratio.tolist(),
    }


def layer_type(m: nn.Module) -> str | None:
    """"conv" for BatchNorm2d/3d (and their lazy variants), "fc" for BatchNorm1d, None when the class does
    not say (SyncBatchNorm). The theory describes conv channels, so claim 4 reports the two separately."""
    name = type(m).__name__
    return "fc" if name.endswith("1d") else "conv" if name.endswith(("2d", "3d")) else None


@torch.no_grad()
def _batch_sigmas(model: nn.Module, layers: list[tuple[str, nn.Module]], x_batch: torch.Tensor) -> dict[str, np.ndarray]:
    """σ of each BN layer's input over ``x_batch``, with every BN normalizing by batch statistics
    (so deeper layers see the activations they see in training), running statistics untouched."""
    sigmas: dict[str, np.ndarray] = {}

    def make_hook(name: str, eps: float):
        def hook(module: nn.Module, args: tuple) -> None:
            sigmas[name] = batch_sigma(args[0].double(), eps).cpu().numpy()

        return hook

    handles = [m.register_forward_pre_hook(make_hook(n, m.eps)) for n, m in layers]
    with removed_after(handles):
        # A float tensor of the model says where (and in what precision) the batch must go.
        ref = next(t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point())
        with bn_query_mode(model, "batch"):
            model(x_batch.to(device=ref.device, dtype=ref.dtype))
    missing = unreached(layers, sigmas)
    if missing:
        raise BnmemError(f"BN layers {missing} were not reached by a forward pass of the batch")
    return sigmas


def gamma_sigma_stats(
    model: nn.Module, x_batch: torch.Tensor | None = None, mode: SigmaMode = "running"
) -> dict[str, Any]:
    """γ, σ and |γ|/σ for every BatchNorm layer and channel of any module.

    Args:
        model: any ``nn.Module``; its BatchNorm1d/2d/3d and SyncBatchNorm layers
            are measured (InstanceNorm, GroupNorm, LayerNorm have no running σ
            and are skipped). Its weights, buffers and train/eval mode are left
            as they were.
        x_batch: a training batch (required for ``mode='batch'``, ignored otherwise).
        mode: ``running`` (σ = sqrt(running_var + eps)) or ``batch`` (σ = the
            std of the layer's input over ``x_batch``, BN in training mode).

    Returns:
        ``{"mode", "sigma": how σ was computed, "layers": {name: {n_channels,
        median_ratio, mean_ratio, max_ratio, frac_above_1, layer_type ("conv" for
        BatchNorm2d/3d, "fc" for BatchNorm1d), gamma, sigma, ratio}},
        "summary": {n_layers, n_channels, median_ratio, frac_above_1 (over all
        channels), layers_median_above_1}}``. A layer without affine parameters
        has γ = 1. A model without BN layers gives empty ``layers`` and a
        summary with ``n_layers`` 0 and None statistics.

    Raises:
        BnmemError: unknown ``mode``; ``batch`` without a batch of at least 2
            examples; ``running`` on a layer that keeps no running statistics.
    """
    if mode not in SIGMA_MODES:
        raise BnmemError(f"unknown σ mode {mode!r}; choose one of {', '.join(SIGMA_MODES)}")
    layers = batchnorm_layers(model)
    sigmas: dict[str, np.ndarray] = {}
    if mode == "batch" and layers:
        if x_batch is None or x_batch.shape[0] < 2:
            raise BnmemError("mode 'batch' needs a training batch of at least 2 examples (x_batch)")
        sigmas = _batch_sigmas(model, layers, x_batch)
    out_layers: dict[str, Any] = {}
    for name, m in layers:
        if mode == "running":
            if m.running_var is None:
                raise BnmemError(f"BN layer {name!r} keeps no running statistics (track_running_stats=False); "
                                 f"use mode 'batch'")
            sigma = torch.sqrt(m.running_var.detach().double() + m.eps).cpu().numpy()
        else:
            sigma = sigmas[name]
        gamma = (m.weight.detach().double().cpu().numpy() if m.weight is not None
                 else np.ones(m.num_features))
        out_layers[name] = {**_layer_summary(gamma, sigma), "layer_type": layer_type(m)}
    all_ratios = np.concatenate([np.asarray(v["ratio"]) for v in out_layers.values()]) if out_layers else np.empty(0)
    summary = {
        "n_layers": len(out_layers),
        "n_channels": int(all_ratios.size),
        "median_ratio": float(np.median(all_ratios)) if all_ratios.size else None,
        "frac_above_1": float((all_ratios > 1).mean()) if all_ratios.size else None,
        "layers_median_above_1": sum(v["median_ratio"] > 1 for v in out_layers.values()),
    }
    how = ("sqrt(running_var + eps)" if mode == "running"
           else "sqrt(biased batch variance of the layer input + eps), BN in training mode")
    return {"mode": mode, "sigma": how, "layers": out_layers, "summary": summary}


def compact(stats: dict[str, Any]) -> dict[str, Any]:
    """``stats`` without the per-channel lists (for per-epoch tracking)."""
    return {
        **{k: v for k, v in stats.items() if k != "layers"},
        "layers": {n: {k: v for k, v in s.items() if k not in ("gamma", "sigma", "ratio")}
                   for n, s in stats["layers"].items()},
    }
