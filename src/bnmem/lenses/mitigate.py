"""Mitigation: BN vs BN + γ/σ regularizer (several λ) vs other norms — privacy against utility.

Every variant trains on identical corrupted data from identical initial weights
and batch order (per seed); they differ only in the norm and in λ of the
regularizer (:mod:`bnmem.train.regularizer`, τ = ``train.gs_tau``). Reported per
variant: memorization of the corrupted subset (accuracy against the flipped or
random label) at a fixed epoch and at the end, clean train and test accuracy,
the BN layers' |γ|/σ (per-layer median, fraction of channels above 1), and
optionally LiRA membership-inference metrics from shadow models trained with
the same recipe (``lira_models`` > 0; :func:`bnmem.lenses.lira.run_shadow_norm`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import field_validator, model_validator

from bnmem import io
from bnmem.data import load_dataset
from bnmem.data.dataset import OutlierDataset
from bnmem.config import ExperimentConfig
from bnmem.texttable import fmt, table
from bnmem.measure.memorization import mean_curve
from bnmem.measure.gamma_sigma import SIGMA_MODES, compact, gamma_sigma_stats
from bnmem.measure.memorization import CURVES
from bnmem.lenses.registry import Lens, register
from bnmem.lenses.runs import run_folder, train_run
from bnmem.rundir import prepare_run_dir
from bnmem.train.trainer import EpochHook

_PROBE_STREAM = 0x6D17
# LiRA metrics carried into the mitigation table (attack "online": the reference LiRA).
LIRA_ATTACK = "online"
LIRA_METRICS = ("auc", "tpr_at_1pct_fpr", "tpr_at_0.1pct_fpr")


@dataclass(frozen=True)
class Variant:
    """One recipe of the comparison."""

    name: str  # shown in tables and figures, e.g. "batch+gs1"
    norm: str
    lam: float  # λ of the γ/σ regularizer (0: off)

    @property
    def folder(self) -> str:
        return self.name.replace("+", "_")


class MitigateConfig(ExperimentConfig):
    """Config of ``bnmem mitigate``.

    Attributes:
        norms: the unregularized baselines; must include ``batch`` (the
            regularizer variants are BN models).
        lambdas: λ values of the regularized BN variants (τ is ``train.gs_tau``).
        fixed_epoch: the epoch at which memorization is compared (besides the last).
        lira_models: shadow models per variant for LiRA (0: off; else even, >= 4).
    """

    lambdas: list[float] = [0.1, 1.0, 10.0]
    fixed_epoch: int = 10
    lira_models: int = 0

    @field_validator("lambdas")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if not v or any(not (x > 0 and np.isfinite(x)) for x in v):
            raise ValueError(f"lambdas must be positive numbers, got {v}")
        return list(dict.fromkeys(float(x) for x in v))

    @field_validator("lira_models")
    @classmethod
    def _lira(cls, v: int) -> int:
        if v != 0 and (v < 4 or v % 2):
            raise ValueError(f"lira_models must be 0 (off) or even and at least 4, got {v}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "MitigateConfig":
        if "batch" not in self.norms:
            raise ValueError(f"mitigate compares against plain BN: norms must include 'batch', got {self.norms}")
        if self.train.gs_reg != 0:
            raise ValueError("mitigate sets the regularizer strength per variant: use lambdas (--lambdas), "
                             "not train.gs_reg (--gs-reg)")
        if not 1 <= self.fixed_epoch <= self.train.epochs:
            raise ValueError(f"fixed_epoch {self.fixed_epoch} must lie in 1..{self.train.epochs} (the epochs)")
        return self

    def variants(self) -> list[Variant]:
        """Plain BN, BN + regularizer for each λ, then the other norms."""
        out = [Variant("batch", "batch", 0.0)]
        out += [Variant(f"batch+gs{lam:g}", "batch", lam) for lam in self.lambdas]
        out += [Variant(n, n, 0.0) for n in self.norms if n != "batch"]
        return out


def gamma_sigma_hook(ds: OutlierDataset, epochs: set[int], batch_size: int, data_seed: int) -> EpochHook:
    """``on_epoch`` hook recording compact γ/σ statistics (running and batch σ) at ``epochs``."""
    rng = np.random.default_rng([int(data_seed), _PROBE_STREAM])
    probe = ds.x_train[torch.as_tensor(np.sort(rng.choice(ds.n_train, min(batch_size, ds.n_train), replace=False)))]

    def hook(epoch: int, model) -> dict | None:
        if epoch not in epochs:
            return None
        return {"gamma_sigma": {m: compact(gamma_sigma_stats(model, probe, m)) for m in SIGMA_MODES}}

    return hook


def _stat(values: list[float | None]) -> dict[str, Any]:
    ok = [v for v in values if v is not None]
    return {"mean": float(np.mean(ok)) if ok else None, "min": float(min(ok)) if ok else None,
            "max": float(max(ok)) if ok else None, "per_seed": values}


def _gs_at(histories: dict[int, list[dict]], epoch: int) -> dict[str, Any] | None:
    """Per-layer γ/σ medians and fractions > 1 at ``epoch`` (mean over seeds); None without BN."""
    recs = [h[epoch - 1].get("gamma_sigma") for h in histories.values()]
    if not recs or recs[0] is None or not recs[0]["running"]["layers"]:
        return None
    out: dict[str, Any] = {}
    for mode in SIGMA_MODES:
        layers = list(recs[0][mode]["layers"])
        out[mode] = {
            "layers": {layer: {key: float(np.mean([r[mode]["layers"][layer][key] for r in recs]))
                               for key in ("median_ratio", "frac_above_1")} for layer in layers},
            "frac_above_1": float(np.mean([r[mode]["summary"]["frac_above_1"] for r in recs])),
            "median_ratio": float(np.mean([r[mode]["summary"]["median_ratio"] for r in recs])),
        }
    return out


def summarize_variant(v: Variant, histories: dict[int, list[dict]], fixed: int) -> dict[str, Any]:
    """Curves, memorization at the fixed and last epoch, accuracies and γ/σ of one variant."""
    last = len(next(iter(histories.values())))
    per_seed = {str(s): {k: [h.get(k) for h in hist] for k in CURVES} for s, hist in histories.items()}
    at = lambda key, e: _stat([c[key][e - 1] for c in per_seed.values()])  # noqa: E731
    return {
        "norm": v.norm,
        "gs_reg": v.lam,
        "mean": {k: mean_curve([c[k] for c in per_seed.values()]) for k in CURVES},
        "per_seed": per_seed,
        "fixed_epoch": {"epoch": fixed, **{k: at(k, fixed) for k in ("noisy_acc", "ood_acc", "test_acc", "clean_acc")}},
        "final": {"epoch": last, **{k: at(k, last) for k in ("noisy_acc", "ood_acc", "test_acc", "clean_acc")}},
        "gamma_sigma": {"fixed_epoch": _gs_at(histories, fixed), "final": _gs_at(histories, last)},
    }


def _relative(metrics: dict[str, Any]) -> None:
    """Add each variant's memorization ratio and test-accuracy change against plain BN, in place."""
    ref = metrics["batch"]
    for m in metrics.values():
        rel = {}
        for when in ("fixed_epoch", "final"):
            for key in ("noisy_acc", "ood_acc"):
                a, b = m[when][key]["mean"], ref[when][key]["mean"]
                rel[f"{key}_{when}_vs_bn"] = None if a is None or not b else a / b
            a, b = m[when]["test_acc"]["mean"], ref[when]["test_acc"]["mean"]
            rel[f"test_acc_{when}_minus_bn"] = a - b
        m["relative_to_bn"] = rel


