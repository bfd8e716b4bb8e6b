"""The study's toy model: one convolutional channel and a linear classifier, with and without BN.

Model. A 1-D signal x (length L) goes through one convolution channel with kernel
w (size k, "valid" padding) to a feature map h = conv(w, x) of P = L - k + 1
positions. The plain model adds a conv bias c; the BN model normalizes the
channel with the batch statistics over all samples and positions, like
BatchNorm1d/2d, ĥ = γ (h - μ_B)/σ_B + β with σ_B = sqrt(var_B + eps). A linear
classifier z = A ĥ + b (A: C x P) reads the whole feature map. Training is
full-batch gradient descent on the mean cross-entropy, so every sample's output
in train mode is a fixed function of the parameters (the batch is the data set).
The outlier margin is the smooth margin of DESIGN.md, m = z_y - logsumexp_{c≠y} z_c.

Derivation (the claim being checked). Hold μ_B, σ_B fixed within a step. Then
∂ĥ/∂w = (γ/σ) ∂h/∂w. At BN state (w, γ, β, A, b) the BN model computes exactly
the function of the plain model with the *matched* weights w̃ = (γ/σ) w,
c̃ = β - γ μ/σ and the same A, b (h is linear in w). By the chain rule
∇_w L = (γ/σ) ∇_w̃ L̃ and ∇_w m = (γ/σ) ∇_w̃ m̃, so a gradient step on w changes
an outlier's margin by, to first order,

    Δm ≈ -η ∇_w m · ∇_w L = (γ/σ)² · (-η ∇_w̃ m̃ · ∇_w̃ L̃) = (γ/σ)² Δm̃,

where Δm̃ is the matched plain model's change for a step of the same η on w̃.
Put differently: BN trains the conv weights like the plain model at learning rate
η (γ/σ)². Assumptions: a single conv layer; batch statistics fixed within the step;
first order in η; only the conv weights' contribution to Δm; BN and plain models
compared at matched states (same function, same classifier).

Where the simulation leaves the assumptions, and what it measures for each:

* finite η ("frozen" probe): with frozen statistics the BN conv step is exactly the
  plain step at learning rate η(γ/σ)², so the measured ratio differs from (γ/σ)²
  only through the curvature of m along that step; the error grows ~linearly with
  η (``lr_sweep``). It stays bounded (a few %, then falls back) for huge steps
  because m is a smooth max of logits linear in w̃, hence asymptotically linear
  along any ray, and the ratio of two such differences returns to (γ/σ)².
* moving batch statistics ("live" probe, the real BN step on w): μ and σ depend on
  w. Differentiating through them gives ∂ĥ/∂w = (γ/σ) Π ∂h/∂w with
  Π v = v - mean(v)·1 - mean(x̂ v)·x̂ on the (N·P)-dim feature space (x̂ the
  normalized features; Π projects off the batch-mean direction and the current
  feature direction, up to eps). Hence Δm_live ≈ (γ/σ)² ρ Δm̃ with
  ρ = (JᵀΠg_m · JᵀΠg_L)/(Jᵀg_m · Jᵀg_L), J = ∂h/∂w, g = ∂(m, L)/∂ĥ: the factor
  (γ/σ)² survives, but BN removes the two feature directions that β and γ
  control (shift and scale of the channel). In this toy those carry most of the
  plain model's conv-driven margin growth, so ρ is small and often negative:
  (γ/σ)² alone does not predict the real step, (γ/σ)² ρ does.
* γ, β, A, b also trained ("full" probe): one step on all parameters of both
  matched models. The classifier's contribution is identical in both; BN's β, γ
  take the place of the removed directions; this is the per-step growth the
  trajectories actually see.
* The trajectories are two separate runs from a functionally matched start (the
  plain model starts at the BN model's effective weights), not matched states.

Outliers and γ: the "control" run trains the BN model from the same start on the
same data with every outlier replaced by its clean counterpart (its true label,
or the clean input it replaced), so any difference in γ is caused by the outliers.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from bnmem.errors import BnmemError
from bnmem.io import atomic_path, ensure_dir, write_json

Params = dict[str, torch.Tensor]
DTYPE = torch.float64
OUTLIER_KINDS = ("flip", "ood")
# Mean cross-entropy starts near log(C) and a converging run only lowers it; a
# run past this has blown up (at lr ≳ 2 the BN run's weights grow geometrically).
DIVERGED_LOSS = 1e3


@dataclass(frozen=True)
class TheoryConfig:
    """Everything that defines one toy-model simulation (all plain ints/floats/str)."""

    steps: int = 400
    lr: float = 0.05
    n_outliers: int = 4
    seed: int = 0
    n_per_class: int = 20
    n_classes: int = 3
    length: int = 32
    kernel_size: int = 5
    noise: float = 0.3
    outlier_kind: str = "flip"
    bn_eps: float = 1e-5
    # Probe learning rates, as multiples of lr, for the first-order check; probed
    # every ``sweep_every`` steps of the BN run.
    sweep_factors: tuple[float, ...] = (0.25, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0)
    sweep_every: int = 10

    def validate(self) -> None:
        """Raise BnmemError for values a user could pass that make no sense."""
        if self.steps < 1:
            raise BnmemError(f"steps must be at least 1, got {self.steps}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise BnmemError(f"lr must be a positive number, got {self.lr}")
        if self.n_classes < 2:
            raise BnmemError(f"n_classes must be at least 2, got {self.n_classes}")
        if self.n_per_class < 2:
            raise BnmemError(f"n_per_class must be at least 2, got {self.n_per_class}")
        n = self.n_classes * self.n_per_class
        if not 1 <= self.n_outliers < n:
            raise BnmemError(f"n_outliers must be between 1 and {n - 1}, got {self.n_outliers}")
        if self.kernel_size < 1 or self.length <= self.kernel_size:
            raise BnmemError(
                f"need 1 <= kernel_size < length, got kernel_size={self.kernel_size}, length={self.length}"
            )
        if self.noise < 0:
            raise BnmemError(f"noise must be >= 0, got {self.noise}")
        if self.outlier_kind not in OUTLIER_KINDS:
            raise BnmemError(
                f"unknown outlier_kind {self.outlier_kind!r}; choose one of {', '.join(OUTLIER_KINDS)}"
            )
        if self.sweep_every < 1:
            raise BnmemError(f"sweep_every must be at least 1, got {self.sweep_every}")


@dataclass(frozen=True)
class ToyData:
    """Training set with outliers, and the same set with each outlier replaced by its clean counterpart."""

    x: torch.Tensor  # (N, L) float64
    y: torch.Tensor  # (N,) int64
    outlier_idx: torch.Tensor  # (n_outliers,) int64, sorted
    x_clean: torch.Tensor
    y_clean: torch.Tensor


def make_toy_data(cfg: TheoryConfig) -> ToyData:
    """Classes are Gaussian bumps at class-specific positions (random shift, white noise).

    Outliers: ``flip`` gives a sample a wrong label; ``ood`` replaces its input by
    white noise of unit variance and gives it a random label. Both need the
    classifier to fit the sample's own noise, i.e. to memorize it.
    """
    g = torch.Generator().manual_seed(cfg.seed)
    c, n_pc, length = cfg.n_classes, cfg.n_per_class, cfg.length
    n = c * n_pc
    y = torch.arange(c).repeat_interleave(n_pc)
    pos = torch.arange(length, dtype=DTYPE)
    shift = (torch.rand(n, generator=g, dtype=DTYPE) * 2 - 1) * (length / (c + 1) / 4)
    centers = (y.to(DTYPE) + 1) * length / (c + 1) + shift
    width = max(1.0, length / (8 * c))
    x = torch.exp(-0.5 * ((pos[None] - centers[:, None]) / width) ** 2)
    x = x + cfg.noise * torch.randn(n, length, generator=g, dtype=DTYPE)

    idx = torch.randperm(n, generator=g)[: cfg.n_outliers].sort().values
    x_out, y_out = x.clone(), y.clone()
    if cfg.outlier_kind == "flip":
        # A uniformly random *other* class: add 1..C-1 modulo C.
        y_out[idx] = (y[idx] + torch.randint(1, c, (len(idx),), generator=g)) % c
    else:
        x_out[idx] = torch.randn(len(idx), length, generator=g, dtype=DTYPE)
        y_out[idx] = torch.randint(0, c, (len(idx),), generator=g)
    return ToyData(x=x_out, y=y_out, outlier_idx=idx, x_clean=x, y_clean=y)


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


def plain_features(params: Params, x: torch.Tensor) -> torch.Tensor:
    return conv_features(x, params["w"]) + params["c"]


def plain_forward(params: Params, x: torch.Tensor) -> torch.Tensor:
    """Logits of the model without normalization (conv with bias, same classifier)."""
    return plain_features(params, x) @ params["A"].T + params["b"]


def smooth_margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """m = z_y - logsumexp_{c != y} z_c per row (DESIGN.md's LiRA statistic, from logits)."""
    zy = logits.gather(1, y[:, None]).squeeze(1)
    others = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), -math.inf)
    return zy - torch.logsumexp(others, dim=1)


