"""The toy model's trajectories: BN, the function-matched plain model, and a BN control run.

:func:`simulate` runs the main seed's three trajectories with the claim-5a probes
at every step; :func:`counterfactual_run` runs a BN trajectory with the claim-5b
counterfactual at every step (cheaper, so it is repeated over seeds and outlier
kinds). Everything is float64 and deterministic for a given config.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bnmem.errors import BnmemError
from bnmem.theory.config import OUTLIER_KINDS, TheoryConfig
from bnmem.theory.data import make_toy_data
from bnmem.theory.model import (
    DTYPE,
    bn_forward,
    gd_step,
    grads,
    init_bn_params,
    leaf,
    matched_plain_params,
    plain_forward,
    smooth_margin,
)
from bnmem.theory.probes import Probe, counterfactual_and_gradient, probe_state

# Mean cross-entropy starts near log(C) and a converging run only lowers it; a
# run past this has blown up (at lr ≳ 2 the BN run's weights grow geometrically).
DIVERGED_LOSS = 1e3


def _check_finite(name: str, loss: float, step: int, lr: float) -> None:
    if not loss < DIVERGED_LOSS:  # also catches NaN
        raise BnmemError(f"the {name} run diverged at step {step} (lr={lr}); use a smaller lr")


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

    Args:
        cfg: the simulation's config.

    Returns:
        Per-step arrays (``steps`` + 1 rows) and the learning-rate sweep.

    Raises:
        BnmemError: when a run diverges (lr too large).
    """
    with _one_thread():
        return _simulate(cfg)


# What _simulate records at every step (one list each; arrays in its output).
RECORDED = (
    "gamma", "sigma", "amp_pred", "rho", "ratio_frozen", "ratio_live", "ratio_full",
    "dm_bn_live", "dm_plain", "margin_bn", "margin_plain", "outlier_acc_bn", "outlier_acc_plain",
    "clean_acc_bn", "clean_acc_plain", "loss_bn", "loss_plain",
    "gamma_control", "sigma_control", "loss_control", "match_gap",
)


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

    rec: dict[str, list] = {k: [] for k in RECORDED}
    sweep = _Sweep()
    for t in range(cfg.steps + 1):
        # --- BN run: probe at the current state, then take the real training step.
        do_sweep = t % cfg.sweep_every == 0
        lrs = sorted(set(sweep_lrs + [lr])) if do_sweep else [lr]
        probe, g_bn = probe_state(bn, x, y, idx, eps, lrs, lr)
        _record_bn(rec, bn, probe, y, idx, lr)
        if do_sweep:
            sweep.add(t, probe, sweep_lrs)
        q, g_q = _plain_step(rec, plain, x, y, idx)
        r, g_r = _control_step(rec, control, data.x_clean, data.y_clean, eps)
        for name, loss_t in (("BN", rec["loss_bn"][-1]), ("no-norm", rec["loss_plain"][-1]),
                             ("BN without outliers", rec["loss_control"][-1])):
            _check_finite(name, loss_t, t, lr)
        if t == cfg.steps:  # the last iteration only records the final state
            break
        bn = gd_step(bn, g_bn, lr)
        plain = gd_step(q, g_q, lr)
        control = gd_step(r, g_r, lr)

    out: dict[str, Any] = {k: np.array(v) for k, v in rec.items()}
    out["steps"] = np.arange(cfg.steps + 1)
    out["lr"] = lr
    out["outlier_idx"] = data.outlier_idx.numpy()
    out["sweep"] = {"lr_factors": np.array(cfg.sweep_factors), "lrs": np.array(sweep_lrs), **sweep.arrays()}
    return out


def _record_bn(rec: dict[str, list], bn: dict[str, torch.Tensor], probe: Probe, y: torch.Tensor, idx: torch.Tensor,
               lr: float) -> None:
    """Append the BN run's state and the claim-5a probes at ``lr`` (the step actually taken)."""
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


