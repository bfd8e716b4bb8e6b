"""One-step probes at a BN state: how much an outlier's margin moves under BN vs no norm.

Claim 5a (:func:`probe_state`, "frozen"): with the batch statistics frozen, a step
on w alone is exactly the plain model's step on w̃ at learning rate η(γ/σ)², so
the measured ratio equals (γ/σ)² up to curvature. It checks the derivation (the
chain rule), it is not evidence that BN amplifies memorization.

Claim 5b (:func:`counterfactual_step`): the fair counterfactual. The BN model's
conv layer trains (w, γ, β); the plain model with the same function trains its
effective weights (w̃, c̃). Both take one real gradient step at the training
learning rate on the same batch, the classifier is held fixed in both, and the
outlier's margin change is compared. See docs/theory.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from bnmem.theory.model import (
    Params,
    bn_forward,
    conv_features,
    gd_step,
    grads,
    leaf,
    matched_plain_params,
    plain_forward,
    smooth_margin,
)

# The conv layer's parameters in each model: what the counterfactual steps.
BN_LAYER = ("w", "gamma", "beta")
PLAIN_LAYER = ("w", "c")


def margin_feature_grads(logits: torch.Tensor, y: torch.Tensor, idx: torch.Tensor,
                         a: torch.Tensor) -> torch.Tensor:
    """g_i = ∂m_i/∂ĥ_i per outlier i, ``(n_outliers, P)``: m_i depends on its own sample's features only.

    ∂m_i/∂z_i = e_y - softmax over the other classes (0 at y), and z_i = A ĥ_i + b.
    """
    onehot = F.one_hot(y[idx], logits.shape[1]).to(logits.dtype)
    z_o = logits[idx].masked_fill(onehot.bool(), -math.inf)
    return (onehot - torch.softmax(z_o, 1)) @ a


def bn_projection(v: torch.Tensor, xhat: torch.Tensor) -> torch.Tensor:
    """Π v = v - mean(v) - x̂ mean(x̂ v) over the last two dims (samples and positions).

    σ ∂x̂/∂h applied to v: how BN's batch statistics move when the features h move by v.
    """
    mean = v.mean(dim=(-2, -1), keepdim=True)
    corr = (xhat * v).mean(dim=(-2, -1), keepdim=True)
    return v - mean - xhat * corr


def live_projection_factor(
    x: torch.Tensor,
    y: torch.Tensor,
    idx: torch.Tensor,
    logits: torch.Tensor,
    a: torch.Tensor,
    xhat: torch.Tensor,
) -> np.ndarray:
    """ρ per outlier: the share of the plain model's first-order conv-step margin growth
    that survives BN's moving statistics, in closed form (no autograd, so it is an
    independent prediction of what the real BN step measures).

    With feature-space gradients g_L = ∂L/∂ĥ, g_m = ∂m/∂ĥ (equal in both models at a
    matched state), the conv Jacobian J (rows = input patches) and Π v = v - mean(v) -
    x̂ mean(x̂ v):  ρ = (JᵀΠg_m · JᵀΠg_L) / (Jᵀg_m · Jᵀg_L).
    """
    n, n_cls = logits.shape
    k = x.shape[1] - a.shape[1] + 1
    patches = x.unfold(1, k, 1)  # (N, P, k): J as a tensor
    onehot = F.one_hot(y, n_cls).to(logits.dtype)
    g_loss = ((torch.softmax(logits, 1) - onehot) / n) @ a  # ∂(mean CE)/∂ĥ, (N, P)
    g_m = torch.zeros(len(idx), *g_loss.shape, dtype=logits.dtype)  # only row i of g_m[i] is nonzero
    g_m[torch.arange(len(idx)), idx] = margin_feature_grads(logits, y, idx, a)

    def jt(v: torch.Tensor) -> torch.Tensor:  # Jᵀ v on the last two dims
        return torch.einsum("npk,...np->...k", patches, v)

    plain = jt(g_m) @ jt(g_loss)
    live = jt(bn_projection(g_m, xhat)) @ jt(bn_projection(g_loss, xhat))
    return (live / plain).numpy()


@dataclass
class Probe:
    """First-order check at one BN state; arrays are per outlier, ratios BN / matched plain."""

    amp_pred: float  # (γ/σ)²
    rho: np.ndarray  # share of the plain conv-kernel growth left by BN's projection
    ratio_frozen: dict[float, np.ndarray]  # probe lr -> measured ratio, statistics frozen
    ratio_live: dict[float, np.ndarray]  # probe lr -> measured ratio, real BN step on w
    ratio_full: np.ndarray  # all parameters stepped, at the training lr
    dm_bn_live: np.ndarray  # real BN conv-step margin change, training lr
    dm_plain: np.ndarray  # matched plain conv-step margin change, training lr
    match_gap: float  # max |logit difference| BN vs matched plain model (should be ~1e-15)
    logits: torch.Tensor  # BN logits at this state (train mode)
    sigma: float  # batch σ at this state


def probe_state(
    bn_params: Params,
    x: torch.Tensor,
    y: torch.Tensor,
    idx: torch.Tensor,
    eps: float,
    lrs: list[float],
    lr_train: float,
) -> tuple[Probe, Params]:
    """Measure each outlier's one-step margin change under BN vs the matched plain model,
    stepping w only (frozen and live statistics) and every parameter.

    Args:
        bn_params: the BN state.
        x, y: the training batch (the whole training set).
        idx: indices of the outliers in the batch.
        eps: BN's eps.
        lrs: probe learning rates for the w-only steps.
        lr_train: the training learning rate (the all-parameter step uses it).

    Returns:
        The probe and the real BN gradient (so training can reuse it).
    """
    p = leaf(bn_params)
    logits, mu, sigma = bn_forward(p, x, eps)
    g_live = grads(F.cross_entropy(logits, y), p)
    mu, sigma = mu.detach(), sigma.detach()
    stats = (mu, sigma)
    x_o, y_o = x[idx], y[idx]  # margins are read on the outliers' rows only
    m0 = smooth_margin(logits.detach()[idx], y_o)

    g_frozen = grads(F.cross_entropy(bn_forward(p, x, eps, stats)[0], y), p, ("w",))  # only w is stepped

    q = leaf(matched_plain_params(p, mu, sigma))
    logits_q = plain_forward(q, x)
    g_plain = grads(F.cross_entropy(logits_q, y), q)
    logits_q = logits_q.detach()
    m0_plain = smooth_margin(logits_q[idx], y_o)
    with torch.no_grad():
        xhat = (conv_features(x, p["w"]) - mu) / sigma
        rho = live_projection_factor(x, y, idx, logits.detach(), q["A"].detach(), xhat)

    amp = float((p["gamma"].detach() / sigma) ** 2)
    ratio_frozen: dict[float, np.ndarray] = {}
    ratio_live: dict[float, np.ndarray] = {}
    dm_bn_live = dm_plain = np.zeros(len(idx))
    with torch.no_grad():
        for lr in lrs:
            d_plain = smooth_margin(plain_forward(gd_step(q, g_plain, lr, ("w",)), x_o), y_o) - m0_plain
            d_frozen = smooth_margin(bn_forward(gd_step(p, g_frozen, lr, ("w",)), x_o, eps, stats)[0], y_o) - m0
            d_live = smooth_margin(bn_forward(gd_step(p, g_live, lr, ("w",)), x, eps)[0][idx], y_o) - m0
            ratio_frozen[lr] = (d_frozen / d_plain).numpy()
            ratio_live[lr] = (d_live / d_plain).numpy()
            if lr == lr_train:
                dm_bn_live, dm_plain = d_live.numpy(), d_plain.numpy()
        d_full_bn = smooth_margin(bn_forward(gd_step(p, g_live, lr_train), x, eps)[0][idx], y_o) - m0
        d_full_plain = smooth_margin(plain_forward(gd_step(q, g_plain, lr_train), x_o), y_o) - m0_plain
    probe = Probe(
        amp_pred=amp,
        rho=rho,
        ratio_frozen=ratio_frozen,
        ratio_live=ratio_live,
        ratio_full=(d_full_bn / d_full_plain).numpy(),
        dm_bn_live=dm_bn_live,
        dm_plain=dm_plain,
        match_gap=float((logits_q - logits.detach()).abs().max()),
        logits=logits.detach(),
        sigma=float(sigma),
    )
    return probe, {k: v.detach() for k, v in g_live.items()}


@dataclass
class Counterfactual:
    """Claim 5b at one BN state: the conv layer's real step under BN vs the plain model's.

    Arrays are per outlier. ``ratio`` = ``dm_bn`` / ``dm_plain``.
    """

    amp: float  # (γ/σ)² at this state
    dm_bn: np.ndarray  # margin change after one step on (w, γ, β), statistics recomputed
    dm_plain: np.ndarray  # margin change after one step on the plain model's (w̃, c̃)
    ratio: np.ndarray
    ratio_w_only: np.ndarray  # the old comparison: real BN step on w alone vs the step on w̃ alone
    first_order_bn: np.ndarray  # -lr ∇m·∇L over (w, γ, β): the first-order prediction of dm_bn
    first_order_plain: np.ndarray  # -lr ∇m̃·∇L̃ over (w̃, c̃)
    bn_terms: np.ndarray  # (3, n_outliers): the w, γ and β parts of first_order_bn
    plain_terms: np.ndarray  # (2, n_outliers): the w̃ and c̃ parts of first_order_plain
    match_gap: float  # max |logit difference| of the two models before the step
    dm_bn_w: np.ndarray  # margin change after the live BN step on the kernel w alone (claim 5b, plan 3.0)
    dm_plain_w: np.ndarray  # margin change after the plain model's step on w̃ alone


def counterfactual_step(
    bn_params: Params,
    x: torch.Tensor,
    y: torch.Tensor,
    idx: torch.Tensor,
    eps: float,
    lr: float,
    *,
    loop: bool = False,
) -> Counterfactual:
    """One GD step on the conv layer of the BN model and of its function-matched plain model.

    The plain model starts at the BN model's effective weights (w̃ = γw/σ,
    c̃ = β - γμ/σ, same classifier), so both compute the same logits on ``x``.
    Both gradients come from the mean cross-entropy on the same ``(x, y)``; the BN
    forward recomputes its batch statistics, before and after the step (a real BN
    step). The classifier (A, b) is not stepped in either model: its step is the
    same function of the same logits in both.

    Args:
        bn_params: the BN state ``{w, gamma, beta, A, b}``.
        x, y: the training batch, used by both models.
        idx: indices of the outliers whose margins are compared.
        eps: BN's eps.
        lr: learning rate of the step (the training one).
        loop: compute the first-order terms with one backward pass per outlier and
            model (the slow oracle of the closed forms; same numbers up to round-off).

    Returns:
        Per-outlier margin changes, their ratio and first-order decomposition.
    """
    return counterfactual_and_gradient(bn_params, x, y, idx, eps, lr, loop=loop)[0]


def counterfactual_and_gradient(
    bn_params: Params,
    x: torch.Tensor,
    y: torch.Tensor,
    idx: torch.Tensor,
    eps: float,
    lr: float,
    *,
    loop: bool = False,
) -> tuple[Counterfactual, Params, float]:
    """:func:`counterfactual_step`, and the BN model's loss and its gradient on every parameter
    (the training step's, so a run need not compute them again)."""
    p = leaf(bn_params)
    logits, mu, sigma = bn_forward(p, x, eps)
    mu, sigma = mu.detach(), sigma.detach()
    q = leaf(matched_plain_params(p, mu, sigma))
    logits_q = plain_forward(q, x)
    loss = F.cross_entropy(logits, y)
    g_all = grads(loss, p, retain_graph=loop)
    g_bn = {k: g_all[k] for k in BN_LAYER}
    g_q = grads(F.cross_entropy(logits_q, y), q, PLAIN_LAYER, retain_graph=loop)
    if loop:
        bn_terms, plain_terms = first_order_terms_loop(p, q, smooth_margin(logits, y)[idx],
                                                       smooth_margin(logits_q, y)[idx], g_bn, g_q, lr)
    with torch.no_grad():
        logits, logits_q = logits.detach(), logits_q.detach()
        if not loop:
            xhat = (conv_features(x, p["w"]) - mu) / sigma
            # One feature gradient for both models: their logits agree to round-off (match_gap).
            g_rows = margin_feature_grads(logits, y, idx, p["A"].detach())
            bn_terms = bn_first_order_terms(x, idx, g_rows, xhat, p["gamma"].detach() / sigma, g_bn, lr)
            plain_terms = plain_first_order_terms(x, idx, g_rows, g_q, lr)
        x_o, y_o = x[idx], y[idx]  # the plain model's margins need the outliers' rows only
        m0, m0_q = smooth_margin(logits[idx], y_o), smooth_margin(logits_q[idx], y_o)
        dm_bn = smooth_margin(bn_forward(gd_step(p, g_bn, lr, BN_LAYER), x, eps)[0][idx], y_o) - m0
        dm_plain = smooth_margin(plain_forward(gd_step(q, g_q, lr, PLAIN_LAYER), x_o), y_o) - m0_q
        dm_bn_w = smooth_margin(bn_forward(gd_step(p, g_bn, lr, ("w",)), x, eps)[0][idx], y_o) - m0
        dm_plain_w = smooth_margin(plain_forward(gd_step(q, g_q, lr, ("w",)), x_o), y_o) - m0_q
    cf = Counterfactual(
        amp=float((p["gamma"].detach() / sigma) ** 2),
        dm_bn=dm_bn.numpy(),
        dm_plain=dm_plain.numpy(),
        ratio=(dm_bn / dm_plain).numpy(),
        ratio_w_only=(dm_bn_w / dm_plain_w).numpy(),
        first_order_bn=bn_terms.sum(0),
        first_order_plain=plain_terms.sum(0),
        bn_terms=bn_terms,
        plain_terms=plain_terms,
        match_gap=float((logits_q - logits).abs().max()),
        dm_bn_w=dm_bn_w.numpy(),
        dm_plain_w=dm_plain_w.numpy(),
    )
    return cf, {k: v.detach() for k, v in g_all.items()}, float(loss.detach())


# The first-order terms -lr ∇m_i·g (g the loss gradient, per parameter) are m_i's directional
# derivatives along the step: the step moves the features ĥ by dĥ, and m_i by g_i·dĥ_i with
# g_i = ∂m_i/∂ĥ_i (margin_feature_grads). One forward-mode pass serves every outlier, where
# reverse mode needs one backward pass per outlier and model (first_order_terms_loop).


def bn_first_order_terms(x: torch.Tensor, idx: torch.Tensor, g_rows: torch.Tensor, xhat: torch.Tensor,
                         scale: torch.Tensor, g: Params, lr: float) -> np.ndarray:
    """The w, γ and β terms of the BN model's -lr ∇m_i·∇L, ``(3, n_outliers)``.

    ĥ = γ x̂ + β: a step g_γ on γ moves ĥ by g_γ x̂, one on β by g_β everywhere, one on w by
    (γ/σ) Π conv(x, g_w) (``scale`` = γ/σ; Π: :func:`bn_projection`, the batch statistics move too).
    """
    dh_w = scale * bn_projection(conv_features(x, g["w"]), xhat)[idx]
    terms = torch.stack([(g_rows * dh_w).sum(1), g["gamma"] * (g_rows * xhat[idx]).sum(1), g["beta"] * g_rows.sum(1)])
    return (-lr * terms).numpy()


def plain_first_order_terms(x: torch.Tensor, idx: torch.Tensor, g_rows: torch.Tensor, g: Params,
                            lr: float) -> np.ndarray:
    """The w̃ and c̃ terms of the plain model's -lr ∇m̃_i·∇L̃, ``(2, n_outliers)``: ĥ = conv(x, w̃) + c̃."""
    terms = torch.stack([(g_rows * conv_features(x[idx], g["w"])).sum(1), g["c"] * g_rows.sum(1)])
    return (-lr * terms).numpy()


def first_order_terms_loop(p: Params, q: Params, margins: torch.Tensor, margins_q: torch.Tensor, g_bn: Params,
                           g_q: Params, lr: float) -> tuple[np.ndarray, np.ndarray]:
    """The slow oracle of the two functions above: one backward pass per outlier and model.

    ``margins`` / ``margins_q``: the outliers' margins, still attached to the graphs of the
    BN leaves ``p`` and the plain leaves ``q`` (the graphs must have been retained).
    """
    bn_terms = np.zeros((len(BN_LAYER), len(margins)))
    plain_terms = np.zeros((len(PLAIN_LAYER), len(margins)))
    for j in range(len(margins)):
        gm = grads(margins[j], p, BN_LAYER, retain_graph=True)
        gm_q = grads(margins_q[j], q, PLAIN_LAYER, retain_graph=True)
        bn_terms[:, j] = [-lr * float((gm[k] * g_bn[k]).sum()) for k in BN_LAYER]
        plain_terms[:, j] = [-lr * float((gm_q[k] * g_q[k]).sum()) for k in PLAIN_LAYER]
    return bn_terms, plain_terms
