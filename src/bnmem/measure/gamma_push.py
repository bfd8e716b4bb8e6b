"""Which training examples push BN's γ up (claim 7): each example's own loss gradient on γ.

In training mode a BN layer normalizes with the statistics of the whole batch,
so example i's loss ℓ_i depends on every example's activations wherever another
BN layer follows. Example i's push on |γ_c| is −sign(γ_c)·∂ℓ_i/∂γ_c, the
gradient of its OWN loss through the batch statistics (the batch is the
normalization batch, training-mode BN). Its sum over a group of examples is
exactly the gradient of the group's summed loss, so one backward per group
gives the outliers' and everyone's summed push per channel
(:func:`gamma_pushes`); :func:`per_example_grads` gives the pushes and the
all-parameter gradient norms of single examples (one row of the Jacobian of
the batch's loss vector each), the slow path the tests compare with
autograd on one example's loss alone.

Plan 3.0 attributed row i of ∂(Σ_j ℓ_j)/∂y to example i instead; that equals
∂ℓ_i/∂y only when no BN follows the layer. The pass still records that
attribution (``outlier_rows``) so plan 3.0's verdict stays visible.

Per layer the pass also records the radial component Σ_c(γ_c·∂L/∂γ_c + β_c·∂L/∂β_c)
of the summed loss's gradient: a layer followed by another BN before the loss
is scale-invariant in (γ, β), so that component vanishes (≈ 1e-6 of
‖(γ, β)‖·‖∇‖ in float32) and the net push of such a layer says nothing about
who grows its γ (its norm grows only at second order, from every gradient).

Per measured epoch the pass records, for the normalization of claim 7, the
all-parameter gradient norm ‖∇θ ℓ_i‖ (same batches, training mode) summed over
the outliers and over a fixed seeded sample of the clean examples (scaled up to
all of them: an unbiased estimate of their sum), and the outliers' training
accuracy in the same pass (batch statistics) for the before/after-fit split.

Two paths give the same numbers (to float64 round-off; tested): ``rows``, per batch
one batched backward of the two group sums to γ, β and the BN outputs plus one
Jacobian row per measured example over every parameter; and ``stacked`` (the
default where :mod:`bnmem.measure.batch_rows` covers the layers), every row of a
batch — the two group sums and one row per measured example — in one batched
backward to the layer outputs only, each row's parameter gradients from the
layers' identities. The stacked path is checked against the rows path on one
example per call and falls back to it on a mismatch (with a warning); on the
demo's digits LeNet it took 0.65-0.8 of the rows path's time (per call and over a
20-epoch job; the 2-core machine's load moved it), on ResNet-20 it was slower, so ``auto`` takes it only where it was measured faster
(:func:`bnmem.measure.batch_rows.stacked_pays`; ``benchmarks/bench_hooks.py``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bnmem.errors import BnmemError
from bnmem.measure.batch_rows import batched_grads, rows_unsupported, stacked_pays, stacked_rows
from bnmem.measure.ghost import GhostUnsupported
from bnmem.measure.hooks import removed_after
from bnmem.measure.predict import bn_query_mode
from bnmem.models.norms import batch_sigma, batchnorm_layers

# Keeps the pass's batch order apart from the data seed's other streams.
_PUSH_STREAM = 0x7A11
# Keeps the clean sample of the gradient-norm normalization apart from the batch order.
_NORM_STREAM = 0x7A12
# The record's format: 2 = own-loss pushes (plan 4.0); records without it are plan 3.0's row attribution.
PUSH_VERSION = 2
# Jacobian rows per batched backward: at most 32, and at most ~256 MB of rows × parameters.
_ROW_CHUNK = 32
_ROW_BYTES = 256 * 2**20
PUSH_METHODS = ("auto", "stacked", "rows")


def _batch_order(n: int, batch_size: int, seed: int) -> list[np.ndarray]:
    perm = np.random.default_rng([int(seed), _PUSH_STREAM]).permutation(n)
    return [perm[i:i + batch_size] for i in range(0, n, batch_size) if len(perm[i:i + batch_size]) >= 2]


def clean_sample(outlier: np.ndarray, size: int | None, seed: int) -> np.ndarray:
    """Boolean mask of the fixed seeded sample of clean examples whose gradient norms are measured
    (``size`` None or at least the number of clean examples: all of them)."""
    outlier = np.asarray(outlier, dtype=bool)
    clean = np.flatnonzero(~outlier)
    mask = np.zeros(outlier.shape, dtype=bool)
    if size is None or size >= clean.size:
        mask[clean] = True
    else:
        mask[np.random.default_rng([int(seed), _NORM_STREAM]).choice(clean, size=size, replace=False)] = True
    return mask


def affine_bn_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's BatchNorm layers with a learnable γ and β (the layers claim 7 measures)."""
    return [(n, m) for n, m in batchnorm_layers(model)
            if getattr(m, "weight", None) is not None and getattr(m, "bias", None) is not None]