def _plain_step(rec: dict[str, list], plain: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                idx: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The plain run (from the functionally matched start) at its current state: record it; its leaves and gradients."""
    q = leaf(plain)
    logits_q = plain_forward(q, x)
    loss_q = F.cross_entropy(logits_q, y)
    g_q = grads(loss_q, q)
    margins_q, acc_oq, acc_cq = _fit_stats(logits_q.detach(), y, idx)
    rec["margin_plain"].append(margins_q)
    rec["outlier_acc_plain"].append(acc_oq)
    rec["clean_acc_plain"].append(acc_cq)
    rec["loss_plain"].append(float(loss_q.detach()))
    return q, g_q


def _control_step(rec: dict[str, list], control: dict[str, torch.Tensor], x_clean: torch.Tensor,
                  y_clean: torch.Tensor, eps: float) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The BN control (same start, outliers replaced by their clean counterparts): record it; leaves, gradients."""
    r = leaf(control)
    logits_r, _, sigma_r = bn_forward(r, x_clean, eps)
    loss_r = F.cross_entropy(logits_r, y_clean)
    g_r = grads(loss_r, r)
    rec["gamma_control"].append(float(control["gamma"]))
    rec["sigma_control"].append(float(sigma_r.detach()))
    rec["loss_control"].append(float(loss_r.detach()))
    return r, g_r


class _Sweep:
    """The learning-rate sweep's probes at every ``sweep_every``-th step."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.frozen: list[np.ndarray] = []  # (n_lrs, n_outliers) per probed step
        self.live: list[np.ndarray] = []
        self.pred_live: list[np.ndarray] = []
        self.amp: list[float] = []

    def add(self, t: int, probe: Probe, sweep_lrs: list[float]) -> None:
        self.steps.append(t)
        self.frozen.append(np.stack([probe.ratio_frozen[s] for s in sweep_lrs]))
        self.live.append(np.stack([probe.ratio_live[s] for s in sweep_lrs]))
        self.pred_live.append(probe.amp_pred * probe.rho)
        self.amp.append(probe.amp_pred)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "steps": np.array(self.steps),
            "amp_pred": np.array(self.amp),
            "ratio_frozen": np.stack(self.frozen),  # (n_probed_steps, n_lrs, n_outliers)
            "ratio_live": np.stack(self.live),
            "pred_live": np.stack(self.pred_live),  # (n_probed_steps, n_outliers)
        }


COUNTERFACTUAL_FIELDS = ("amp", "ratio", "dm_bn", "dm_plain", "ratio_w_only", "first_order_bn",
                         "first_order_plain", "bn_terms", "plain_terms", "match_gap", "dm_bn_w", "dm_plain_w")


def counterfactual_run(cfg: TheoryConfig) -> dict[str, np.ndarray]:
    """Train the BN model and apply :func:`~bnmem.theory.probes.counterfactual_step` at every state (steps 0..steps).

    Args:
        cfg: the config (its seed and outlier_kind pick the data and init).

    Returns:
        One array per :class:`Counterfactual` field, stacked over steps
        (per-outlier fields: ``(steps + 1, n_outliers)``; ``bn_terms``:
        ``(steps + 1, 3, n_outliers)``), plus ``outlier_idx``.

    Raises:
        BnmemError: when the BN run diverges.
    """
    with _one_thread():
        data = make_toy_data(cfg)
        x, y, idx, eps, lr = data.x, data.y, data.outlier_idx, cfg.bn_eps, cfg.lr
        bn = init_bn_params(cfg)
        rec: dict[str, list] = {k: [] for k in COUNTERFACTUAL_FIELDS}
        for t in range(cfg.steps + 1):
            cf, g_bn, loss = counterfactual_and_gradient(bn, x, y, idx, eps, lr)
            for k in COUNTERFACTUAL_FIELDS:
                rec[k].append(getattr(cf, k))
            if t == cfg.steps:
                break
            _check_finite("BN", loss, t, lr)
            bn = gd_step(bn, g_bn, lr)  # the counterfactual's BN gradient is the training step's
    out = {k: np.array(v) for k, v in rec.items()}
    out["outlier_idx"] = data.outlier_idx.numpy()
    return out


def counterfactual_runs(
    cfg: TheoryConfig, on_done: Callable[[str, int], None] | None = None
) -> dict[str, dict[int, dict[str, np.ndarray]]]:
    """:func:`counterfactual_run` for seeds ``cfg.seed .. cfg.seed + counterfactual_seeds - 1`` × both outlier kinds.

    Args:
        cfg: the base config; only seed and outlier_kind vary.
        on_done: called with (kind, seed) after each run (progress display).

    Returns:
        ``{kind: {seed: arrays}}``.
    """
    runs: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    for kind in OUTLIER_KINDS:
        runs[kind] = {}
        for seed in range(cfg.seed, cfg.seed + cfg.counterfactual_seeds):
            runs[kind][seed] = counterfactual_run(cfg.model_copy(update={"seed": seed, "outlier_kind": kind}))
            if on_done is not None:
                on_done(kind, seed)
    return runs