def matched_plain_params(bn_params: Params, mu: torch.Tensor, sigma: torch.Tensor) -> Params:
    """Plain-model weights computing exactly the BN model's function on this batch.

    γ (conv(w) - μ)/σ + β = conv((γ/σ) w) + (β - γ μ/σ) because conv is linear in w.
    """
    scale = bn_params["gamma"] / sigma
    return {
        "w": (scale * bn_params["w"]).detach().clone(),
        "c": (bn_params["beta"] - scale * mu).detach().clone(),
        "A": bn_params["A"].detach().clone(),
        "b": bn_params["b"].detach().clone(),
    }


def _leaf(params: Params) -> Params:
    return {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}


def _grads(loss: torch.Tensor, params: Params) -> Params:
    names = list(params)
    return dict(zip(names, torch.autograd.grad(loss, [params[k] for k in names])))


def _step(params: Params, grads: Params, lr: float, only: str | None = None) -> Params:
    """Parameters after one GD step, on all of them or only on ``only``."""
    return {
        k: (v - lr * grads[k]).detach() if only in (None, k) else v.detach()
        for k, v in params.items()
    }


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
    # ∂m_i/∂z_i = e_y - softmax over the other classes (0 at y); only row i is nonzero.
    z_o = logits[idx].masked_fill(onehot[idx].bool(), -math.inf)
    dm_dz = onehot[idx] - torch.softmax(z_o, 1)
    g_m = torch.zeros(len(idx), *g_loss.shape, dtype=logits.dtype)
    g_m[torch.arange(len(idx)), idx] = dm_dz @ a

    def proj(v: torch.Tensor) -> torch.Tensor:  # Π on the last two dims
        mean = v.mean(dim=(-2, -1), keepdim=True)
        corr = (xhat * v).mean(dim=(-2, -1), keepdim=True)
        return v - mean - xhat * corr

    def jt(v: torch.Tensor) -> torch.Tensor:  # Jᵀ v on the last two dims
        return torch.einsum("npk,...np->...k", patches, v)

    plain = jt(g_m) @ jt(g_loss)
    live = jt(proj(g_m)) @ jt(proj(g_loss))
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
    """Measure each outlier's one-step margin change under BN vs the matched plain model.

    Returns the probe and the real BN gradient (so training can reuse it).
    """
    p = _leaf(bn_params)
    logits, mu, sigma = bn_forward(p, x, eps)
    loss = F.cross_entropy(logits, y)
    g_live = _grads(loss, p)
    mu, sigma = mu.detach(), sigma.detach()
    stats = (mu, sigma)
    m0 = smooth_margin(logits.detach(), y)[idx]

    g_frozen = _grads(F.cross_entropy(bn_forward(p, x, eps, stats)[0], y), p)

    q = _leaf(matched_plain_params(p, mu, sigma))
    logits_q = plain_forward(q, x)
    g_plain = _grads(F.cross_entropy(logits_q, y), q)
    logits_q = logits_q.detach()
    m0_plain = smooth_margin(logits_q, y)[idx]
    with torch.no_grad():
        xhat = (conv_features(x, p["w"]) - mu) / sigma
        rho = live_projection_factor(x, y, idx, logits.detach(), q["A"].detach(), xhat)

    amp = float((p["gamma"].detach() / sigma) ** 2)
    ratio_frozen: dict[float, np.ndarray] = {}
    ratio_live: dict[float, np.ndarray] = {}
    dm_bn_live = dm_plain = np.zeros(len(idx))
    with torch.no_grad():
        for lr in lrs:
            d_plain = smooth_margin(plain_forward(_step(q, g_plain, lr, "w"), x), y)[idx] - m0_plain
            d_frozen = smooth_margin(bn_forward(_step(p, g_frozen, lr, "w"), x, eps, stats)[0], y)[idx] - m0
            d_live = smooth_margin(bn_forward(_step(p, g_live, lr, "w"), x, eps)[0], y)[idx] - m0
            ratio_frozen[lr] = (d_frozen / d_plain).numpy()
            ratio_live[lr] = (d_live / d_plain).numpy()
            if lr == lr_train:
                dm_bn_live, dm_plain = d_live.numpy(), d_plain.numpy()
        d_full_bn = smooth_margin(bn_forward(_step(p, g_live, lr_train), x, eps)[0], y)[idx] - m0
        d_full_plain = smooth_margin(plain_forward(_step(q, g_plain, lr_train), x), y)[idx] - m0_plain
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