def _jacobian_rows(losses: torch.Tensor, params: list[torch.Tensor], positions: list[int]
                   ) -> list[list[torch.Tensor]]:
    """Per parameter, the gradients of the losses at ``positions`` (one row each), in chunks."""
    out: list[list[torch.Tensor]] = [[] for _ in params]
    eye = torch.eye(losses.shape[0], dtype=losses.dtype, device=losses.device)
    size = sum(p.numel() * p.element_size() for p in params)
    chunk = max(1, min(_ROW_CHUNK, _ROW_BYTES // max(1, size)))
    for s in range(0, len(positions), chunk):
        part = positions[s:s + chunk]
        for k, r in enumerate(batched_grads(losses, params, eye[part])):
            out[k].append(r)
    return [torch.cat(c) if c else p.new_zeros((0, *p.shape)) for c, p in zip(out, params)]


def per_example_grads(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, positions: list[int] | None = None
                      ) -> dict[str, Any]:
    """Each example's own-loss gradient inside one training-mode batch (the slow, per-row path).

    Args:
        model: the model (switched to BN batch statistics for the pass; mode and buffers restored).
        xb, yb: one normalization batch.
        positions: the examples of the batch to differentiate (default: all).

    Returns:
        ``{"push": {layer: (rows, channels) −sign(γ)·∂ℓ_i/∂γ}, "grad_norm": (rows,) ‖∇θ ℓ_i‖ over every
        trainable parameter}`` as float64 numpy arrays.
    """
    positions = list(range(xb.shape[0])) if positions is None else list(positions)
    layers = affine_bn_layers(model)
    params = [p for p in model.parameters() if p.requires_grad]
    with bn_query_mode(model, "batch"), torch.enable_grad():
        losses = F.cross_entropy(model(xb), yb, reduction="none")
        rows = _jacobian_rows(losses, params, positions)
    by_id = {id(p): r for p, r in zip(params, rows)}
    push = {n: (-torch.sign(m.weight.detach()) * by_id[id(m.weight)]).double().cpu().numpy() for n, m in layers}
    sq = sum(r.double().pow(2).flatten(1).sum(1) for r in rows)
    return {"push": push, "grad_norm": torch.sqrt(sq).cpu().numpy()}


def _x_hat_hook(seen: dict[str, tuple[torch.Tensor, torch.Tensor]], name: str, eps: float):
    def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
        inp = args[0].detach()
        dims = [d for d in range(inp.ndim) if d != 1]
        shape = [1, -1] + [1] * (inp.ndim - 2)
        seen[name] = (out, (inp - inp.mean(dim=dims).view(shape)) / batch_sigma(inp, eps).view(shape))

    return hook


class _Sums:
    """Float64 accumulators of one pass, on the model's device (one transfer at the end)."""

    def __init__(self, layers: list[tuple[str, nn.Module]], device: torch.device) -> None:
        def z(m: nn.Module) -> torch.Tensor:
            return torch.zeros(m.num_features, dtype=torch.float64, device=device)

        self.layers = {n: {"outlier": z(m), "all": z(m), "outlier_rows": z(m)} for n, m in layers}
        self.radial = {n: 0.0 for n, _ in layers}
        self.grad_norm = {n: 0.0 for n, _ in layers}
        self.norms = {"outlier": 0.0, "clean_sampled": 0.0}
        self.correct = 0

    def add_layer(self, n: str, m: nn.Module, g_gamma: torch.Tensor, g_beta: torch.Tensor, g_out_all: torch.Tensor,
                  x_hat: torch.Tensor, out_b: torch.Tensor) -> None:
        """One batch's contribution of BN layer ``n`` (module ``m``): ``g_gamma``/``g_beta`` rows 0 and 1 are
        the gradients of the outliers' and of everyone's summed loss; ``g_out_all`` is the latter's gradient on
        the layer's output, ``x_hat`` its normalized input."""
        sign = -torch.sign(m.weight.detach())
        acc = self.layers[n]
        acc["outlier"] += (sign * g_gamma[0]).double()
        acc["all"] += (sign * g_gamma[1]).double()
        # plan 3.0's attribution: row i of ∂(Σ_j ℓ_j)/∂y · x̂ credited to example i
        terms = g_out_all * x_hat
        terms = terms.sum(dim=[d for d in range(terms.ndim) if d > 1]) if terms.ndim > 2 else terms
        acc["outlier_rows"] += (sign * terms[out_b].sum(0)).double()
        self.radial[n] += float((m.weight.detach() * g_gamma[1]).sum() + (m.bias.detach() * g_beta[1]).sum())
        self.grad_norm[n] += float(torch.cat([g_gamma[1], g_beta[1]]).double().norm())

    def add_norms(self, norms: torch.Tensor, is_out: torch.Tensor) -> None:
        """The measured examples' all-parameter gradient norms, summed over the outliers and the clean sample."""
        self.norms["outlier"] += float(norms[is_out].sum())
        self.norms["clean_sampled"] += float(norms[~is_out].sum())

    def result(self, layers: list[tuple[str, nn.Module]]) -> dict[str, dict[str, Any]]:
        out = {}
        for n, m in layers:
            theta = torch.cat([m.weight.detach(), m.bias.detach()]).double()
            out[n] = {**{k: v.cpu().tolist() for k, v in self.layers[n].items()}, "radial": self.radial[n],
                      "param_norm": float(theta.norm()), "grad_norm": self.grad_norm[n]}
        return out


def _batch_pass(model: nn.Module, layers: list[tuple[str, nn.Module]], seen: dict, xb: torch.Tensor,
                yb: torch.Tensor, out_b: torch.Tensor, norm_b: torch.Tensor, sums: _Sums) -> None:
    """Accumulate one normalization batch's group pushes, radial components, row attribution and norms."""
    seen.clear()
    logits = model(xb)
    losses = F.cross_entropy(logits, yb, reduction="none")
    sums.correct += int((logits.argmax(1) == yb)[out_b].sum())
    gammas = [m.weight for _, m in layers]
    betas = [m.bias for _, m in layers]
    outs = [seen[n][0] for n, _ in layers]
    weights = torch.stack([out_b.to(losses.dtype), torch.ones_like(losses)])  # row 0: the outliers' loss; 1: all
    grads = batched_grads(losses, gammas + betas + outs, weights)
    k = len(layers)
    for j, (n, m) in enumerate(layers):
        sums.add_layer(n, m, grads[j], grads[k + j], grads[2 * k + j][1], seen[n][1], out_b)
    positions = torch.nonzero(out_b | norm_b).ravel().tolist()
    if positions:
        params = [p for p in model.parameters() if p.requires_grad]
        rows = _jacobian_rows(losses, params, positions)
        sums.add_norms(torch.sqrt(sum(r.double().pow(2).flatten(1).sum(1) for r in rows)), out_b[positions])


def _stacked_pass(model: nn.Module, layers: list[tuple[str, nn.Module]], xb: torch.Tensor, yb: torch.Tensor,
                  out_b: torch.Tensor, norm_b: torch.Tensor, sums: _Sums, cache: dict, check: bool) -> None:
    """:func:`_batch_pass`'s sums from one batched backward to the layer outputs (every row at once: the two
    group sums, then one row per outlier and sampled clean example; parameter gradients by the identities of
    :mod:`bnmem.measure.batch_rows`). ``check``: compare the first row's norm with the per-row path."""
    with torch.no_grad():  # the same forward as the per-row path: the same accuracy, bit for bit
        logits = model(xb)
    sums.correct += int((logits.argmax(1) == yb)[out_b].sum())
    positions = torch.nonzero(out_b | norm_b).ravel()
    eye = torch.eye(xb.shape[0], dtype=xb.dtype, device=xb.device)
    weights = torch.cat([torch.stack([out_b.to(xb.dtype), torch.ones_like(eye[0])]), eye[positions]])
    rows = stacked_rows(model, xb, yb, weights, cache)
    for n, m in layers:
        g_gamma, g_beta = rows.bn_affine(n)
        sums.add_layer(n, m, g_gamma, g_beta, rows.output_grad(n)[1], rows.x_hat(n), out_b)
    if positions.numel():
        norms = torch.sqrt(rows.sq_norms()[2:])
        if check:
            _check_row(model, xb, yb, int(positions[0]), float(norms[0]))
        sums.add_norms(norms, out_b[positions])


def _check_row(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, position: int, norm: float) -> None:
    """One example's norm by the stacked rows against the per-row path (a layer used in a way the identities
    do not cover would show here); the tolerance is √eps of the model's dtype. The model is in BN batch mode."""
    params = [p for p in model.parameters() if p.requires_grad]
    rows = _jacobian_rows(F.cross_entropy(model(xb), yb, reduction="none"), params, [position])
    ref = float(torch.sqrt(sum(r.double().pow(2).sum() for r in rows)))
    if not abs(norm - ref) <= torch.finfo(xb.dtype).eps ** 0.5 * abs(ref):
        raise GhostUnsupported(f"stacked rows disagree with the per-row path ({norm} vs {ref})")


def gamma_pushes(model: nn.Module, x: torch.Tensor, y: torch.Tensor, outlier: np.ndarray, batch_size: int,
                 seed: int = 0, norm_sample: int | None = None, method: str = "auto") -> dict[str, Any]:
    """One pass over the training set in training mode: the outliers' and everyone's summed push on |γ|.

    Args:
        model: a model with affine BatchNorm layers (others are skipped).
        x, y: the training set.
        outlier: boolean mask over the training set.
        batch_size: normalization batch (the training batch size).
        seed: seeds the batch order (a fixed permutation) and the clean sample.
        norm_sample: clean examples whose gradient norms are measured (None: all).
        method: ``stacked`` (every row of a batch in one batched backward to the layer outputs,
            :func:`bnmem.measure.batch_rows.stacked_rows`), ``rows`` (batched backwards to the parameters,
            the path it is tested against) or ``auto`` (stacked where the layers allow it and it was measured
            faster, :func:`bnmem.measure.batch_rows.stacked_pays`, self-checked on one example per call; else
            rows).

    Returns:
        ``{"version", "layers": {layer: {"outlier", "all", "outlier_rows": [per channel], "radial",
        "param_norm", "grad_norm"}}, "grad_norm": {"outlier", "clean_sampled", "n_outlier", "n_clean",
        "n_clean_sampled"}, "outlier_acc"}``: pushes Σ_i −sign(γ_c)·∂ℓ_i/∂γ_c (cross-entropy per example,
        batch statistics); ``radial`` = Σ over batches of Σ_c(γ_c·∂L_b/∂γ_c + β_c·∂L_b/∂β_c), ``grad_norm`` of a
        layer = Σ over batches of ‖(∂L_b/∂γ, ∂L_b/∂β)‖. The model's weights, buffers, gradients and mode
        are unchanged. Empty dict without affine BN layers.
    """
    if method not in PUSH_METHODS:
        raise BnmemError(f"unknown push method {method!r}; choose one of {', '.join(PUSH_METHODS)}")
    if method == "stacked" and rows_unsupported(model) is not None:
        raise BnmemError(f"the stacked path does not cover this model: {rows_unsupported(model)}; use 'rows'")
    layers = affine_bn_layers(model)
    if not layers:
        return {}
    outlier = np.asarray(outlier, dtype=bool)
    sample = clean_sample(outlier, norm_sample, seed)
    if method == "stacked" or (method == "auto" and rows_unsupported(model) is None and stacked_pays(model, x)):
        try:
            sums = _pass(model, layers, x, y, outlier, sample, batch_size, seed, "stacked")
        except GhostUnsupported as e:
            if method == "stacked":
                raise
            warnings.warn(f"stacked rows not applicable ({e}); using one batched backward per group", stacklevel=2)
            sums = _pass(model, layers, x, y, outlier, sample, batch_size, seed, "rows")
    else:
        sums = _pass(model, layers, x, y, outlier, sample, batch_size, seed, "rows")
    n_out = int(outlier.sum())
    return {"version": PUSH_VERSION, "layers": sums.result(layers),
            "grad_norm": {**sums.norms, "n_outlier": n_out, "n_clean": int((~outlier).sum()),
                          "n_clean_sampled": int(sample.sum())},
            "outlier_acc": sums.correct / n_out if n_out else None}


def _pass(model: nn.Module, layers: list[tuple[str, nn.Module]], x: torch.Tensor, y: torch.Tensor,
          outlier: np.ndarray, sample: np.ndarray, batch_size: int, seed: int, method: str) -> _Sums:
    """The pass over the batches by ``method`` (``stacked`` or ``rows``)."""
    ref = next(t for t in model.parameters() if t.is_floating_point())
    mask = torch.as_tensor(outlier, device=ref.device)
    sample_t = torch.as_tensor(sample, device=ref.device)
    sums = _Sums(layers, ref.device)
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    hooked = method == "rows"
    handles = [m.register_forward_hook(_x_hat_hook(seen, n, m.eps)) for n, m in layers] if hooked else []
    cache: dict = {}
    with removed_after(handles), bn_query_mode(model, "batch"), torch.enable_grad():
        for k, b in enumerate(_batch_order(x.shape[0], batch_size, seed)):
            idx = torch.as_tensor(b)
            xb, yb = x[idx].to(device=ref.device, dtype=ref.dtype), y[idx].to(ref.device)
            out_b, norm_b = mask[idx.to(ref.device)], sample_t[idx.to(ref.device)]
            if hooked:
                _batch_pass(model, layers, seen, xb, yb, out_b, norm_b, sums)
            else:
                _stacked_pass(model, layers, xb, yb, out_b, norm_b, sums, cache, check=k == 0)
    return sums


def outlier_excess_share(pushes: list[dict[str, dict[str, list[float]]]], outlier_fraction: float
                         ) -> dict[str, Any] | None:
    """Plan 3.0's statistic (kept so its verdict stays visible): over the BN channels whose |γ| the gradient
    pushed up in total (summed over measured epochs), the median of (the outliers' share of that push − their
    share of the data), with the outliers' push by plan 3.0's row attribution.

    Args:
        pushes: per measured epoch ``{layer: {"outlier": [per channel], "all": [per channel]}}``.
        outlier_fraction: the outliers' share of the training set.

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