def run_lira_variant(cfg: MitigateConfig, v: Variant, directory: Path, progress: bool) -> dict[str, Any]:
    """LiRA on ``cfg.lira_models`` shadow models trained with variant ``v``'s recipe.

    """
    from bnmem.lenses.lira import LiraConfig, run_shadow_norm

    train = cfg.train.model_copy(update={"gs_reg": v.lam})
    lcfg = LiraConfig(data=cfg.data, arch=cfg.arch, norms=[v.norm], seeds=[cfg.seeds[0]], train=train,
                      shadow_models=cfg.lira_models)
    entry = run_shadow_norm(lcfg, v.norm, directory, progress=progress)
    attack = entry["attacks"][LIRA_ATTACK]
    return {
        "attack": LIRA_ATTACK,
        "shadow_models": cfg.lira_models,
        "bn_mode_at_query": lcfg.query_bn_mode,
        "views": entry["query"].get("views"),
        **{sub: {k: attack[sub][k] for k in LIRA_METRICS} for sub in attack},
        "shadow_accuracy": {k: entry["accuracy"][k]["mean"] for k in entry["accuracy"]},
    }


def run_mitigate(cfg: MitigateConfig, out: str | Path, *, progress: bool = True, executor: Any = None) -> dict[str, Any]:
    """Train every (variant, seed) and compare memorization, accuracy, γ/σ (and LiRA).

    Writes ``config.json``, one folder per ``<variant>/seed<k>`` (resumable),
    ``<variant>/lira/`` when LiRA is on, ``metrics.json`` and
    ``privacy_utility.png`` into ``out``.

    Args:
        cfg: the experiment config.
        out: run directory.
        progress: show tqdm bars.

    Returns:
        The metrics dict (also written to ``metrics.json``).

    Raises:
        BnmemError: data or directory problems; LiRA asked for but unavailable.
    """
    out = prepare_run_dir(out, cfg.model_dump(mode="json"))
    ds = load_dataset(cfg.data)
    epochs = {cfg.fixed_epoch, cfg.train.epochs}
    metrics: dict[str, Any] = {}
    for v in cfg.variants():
        train = cfg.train.model_copy(update={"gs_reg": v.lam})
        histories = {
            seed: train_run(cfg.model(v.norm), ds, train, seed, run_folder(out, v.folder, seed),
                            lambda: gamma_sigma_hook(ds, epochs, cfg.train.batch_size, cfg.data.seed),
                            progress=f"{v.name} seed {seed}" if progress else False)
            for seed in cfg.seeds
        }
        metrics[v.name] = summarize_variant(v, histories, cfg.fixed_epoch)
        if cfg.lira_models:
            metrics[v.name]["lira"] = run_lira_variant(cfg, v, out / v.folder / "lira", progress)
    _relative(metrics)
    result = LENS.stamp({
        **metrics,
        "variants": [v.name for v in cfg.variants()],
        "conditions": {
            **cfg.conditions(),
            "lambdas": cfg.lambdas,
            "gs_tau": cfg.train.gs_tau,
            "regularizer": "λ · mean over BN channels of relu(|γ|/σ_batch − τ)², added to the loss",
            "fixed_epoch": cfg.fixed_epoch,
            "epochs": cfg.train.epochs,
            "memorization": "accuracy on the noisy subset against its flipped label (OOD: its random label)",
            "bn_mode_at_query": "eval",
            "gamma_sigma": "|γ|/σ per BN channel; σ running (sqrt(running_var + eps)) or of one fixed training "
                           "batch; per layer the median and the fraction above 1",
            "lira_models": cfg.lira_models,
        },
        "dataset": ds.summary(),
    })
    io.write_json(out / "metrics.json", result)
    plot_privacy_utility(result, out / "privacy_utility.png",
                         title=f"{cfg.data.dataset} {cfg.arch}, label noise {cfg.data.label_noise}, OOD {cfg.data.ood}, "
                               f"τ={cfg.train.gs_tau}, seeds {cfg.seeds}")
    return result


