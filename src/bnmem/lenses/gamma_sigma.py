"""BN scale statistics over training: does |γ|/σ exceed 1, per layer, and when?

For every seed a BN model is trained exactly as in ``bnmem memorize``; the
trainer's ``on_epoch`` hook records each BN layer's γ, σ and |γ|/σ (running σ
and the σ of one fixed training batch) into the training history, so a
finished or resumed job needs no recomputation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import field_validator

from bnmem import io
from bnmem.data import load_dataset
from bnmem.data.dataset import OutlierDataset
from bnmem.config import ExperimentConfig
from bnmem.formatting import fmt
from bnmem.texttable import table
from bnmem.measure.memorization import mean_curve
from bnmem.measure.gamma_push import gamma_pushes, outlier_excess_share
from bnmem.measure.gamma_sigma import SIGMA_MODES, compact, gamma_sigma_stats
from bnmem.figures.gamma_sigma import plot_gamma_sigma
from bnmem.lenses.registry import Lens, register
from bnmem.lenses.spec import SPECS
from bnmem.names import GAMMA_SIGMA
from bnmem.lenses.conditions import conditions
from bnmem.lenses.runs import train_runs
from bnmem.rundir import prepare_run_dir
from bnmem.train.trainer import EpochHook

# Keeps the probe batch's stream apart from the corruption streams of the same seed.
_PROBE_STREAM = 0x65A5


class GammaSigmaConfig(ExperimentConfig):
    """Config of ``bnmem gamma-sigma``.

    Attributes:
        norms: must be ``["batch"]`` (only BatchNorm layers have a running σ).
        every: measure every ``every`` epochs (the last epoch always).
        gamma_push: also attribute each γ's gradient to the outliers and the rest at every measured epoch
            (:mod:`bnmem.measure.gamma_push`; claim 7).
    """

    norms: list[str] = ["batch"]
    every: int = 1
    gamma_push: bool = True

    @field_validator("norms")
    @classmethod
    def _only_batch(cls, v: list[str]) -> list[str]:
        other = [n for n in v if n != "batch"]
        if other or not v:
            raise ValueError(f"gamma-sigma measures BatchNorm layers; norm(s) {other or v} have none (use --norms batch)")
        return ["batch"]

    @field_validator("every")
    @classmethod
    def _every(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"every must be >= 1, got {v}")
        return v

    def measured_epochs(self) -> list[int]:
        e = self.train.epochs
        return sorted({k for k in range(self.every, e + 1, self.every)} | {e})


def probe_batch(ds: OutlierDataset, batch_size: int, seed: int) -> np.ndarray:
    """Indices of the fixed training batch whose σ is measured (same batch at every epoch)."""
    rng = np.random.default_rng([int(seed), _PROBE_STREAM])
    return np.sort(rng.choice(ds.n_train, size=min(batch_size, ds.n_train), replace=False))


def measure_hook(cfg: GammaSigmaConfig, ds: OutlierDataset, job: Path | None = None, seed: int = 0) -> EpochHook:
    """``on_epoch`` hook: γ/σ statistics (per-channel lists only at the last epoch) and, with outliers in
    the data, each γ's per-example pushes summed for the outliers and for all (claim 7; one extra
    forward-backward pass over the training set per measured epoch)."""
    x_probe = ds.x_train[torch.as_tensor(probe_batch(ds, cfg.train.batch_size, cfg.data.seed))]
    epochs = set(cfg.measured_epochs())
    outliers = ds.is_outlier

    def hook(epoch: int, model) -> dict | None:
        if epoch not in epochs:
            return None
        rec = {mode: gamma_sigma_stats(model, x_probe, mode) for mode in SIGMA_MODES}
        if epoch != cfg.train.epochs:
            rec = {mode: compact(s) for mode, s in rec.items()}
        out: dict[str, Any] = {"gamma_sigma": rec}
        if cfg.gamma_push and outliers.any():
            out["gamma_push"] = gamma_pushes(model, ds.x_train, ds.y_train, outliers, cfg.train.batch_size,
                                             cfg.data.seed)
        return out

    return hook


def push_summary(histories: dict[int, list[dict]], ds: OutlierDataset) -> dict[str, Any] | None:
    """Claim 7's per-model statistic from the pushes the hook recorded (None when none were)."""
    frac = float(ds.is_outlier.mean()) if ds.n_train else 0.0
    per_seed = {}
    for seed, hist in histories.items():
        pushes = [h["gamma_push"] for h in hist if h.get("gamma_push")]
        stat = outlier_excess_share(pushes, frac)
        if stat is not None:
            per_seed[str(seed)] = {**stat, "epochs": [h["epoch"] for h in hist if h.get("gamma_push")]}
    if not per_seed:
        return None
    return {"outlier_fraction": frac, "per_seed": per_seed,
            "definition": "per BN channel, Σ over measured epochs of Σ_i −sign(γ)·(∂ℓ_i/∂y_i)·x̂_i over the training "
                          "set in training mode, for the outliers and for all examples; per model the median over "
                          "channels pushed up in total of (outliers' share − their share of the data)"}