def _fit_stats(logits: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[np.ndarray, float, float]:
    """Outlier margins, outlier accuracy (fit = memorized), accuracy on the other samples."""
    correct = (logits.argmax(1) == y).to(DTYPE)
    rest = torch.ones(len(y), dtype=torch.bool)
    rest[idx] = False
    return (
        smooth_margin(logits, y)[idx].numpy(),
        float(correct[idx].mean()),
        float(correct[rest].mean()),
    )


def _rel_err(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    return np.abs(measured - predicted) / np.abs(predicted)


@contextmanager
def _one_thread() -> Iterator[None]:
    """Tensors here are tiny: extra intra-op threads only add overhead (and the 2-core
    machines are shared), so run single-threaded and restore the caller's setting."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def simulate(cfg: TheoryConfig) -> dict[str, Any]:
    """Run the BN, plain and BN-control trajectories with per-step probes; return arrays.

    Raises:
        BnmemError: for an invalid config, or when a run diverges (lr too large).
    """
    cfg.validate()
    with _one_thread():
        return _simulate(cfg)


def _simulate(cfg: TheoryConfig) -> dict[str, Any]:
    data = make_toy_data(cfg)
    x, y, idx, eps, lr = data.x, data.y, data.outlier_idx, cfg.bn_eps, cfg.lr
    sweep_lrs = [lr * f for f in cfg.sweep_factors]
    init = init_bn_params(cfg)
    with torch.no_grad():
        _, mu0, sigma0 = bn_forward(init, x, eps)
    plain = matched_plain_params(init, mu0, sigma0)  # same function as BN at step 0
    bn = {k: v.clone() for k, v in init.items()}
    control = {k: v.clone() for k, v in init.items()}

    rec: dict[str, list] = {k: [] for k in (
        "gamma", "sigma", "amp_pred", "rho", "ratio_frozen", "ratio_live", "ratio_full",
        "dm_bn_live", "dm_plain", "margin_bn", "margin_plain", "outlier_acc_bn", "outlier_acc_plain",
        "clean_acc_bn", "clean_acc_plain", "loss_bn", "loss_plain",
        "gamma_control", "sigma_control", "loss_control", "match_gap",
    )}
    sweep_steps: list[int] = []
    sweep_frozen: list[np.ndarray] = []  # (n_lrs, n_outliers) per probed step
    sweep_live: list[np.ndarray] = []
    sweep_pred_live: list[np.ndarray] = []
    sweep_amp: list[float] = []

    for t in range(cfg.steps + 1):
        # --- BN run: probe at the current state, then take the real training step.
        do_sweep = t % cfg.sweep_every == 0
        lrs = sorted(set(sweep_lrs + [lr])) if do_sweep else [lr]
        probe, g_bn = probe_state(bn, x, y, idx, eps, lrs, lr)
        logits = probe.logits
        margins, acc_o, acc_c = _fit_stats(logits, y, idx)
        rec["gamma"].append(float(bn["gamma"]))
        rec["sigma"].append(probe.sigma)
        rec["match_gap"].append(probe.match_gap)
        rec["amp_pred"].append(probe.amp_pred)
        rec["rho"].append(probe.rho)
        rec["ratio_frozen"].append(probe.ratio_frozen[lr])
        rec["ratio_live"].append(probe.ratio_live[lr])
        rec["ratio_full"].append(probe.ratio_full)
        rec["dm_bn_live"].append(probe.dm_bn_live)
        rec["dm_plain"].append(probe.dm_plain)
        rec["margin_bn"].append(margins)
        rec["outlier_acc_bn"].append(acc_o)
        rec["clean_acc_bn"].append(acc_c)
        rec["loss_bn"].append(float(F.cross_entropy(logits, y)))
        if do_sweep:
            sweep_steps.append(t)
            sweep_frozen.append(np.stack([probe.ratio_frozen[s] for s in sweep_lrs]))
            sweep_live.append(np.stack([probe.ratio_live[s] for s in sweep_lrs]))
            sweep_pred_live.append(probe.amp_pred * probe.rho)
            sweep_amp.append(probe.amp_pred)

        # --- Plain run from the functionally matched start.
        q = _leaf(plain)
        logits_q = plain_forward(q, x)
        loss_q = F.cross_entropy(logits_q, y)
        g_q = _grads(loss_q, q)
        margins_q, acc_oq, acc_cq = _fit_stats(logits_q.detach(), y, idx)
        rec["margin_plain"].append(margins_q)
        rec["outlier_acc_plain"].append(acc_oq)
        rec["clean_acc_plain"].append(acc_cq)
        rec["loss_plain"].append(float(loss_q.detach()))

        # --- BN control: same start, outliers replaced by their clean counterparts.
        r = _leaf(control)
        logits_r, _, sigma_r = bn_forward(r, data.x_clean, eps)
        loss_r = F.cross_entropy(logits_r, data.y_clean)
        g_r = _grads(loss_r, r)
        rec["gamma_control"].append(float(control["gamma"]))
        rec["sigma_control"].append(float(sigma_r.detach()))
        rec["loss_control"].append(float(loss_r.detach()))

        for name, loss_t in (("BN", rec["loss_bn"][-1]), ("no-norm", rec["loss_plain"][-1]),
                             ("BN without outliers", rec["loss_control"][-1])):
            if not loss_t < DIVERGED_LOSS:  # also catches NaN
                raise BnmemError(f"the {name} run diverged at step {t} (lr={lr}); use a smaller lr")
        if t == cfg.steps:  # the last iteration only records the final state
            break
        bn = _step(bn, g_bn, lr)
        plain = _step(q, g_q, lr)
        control = _step(r, g_r, lr)

    out: dict[str, Any] = {k: np.array(v) for k, v in rec.items()}
    out["steps"] = np.arange(cfg.steps + 1)
    out["lr"] = lr
    out["outlier_idx"] = data.outlier_idx.numpy()
    out["sweep"] = {
        "lr_factors": np.array(cfg.sweep_factors),
        "lrs": np.array(sweep_lrs),
        "steps": np.array(sweep_steps),
        "amp_pred": np.array(sweep_amp),
        "ratio_frozen": np.stack(sweep_frozen),  # (n_probed_steps, n_lrs, n_outliers)
        "ratio_live": np.stack(sweep_live),
        "pred_live": np.stack(sweep_pred_live),  # (n_probed_steps, n_outliers)
    }
    return out


def summarize(sim: dict[str, Any]) -> dict[str, Any]:
    """Medians and trajectory highlights of a simulation (JSON-ready)."""
    amp = sim["amp_pred"][:, None]
    pred_live = amp * sim["rho"]
    sw = sim["sweep"]
    sw_amp = sw["amp_pred"][:, None, None]
    n_lrs = len(sw["lrs"])

    def by_lr(err: np.ndarray) -> list[float]:  # (steps, lrs, outliers) -> median per lr
        return np.median(err.transpose(1, 0, 2).reshape(n_lrs, -1), axis=1).tolist()

    frozen_err_by_lr = by_lr(_rel_err(sw["ratio_frozen"], sw_amp))
    live_err_by_lr = by_lr(_rel_err(sw["ratio_live"], sw["pred_live"][:, None, :]))
    naive_live_err_by_lr = by_lr(_rel_err(sw["ratio_live"], sw_amp))
    gamma, gamma_c = sim["gamma"], sim["gamma_control"]
    gs, gs_c = gamma / sim["sigma"], gamma_c / sim["sigma_control"]

    def first_fit(acc: np.ndarray) -> int | None:
        hit = np.nonzero(acc >= 1.0)[0]
        return int(hit[0]) if len(hit) else None

    return {
        "amplification": {
            "predicted_median": float(np.median(amp)),
            "frozen_stats_median_rel_error": float(np.median(_rel_err(sim["ratio_frozen"], amp))),
            "frozen_stats_max_rel_error": float(np.max(_rel_err(sim["ratio_frozen"], amp))),
            "live_vs_gamma_sigma_sq_median_rel_error": float(np.median(_rel_err(sim["ratio_live"], amp))),
            "live_vs_gamma_sigma_sq_rho_median_rel_error": float(
                np.median(_rel_err(sim["ratio_live"], pred_live))
            ),
            "rho_median": float(np.median(sim["rho"])),
            "live_ratio_median": float(np.median(sim["ratio_live"])),
            "full_step_ratio_median": float(np.median(sim["ratio_full"])),
            "matched_state_max_logit_gap": float(np.max(sim["match_gap"])),
        },
        "lr_sweep": {
            "lrs": sw["lrs"].tolist(),
            "frozen_median_rel_error": frozen_err_by_lr,
            "live_vs_gamma_sigma_sq_rho_median_rel_error": live_err_by_lr,
            "live_vs_gamma_sigma_sq_median_rel_error": naive_live_err_by_lr,
        },
        "gamma": {
            "with_outliers_final": float(gamma[-1]),
            "without_outliers_final": float(gamma_c[-1]),
            "with_outliers_growth": float(gamma[-1] - gamma[0]),
            "without_outliers_growth": float(gamma_c[-1] - gamma_c[0]),
            "growth_ratio_with_vs_without": float((gamma[-1] - gamma[0]) / (gamma_c[-1] - gamma_c[0])),
            "gamma_over_sigma_with_outliers_final": float(gs[-1]),
            "gamma_over_sigma_without_outliers_final": float(gs_c[-1]),
            # From this step on γ stays above the control's (None if it ends below).
            "higher_with_outliers_from_step": (
                None if gamma[-1] <= gamma_c[-1]
                else int(np.nonzero(gamma <= gamma_c)[0][-1] + 1) if np.any(gamma <= gamma_c) else 0
            ),
        },
        "margins": {
            "bn_final_mean": float(sim["margin_bn"][-1].mean()),
            "plain_final_mean": float(sim["margin_plain"][-1].mean()),
            "bn_first_step_all_outliers_fit": first_fit(sim["outlier_acc_bn"]),
            "plain_first_step_all_outliers_fit": first_fit(sim["outlier_acc_plain"]),
            "bn_final_outlier_acc": float(sim["outlier_acc_bn"][-1]),
            "plain_final_outlier_acc": float(sim["outlier_acc_plain"][-1]),
            "bn_final_clean_acc": float(sim["clean_acc_bn"][-1]),
            "plain_final_clean_acc": float(sim["clean_acc_plain"][-1]),
        },
    }


def plot_theory(sim: dict[str, Any], summary: dict[str, Any], path: str | Path) -> None:
    """Four panels: amplification (measured vs predicted), outlier margins, γ with/without
    outliers, and the first-order error against the probe learning rate. Saved atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = sim["steps"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    ax = axes[0, 0]
    amp = sim["amp_pred"]
    every = max(1, len(steps) // 40)  # markers every few steps so the lines stay visible
    ax.plot(steps, amp, "-", color="tab:red", lw=1.5, label="predicted (γ/σ)²")
    ax.plot(steps[::every], np.median(sim["ratio_frozen"], 1)[::every], "o", ms=4, mfc="none",
            color="tab:red", label="measured, batch stats frozen")
    ax.plot(steps, np.median(amp[:, None] * sim["rho"], 1), "-", color="tab:green", lw=1.5,
            label="predicted (γ/σ)²·ρ (stats move)")
    ax.plot(steps[::every], np.median(sim["ratio_live"], 1)[::every], "x", ms=4, color="tab:green",
            label="measured, real BN step on w")
    ax.plot(steps, np.median(sim["ratio_full"], 1), ":", color="tab:gray", label="measured, all params stepped")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set(xlabel="step", ylabel="Δm_BN / Δm_no-norm per step (median over outliers)",
           title="outlier margin growth: BN vs matched no-norm model")

    ax = axes[0, 1]
    for j in range(sim["margin_bn"].shape[1]):
        ax.plot(steps, sim["margin_bn"][:, j], color="tab:red", alpha=0.3, lw=0.8)
        ax.plot(steps, sim["margin_plain"][:, j], color="tab:blue", alpha=0.3, lw=0.8)
    ax.plot(steps, sim["margin_bn"].mean(1), color="tab:red", lw=2, label="BN (mean over outliers)")
    ax.plot(steps, sim["margin_plain"].mean(1), color="tab:blue", lw=2, label="no norm (mean)")
    ax.axhline(0, color="k", lw=0.5)
    ax.set(xlabel="step", ylabel="outlier margin m", title="outlier margins over training")

    ax = axes[1, 0]
    ax.plot(steps, sim["gamma"], color="tab:red", lw=2, label="γ, with outliers")
    ax.plot(steps, sim["gamma_control"], color="tab:orange", lw=2, label="γ, outliers replaced by clean")
    ax2 = ax.twinx()
    ax2.plot(steps, sim["gamma"] / sim["sigma"], "--", color="tab:red", label="γ/σ, with outliers")
    ax2.plot(steps, sim["gamma_control"] / sim["sigma_control"], "--", color="tab:orange",
             label="γ/σ, without")
    ax2.set_ylabel("γ/σ (dashed)")
    ax.set(xlabel="step", ylabel="γ (solid)", title="BN scale γ over training")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")

    ax = axes[1, 1]
    sw = summary["lr_sweep"]
    ax.loglog(sw["lrs"], sw["frozen_median_rel_error"], "o-", color="tab:red", label="frozen stats vs (γ/σ)²")
    ax.loglog(sw["lrs"], sw["live_vs_gamma_sigma_sq_rho_median_rel_error"], "s-", color="tab:green",
              label="real BN step vs (γ/σ)²·ρ")
    ax.loglog(sw["lrs"], sw["live_vs_gamma_sigma_sq_median_rel_error"], "x--", color="tab:gray",
              label="real BN step vs (γ/σ)²")
    ax.axvline(sim["lr"], color="k", lw=0.5, ls=":")
    ax.set(xlabel="probe learning rate", ylabel="median relative error",
           title="first-order prediction error vs step size")
    for a in (axes[0, 0], axes[0, 1], axes[1, 1]):
        a.legend(fontsize=8)
    for a in axes.flat:
        a.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def run_theory(
    out_dir: str | Path,
    *,
    steps: int = 400,
    lr: float = 0.05,
    n_outliers: int = 4,
    seed: int = 0,
    n_per_class: int = 20,
    noise: float = 0.3,
    kernel_size: int = 5,
    outlier_kind: str = "flip",
    plot: bool = True,
) -> dict[str, Any]:
    """Simulate the toy model and write ``theory.json`` (and ``theory.png``) into ``out_dir``.

    Args:
        out_dir: directory for the outputs (created if missing).
        steps: full-batch gradient-descent steps of each run.
        lr: learning rate of every run, and of the per-step probes.
        n_outliers: corrupted training samples (out of 3 * n_per_class).
        seed: seeds data, corruption and initialization; same seed, same numbers.
        n_per_class: clean samples per class (3 classes).
        noise: standard deviation of the white noise on every signal.
        kernel_size: conv kernel length (signals have length 32).
        outlier_kind: "flip" (wrong label) or "ood" (noise input, random label).
        plot: also write ``theory.png``.

    Returns:
        The summary written under ``"summary"`` in theory.json.

    Raises:
        BnmemError: for invalid arguments or an unwritable ``out_dir``.
    """
    cfg = TheoryConfig(
        steps=int(steps), lr=float(lr), n_outliers=int(n_outliers), seed=int(seed),
        n_per_class=int(n_per_class), noise=float(noise), kernel_size=int(kernel_size),
        outlier_kind=str(outlier_kind),
    )
    cfg.validate()
    out = ensure_dir(out_dir)
    sim = simulate(cfg)
    summary = summarize(sim)
    amp = sim["amp_pred"]
    sw = sim["sweep"]
    doc = {
        "config": asdict(cfg),
        "model": (
            "1 conv channel (no padding) -> [BN over samples and positions] -> linear classifier on the "
            "feature map; full-batch GD on mean cross-entropy, float64; BN always in train mode (the batch "
            "is the whole training set); plain model starts at the BN model's effective weights"
        ),
        "margin": "m = z_y - logsumexp_{c != y} z_c (logits)",
        "ratios": (
            "Δm_BN / Δm_plain for one GD step at lr, BN state vs the plain model with matched weights "
            "w~ = (γ/σ)w, c~ = β - γμ/σ. frozen: step on w with batch stats frozen (derivation's "
            "assumptions; predicted (γ/σ)²). live: the real BN step on w (stats move; "
            "predicted (γ/σ)²·ρ). "
            "full: every parameter of both models stepped (no prediction)."
        ),
        "summary": summary,
        "outlier_idx": sim["outlier_idx"],
        "per_step": {
            "step": sim["steps"],
            "gamma": sim["gamma"],
            "sigma": sim["sigma"],
            "predicted_amplification": amp,
            "rho": sim["rho"],
            "predicted_live_amplification": amp[:, None] * sim["rho"],
            "measured_frozen": sim["ratio_frozen"],
            "measured_live": sim["ratio_live"],
            "measured_full": sim["ratio_full"],
            "dm_bn_live": sim["dm_bn_live"],
            "dm_plain": sim["dm_plain"],
            "margin_bn": sim["margin_bn"],
            "margin_plain": sim["margin_plain"],
            "outlier_acc_bn": sim["outlier_acc_bn"],
            "outlier_acc_plain": sim["outlier_acc_plain"],
            "clean_acc_bn": sim["clean_acc_bn"],
            "clean_acc_plain": sim["clean_acc_plain"],
            "loss_bn": sim["loss_bn"],
            "loss_plain": sim["loss_plain"],
            "gamma_without_outliers": sim["gamma_control"],
            "sigma_without_outliers": sim["sigma_control"],
            "loss_without_outliers": sim["loss_control"],
        },
        "lr_sweep": {
            "lrs": sw["lrs"],
            "steps": sw["steps"],
            "predicted_amplification": sw["amp_pred"],
            "measured_frozen": sw["ratio_frozen"],
            "measured_live": sw["ratio_live"],
            "predicted_live_amplification": sw["pred_live"],
        },
    }
    write_json(out / "theory.json", doc)
    if plot:
        plot_theory(sim, summary, out / "theory.png")
    return summary