def _memorization_key(result: dict[str, Any]) -> str:
    """noisy_acc when there are flipped labels, else ood_acc."""
    first = result[result["variants"][0]]
    return "noisy_acc" if first["final"]["noisy_acc"]["mean"] is not None else "ood_acc"


def plot_privacy_utility(result: dict[str, Any], path: Path, title: str = "") -> None:
    """Memorization vs test accuracy per variant (filled: fixed epoch, hollow: last epoch; bars: seed
    min–max), memorization curves, and LiRA AUC vs test accuracy when measured."""
    import matplotlib.pyplot as plt

    from bnmem.figures.save import NORM_COLORS, save_figure

    key = _memorization_key(result)
    names = result["variants"]
    has_lira = all("lira" in result[n] for n in names)
    fig, axes = plt.subplots(1, 3 if has_lira else 2, figsize=(16 if has_lira else 11, 4.2))
    gs_names = [n for n in names if result[n]["gs_reg"] > 0]
    # Oranges: regularized BN variants stay apart from plain BN's red and no-norm's blue.
    cmap = plt.get_cmap("Oranges")

    def color(n: str):
        if n in gs_names:
            return cmap(0.4 + 0.5 * gs_names.index(n) / max(len(gs_names) - 1, 1))
        return NORM_COLORS.get(result[n]["norm"], "black")

    ax = axes[0]
    for n in names:
        m = result[n]
        for when, face in (("fixed_epoch", color(n)), ("final", "none")):
            x, y = m[when]["test_acc"], m[when][key]
            if x["mean"] is None or y["mean"] is None:
                continue
            ax.errorbar(x["mean"], y["mean"], xerr=[[x["mean"] - x["min"]], [x["max"] - x["mean"]]],
                        yerr=[[y["mean"] - y["min"]], [y["max"] - y["mean"]]], fmt="o", color=color(n),
                        mfc=face, ms=8, capsize=2, label=n if when == "fixed_epoch" else None)
        ax.annotate(n, (m["fixed_epoch"]["test_acc"]["mean"], m["fixed_epoch"][key]["mean"] or 0),
                    textcoords="offset points", xytext=(6, 4), fontsize=8)
    fe = result["conditions"]["fixed_epoch"]
    ax.set(xlabel="clean test accuracy", ylabel=f"{key.replace('_acc', '')} subset accuracy (memorization)",
           title=f"privacy vs utility (filled: epoch {fe}, hollow: last)")
    ax = axes[1]
    for n in names:
        curve = result[n]["mean"][key]
        ax.plot(range(1, len(curve) + 1), curve, color=color(n), label=n)
    ax.axvline(fe, color="gray", lw=0.8, ls=":")
    ax.set(xlabel="epoch", ylabel="memorization (mean over seeds)", ylim=(-0.02, 1.02), title="memorization over training")
    if has_lira:
        ax = axes[2]
        for n in names:
            lira = result[n]["lira"]
            for sub, marker in (("all", "o"), ("outliers", "^")):
                if sub in lira:
                    ax.scatter(result[n]["final"]["test_acc"]["mean"], lira[sub]["auc"], color=color(n),
                               marker=marker, s=50, label=f"{n} ({sub})")
        ax.set(xlabel="clean test accuracy (final)", ylabel=f"LiRA ({LIRA_ATTACK}) AUC",
               title=f"membership inference, {result['conditions']['lira_models']} shadow models")
    for a in axes:
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
        else:  # clean data: no corrupted subset to memorize
            a.text(0.5, 0.5, "no corrupted subset\n(clean data)", ha="center", va="center",
                   transform=a.transAxes, color="gray")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def summary_table(result: dict[str, Any]) -> str:
    """Printable mitigation table: memorization, accuracy and γ/σ per variant (means over seeds)."""
    key = _memorization_key(result)
    fe = result["conditions"]["fixed_epoch"]
    lira = all("lira" in result[n] for n in result["variants"])
    rows = []
    for n in result["variants"]:
        m = result[n]
        gs = m["gamma_sigma"]["final"]
        layers = "/".join(f"{s['median_ratio']:.2f}" for s in gs["running"]["layers"].values()) if gs else "-"
        frac = "/".join(f"{s['frac_above_1']:.2f}" for s in gs["running"]["layers"].values()) if gs else "-"
        row = [n, fmt(m["fixed_epoch"][key]["mean"]), fmt(m["final"][key]["mean"]),
               fmt(m["final"]["test_acc"]["mean"]), fmt(m["final"]["clean_acc"]["mean"]), layers, frac]
        if lira:
            row += [fmt(m["lira"]["all"]["auc"]), fmt(m["lira"].get("outliers", {}).get("auc"))]
        rows.append(row)
    mem = key.replace("_acc", "")
    header = ["variant", f"{mem}@ep{fe}", f"{mem} final", "test final", "clean final",
              "median |γ|/σ per layer", "frac>1 per layer"]
    if lira:
        header += ["LiRA AUC", "AUC outliers"]
    return table(rows, header)


def hook(cfg: MitigateConfig, ds: OutlierDataset, job: Path, seed: int) -> EpochHook:
    """The per-epoch hook of every variant (γ/σ at the fixed and the last epoch)."""
    return gamma_sigma_hook(ds, {cfg.fixed_epoch, cfg.train.epochs}, cfg.train.batch_size, cfg.data.seed)


LENS = register(Lens(
    name="mitigate", config=MitigateConfig, run=run_mitigate, figure="privacy_utility.png",
    title="Mitigation: the γ/σ regularizer", summary=summary_table, hook=hook, trains_runs=True,
))