def summarize(histories: dict[int, list[dict]]) -> dict[str, Any]:
    """Per-epoch curves (mean over seeds) and final per-layer values from the histories."""
    per_seed, curves, final = {}, {}, {}
    epochs: list[int] = []
    for seed, hist in histories.items():
        recs = [(h["epoch"], h["gamma_sigma"]) for h in hist if "gamma_sigma" in h]
        epochs = [e for e, _ in recs]
        per_seed[str(seed)] = {"epochs": epochs, **{m: [compact(r[m]) for _, r in recs] for m in SIGMA_MODES},
                               "final": {m: recs[-1][1][m] for m in SIGMA_MODES}}
    first = next(iter(per_seed.values()))
    layers = list(first["final"]["running"]["layers"])
    for mode in SIGMA_MODES:
        curves[mode] = {
            layer: {key: mean_curve([[r["layers"][layer][key] for r in s[mode]] for s in per_seed.values()])
                    for key in ("median_ratio", "frac_above_1")}
            for layer in layers
        }
        final[mode] = {}
        for layer in layers:
            vals = {str(k): s["final"][mode]["layers"][layer] for k, s in zip(histories, per_seed.values())}
            final[mode][layer] = {
                "n_channels": next(iter(vals.values()))["n_channels"],
                "layer_type": next(iter(vals.values())).get("layer_type"),
                "median_ratio": float(np.mean([v["median_ratio"] for v in vals.values()])),
                "frac_above_1": float(np.mean([v["frac_above_1"] for v in vals.values()])),
                "per_seed": {k: {"median_ratio": v["median_ratio"], "frac_above_1": v["frac_above_1"]}
                             for k, v in vals.items()},
            }
    return {"epochs": epochs, "layers": layers, "curves": curves, "final": final, "per_seed": per_seed}


def run_gamma_sigma(cfg: GammaSigmaConfig, out: str | Path, *, progress: bool = True, executor: Any = None) -> dict[str, Any]:
    """Train every seed of a BN model and track γ/σ per layer and channel over epochs.

    Writes ``config.json``, one folder per ``batch/seed<k>`` (resumable),
    ``gamma_sigma.json`` and ``gamma_sigma.png`` into ``out``.

    Args:
        cfg: the experiment config.
        out: run directory.
        progress: show tqdm bars.

    Returns:
        The result dict (also written to ``gamma_sigma.json``).

    Raises:
        BnmemError: data or directory problems.
    """
    out = prepare_run_dir(out, cfg.model_dump(mode="json"))
    ds = load_dataset(cfg.data)
    histories = train_runs(cfg, ds, out, hook=measure_hook, progress=progress)["batch"]
    result = LENS.stamp({
        **summarize(histories),
        "push": push_summary(histories, ds),
        "conditions": {
            **conditions(cfg),
            "norm": "batch",
            "epochs": cfg.train.epochs,
            "sigma": {
                "running": "sqrt(running_var + eps): what BN divides by in eval mode",
                "batch": f"sqrt(biased variance + eps) of the layer input over one fixed training batch of "
                         f"{min(cfg.train.batch_size, ds.n_train)} examples (seeded by the data seed), every BN "
                         f"in training mode; the σ the regularizer penalizes",
            },
            "ratio": "|γ| / σ per channel; per layer its median and the fraction of channels above 1",
            "gs_reg": cfg.train.gs_reg,
            "gs_tau": cfg.train.gs_tau if cfg.train.gs_reg > 0 else None,
        },
        "dataset": ds.summary(),
    })
    io.write_json(out / "gamma_sigma.json", result)
    plot_gamma_sigma(result, out / "gamma_sigma.png",
                     title=f"{cfg.data.dataset} {cfg.arch} (BN), label noise {cfg.data.label_noise}, "
                           f"OOD {cfg.data.ood}, seeds {cfg.seeds}")
    return result


def summary_table(result: dict[str, Any]) -> str:
    """Printable final per-layer statistics (mean over seeds)."""
    rows = []
    for layer in result["layers"]:
        r, b = result["final"]["running"][layer], result["final"]["batch"][layer]
        rows.append([layer, str(r["n_channels"]), fmt(r["median_ratio"]), fmt(r["frac_above_1"]),
                     fmt(b["median_ratio"]), fmt(b["frac_above_1"])])
    return table(rows, ["layer", "channels", "median |γ|/σ", "frac > 1", "median (batch σ)", "frac > 1 (batch σ)"])


LENS = register(Lens.of(SPECS[GAMMA_SIGMA], config=GammaSigmaConfig, run=run_gamma_sigma, summary=summary_table,
                        hook=measure_hook))
