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
from bnmem.lenses.common import ExperimentConfig, fmt, mean_curve, table
from bnmem.measure.gamma_sigma import SIGMA_MODES, compact, gamma_sigma_stats
from bnmem.rundir import prepare_run_dir
from bnmem.train import seeded_model, train_model
from bnmem.train.trainer import EpochHook

# Keeps the probe batch's stream apart from the corruption streams of the same seed.
_PROBE_STREAM = 0x65A5


class GammaSigmaConfig(ExperimentConfig):
    """Config of ``bnmem gamma-sigma``.

    Attributes:
        norms: must be ``["batch"]`` (only BatchNorm layers have a running σ).
        every: measure every ``every`` epochs (the last epoch always).
    """

    norms: list[str] = ["batch"]
    every: int = 1

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


def measure_hook(cfg: GammaSigmaConfig, ds: OutlierDataset) -> EpochHook:
    """``on_epoch`` hook: γ/σ statistics (per-channel lists only at the last epoch)."""
    x_probe = ds.x_train[torch.as_tensor(probe_batch(ds, cfg.train.batch_size, cfg.data.seed))]
    epochs = set(cfg.measured_epochs())

    def hook(epoch: int, model) -> dict | None:
        if epoch not in epochs:
            return None
        rec = {mode: gamma_sigma_stats(model, x_probe, mode) for mode in SIGMA_MODES}
        if epoch != cfg.train.epochs:
            rec = {mode: compact(s) for mode, s in rec.items()}
        return {"gamma_sigma": rec}

    return hook


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


def run_gamma_sigma(cfg: GammaSigmaConfig, out: str | Path, progress: bool = True) -> dict[str, Any]:
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
    histories = {}
    for seed in cfg.seeds:
        job = out / "batch" / f"seed{seed}"
        if io.is_done(job):
            histories[seed] = io.read_json(job / "history.json")
        else:
            model = seeded_model(cfg.model("batch"), ds, seed)
            histories[seed] = train_model(model, ds, cfg.train, seed, run_dir=job, on_epoch=measure_hook(cfg, ds),
                                          progress=f"batch seed {seed}" if progress else False).history
    result = {
        **summarize(histories),
        "conditions": {
            **cfg.conditions(),
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
    }
    io.write_json(out / "gamma_sigma.json", result)
    plot_gamma_sigma(result, out / "gamma_sigma.png",
                     title=f"{cfg.data.dataset} {cfg.arch} (BN), label noise {cfg.data.label_noise}, "
                           f"OOD {cfg.data.ood}, seeds {cfg.seeds}")
    return result


def plot_gamma_sigma(result: dict[str, Any], path: Path, title: str = "") -> None:
    """Per layer: median |γ|/σ and fraction of channels above 1 over epochs (running σ solid,
    batch σ dashed), and the final per-channel ratios (running σ, all seeds)."""
    from matplotlib.ticker import ScalarFormatter

    from bnmem.figures.plots import plt, save_figure

    layers, epochs = result["layers"], result["epochs"]
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(len(layers), 1)))
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    for color, layer in zip(colors, layers):
        for mode, style in (("running", "-"), ("batch", "--")):
            c = result["curves"][mode][layer]
            label = f"{layer} ({mode} σ)" if mode == "running" else None
            ax1.plot(epochs, c["median_ratio"], style, color=color, label=label, marker="." if len(epochs) < 4 else None)
            ax2.plot(epochs, c["frac_above_1"], style, color=color, marker="." if len(epochs) < 4 else None)
    ax1.axhline(1.0, color="gray", lw=0.8)
    ax1.set(xlabel="epoch", ylabel="median |γ|/σ over channels", title="per-layer median |γ|/σ (dashed: batch σ)")
    ax2.set(xlabel="epoch", ylabel="fraction of channels with |γ|/σ > 1", ylim=(-0.02, 1.02),
            title="channels that amplify")
    for i, (color, layer) in enumerate(zip(colors, layers)):
        ratios = np.concatenate([s["final"]["running"]["layers"][layer]["ratio"]
                                 for s in result["per_seed"].values()])
        jitter = np.random.default_rng(i).uniform(-0.25, 0.25, ratios.size)
        ax3.scatter(i + jitter, ratios, s=6, color=color, alpha=0.6)
    ax3.axhline(1.0, color="gray", lw=0.8)
    ax3.set_yscale("log")
    # plain numbers on the log axis (the ratios span well under a decade)
    ax3.yaxis.set_major_formatter(ScalarFormatter())
    ax3.yaxis.set_minor_formatter(ScalarFormatter())
    ax3.set_xticks(range(len(layers)), layers, rotation=45, ha="right", fontsize=8)
    ax3.set(ylabel="|γ|/σ (running σ)", title=f"final epoch ({epochs[-1] if epochs else '-'}), every channel")
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def summary_table(result: dict[str, Any]) -> str:
    """Printable final per-layer statistics (mean over seeds)."""
    rows = []
    for layer in result["layers"]:
        r, b = result["final"]["running"][layer], result["final"]["batch"][layer]
        rows.append([layer, str(r["n_channels"]), fmt(r["median_ratio"]), fmt(r["frac_above_1"]),
                     fmt(b["median_ratio"]), fmt(b["frac_above_1"])])
    return table(rows, ["layer", "channels", "median |γ|/σ", "frac > 1", "median (batch σ)", "frac > 1 (batch σ)"])
