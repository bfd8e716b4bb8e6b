"""The toy model's two variants (BN and no normalization) and the map between them.

Parameters are plain dicts of float64 tensors: BN model ``{w, gamma, beta, A, b}``,
plain model ``{w, c, A, b}``. The derivation these functions serve is in
docs/theory.md.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from bnmem.theory.config import TheoryConfig

Params = dict[str, torch.Tensor]
DTYPE = torch.float64


def init_bn_params(cfg: TheoryConfig) -> Params:
    """PyTorch-default-like init: uniform ±1/sqrt(fan_in) for w and A, γ = 1, β = 0, b = 0."""
    g = torch.Generator().manual_seed(cfg.seed + 1_000_003)
    k, p = cfg.kernel_size, cfg.length - cfg.kernel_size + 1
    w = (torch.rand(k, generator=g, dtype=DTYPE) * 2 - 1) / math.sqrt(k)
    a = (torch.rand(cfg.n_classes, p, generator=g, dtype=DTYPE) * 2 - 1) / math.sqrt(p)
    return {
        "w": w,
        "gamma": torch.ones((), dtype=DTYPE),
        "beta": torch.zeros((), dtype=DTYPE),
        "A": a,
        "b": torch.zeros(cfg.n_classes, dtype=DTYPE),
    }


def conv_features(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """One-channel valid cross-correlation: (N, L) x (k,) -> (N, L - k + 1)."""
    return F.conv1d(x[:, None, :], w.view(1, 1, -1)).squeeze(1)


def batch_stats(h: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """BN train-mode statistics of one channel: mean and sqrt(biased var + eps) over samples and positions."""
    mu = h.mean()
    return mu, torch.sqrt(h.var(unbiased=False) + eps)


def bn_forward(
    params: Params,
    x: torch.Tensor,
    eps: float,
    stats: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits of the BN model, and the (μ, σ) used; pass ``stats`` to freeze them."""
    h = conv_features(x, params["w"])
    mu, sigma = batch_stats(h, eps) if stats is None else stats
    hn = params["gamma"] * (h - mu) / sigma + params["beta"]
    return hn @ params["A"].T + params["b"], mu, sigma


def plain_forward(params: Params, x: torch.Tensor) -> torch.Tensor:
    """Logits of the model without normalization (conv with bias, same classifier)."""
    return (conv_features(x, params["w"]) + params["c"]) @ params["A"].T + params["b"]


def smooth_margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """m = z_y - logsumexp_{c != y} z_c per row (the LiRA statistic, from logits)."""
    zy = logits.gather(1, y[:, None]).squeeze(1)
    others = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), -math.inf)
    return zy - torch.logsumexp(others, dim=1)


def matched_plain_params(bn_params: Params, mu: torch.Tensor, sigma: torch.Tensor) -> Params:
    """The BN model's effective weights: a plain model computing exactly its function on this batch.

    γ (conv(w) - μ)/σ + β = conv(w̃) + c̃ with w̃ = (γ/σ) w and c̃ = β - γ μ/σ,
    because conv is linear in w.
    """
    scale = bn_params["gamma"] / sigma
    return {
        "w": (scale * bn_params["w"]).detach().clone(),
        "c": (bn_params["beta"] - scale * mu).detach().clone(),
        "A": bn_params["A"].detach().clone(),
        "b": bn_params["b"].detach().clone(),
    }


def leaf(params: Params) -> Params:
    """Detached copies that require grad (a fresh autograd graph per step)."""
    return {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}


def grads(loss: torch.Tensor, params: Params, keys: tuple[str, ...] | None = None,
          retain_graph: bool = False) -> Params:
    """∂loss/∂params[k] for ``keys`` (default: all)."""
    names = list(params) if keys is None else list(keys)
    return dict(zip(names, torch.autograd.grad(loss, [params[k] for k in names], retain_graph=retain_graph)))


def gd_step(params: Params, gradients: Params, lr: float, only: tuple[str, ...] | None = None) -> Params:
    """Parameters after one GD step, on all of them or only on those named in ``only``."""
    return {
        k: (v - lr * gradients[k]).detach() if only is None or k in only else v.detach()
        for k, v in params.items()
    }
