"""BN scale statistics over training: does |γ|/σ exceed 1, per layer, and when?

For every seed a BN model is trained exactly as in ``bnmem memorize``; the
trainer's ``on_epoch`` hook records each BN layer's γ, σ and |γ|/σ (running σ
and the σ of one fixed training batch) into the training history, so a
finished or resumed job needs no recomputation. At the last epoch the hook also records, from the model's
traced dataflow (:mod:`bnmem.models.identifiable`), which BN layers have an identifiable γ scale
(``scale_identifiable``) and each channel's effective step η·G_c² (the scale-free robustness measurement;
docs/architecture.md, "Definitions").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import field_validator

from bnmem import io
from bnmem.data.loaded import load_once
from bnmem.data.dataset import OutlierDataset
from bnmem.analysis_plan import PUSH_NORM_SAMPLE
from bnmem.config import ExperimentConfig
from bnmem.formatting import fmt
from bnmem.texttable import table
from bnmem.measure.memorization import mean_curve
from bnmem.measure.gamma_push import PUSH_VERSION, gamma_pushes, outlier_excess_share
from bnmem.measure.gamma_sigma import SIGMA_MODES, compact, gamma_sigma_stats
from bnmem.models.identifiable import effective_step, next_gain, scale_identifiable, trace
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
        gamma_push: also measure the outliers' and everyone's own-loss push on each γ at every measured epoch
            (:mod:`bnmem.measure.gamma_push`; claim 7).
        push_norm_sample: clean examples (a fixed seeded sample) whose all-parameter gradient norms normalize
            claim 7's push (every outlier is measured); None: every clean example.
    """

    norms: list[str] = ["batch"]
    every: int = 1
    gamma_push: bool = True
    push_norm_sample: int | None = PUSH_NORM_SAMPLE

    @field_validator("norms")
    @classmethod
    def _only_batch(cls, v: list[str]) -> list[str]:
        other = [n for n in v if n != "batch"]
        if other or not v:
            raise ValueError(f"gamma-sigma measures BatchNorm layers; norm(s) {other or v} have none (use --norms batch)")
        return ["batch"]

    @field_validator("push_norm_sample")
    @classmethod
    def _sample(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"push_norm_sample must be >= 1 (or null for every clean example), got {v}")
        return v

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
    the data, the own-loss pushes on each γ summed for the outliers and for all, with the gradient norms
    that normalize them (claim 7; one extra training-mode pass over the training set per measured epoch,
    with a gradient row per outlier and sampled clean example: :func:`bnmem.measure.gamma_push.gamma_pushes`)."""
    x_probe = ds.x_train[torch.as_tensor(probe_batch(ds, cfg.train.batch_size, cfg.data.seed))]
    epochs = set(cfg.measured_epochs())
    outliers = ds.is_outlier

    def hook(epoch: int, model) -> dict | None:
        if epoch not in epochs:
            return None
        rec = {mode: gamma_sigma_stats(model, x_probe, mode) for mode in SIGMA_MODES}
        out: dict[str, Any] = {"gamma_sigma": rec}
        if epoch != cfg.train.epochs:
            out["gamma_sigma"] = {mode: compact(s) for mode, s in rec.items()}
        else:
            out["identifiable"] = identifiable_record(model, x_probe[:2], cfg.train.lr)
        if cfg.gamma_push and outliers.any():
            out["gamma_push"] = gamma_pushes(model, ds.x_train, ds.y_train, outliers, cfg.train.batch_size,
                                             cfg.data.seed, cfg.push_norm_sample)
        return out

    return hook


def identifiable_record(model: torch.nn.Module, x: torch.Tensor, lr: float) -> dict[str, Any]:
    """Per BN layer: whether its γ scale is identifiable and its channels' effective step η·G_c², from one
    traced forward pass of ``x`` (the model is left as it was)."""
    ref = next(t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point())
    graph = trace(model, x.to(device=ref.device, dtype=ref.dtype))
    gains = next_gain(model, graph=graph)
    return {"scale_identifiable": scale_identifiable(model, graph=graph),
            "effective_step": {n: effective_step(lr, g) for n, g in gains.items()}}


def _epoch_push(epoch: int, rec: dict[str, Any]) -> dict[str, Any]:
    """One measured epoch's pushes summed over each layer's channels (what claim 7 reads)."""
    gn = rec["grad_norm"]
    scale = gn["n_clean"] / gn["n_clean_sampled"] if gn["n_clean_sampled"] else 0.0
    layers = {}
    for n, r in rec["layers"].items():
        denom = r["param_norm"] * r["grad_norm"]
        layers[n] = {"outlier": float(np.sum(r["outlier"])), "all": float(np.sum(r["all"])),
                     "outlier_rows": float(np.sum(r["outlier_rows"])),
                     "radial_cos": float(r["radial"] / denom) if denom > 0 else None}
    return {"epoch": epoch, "outlier_acc": rec["outlier_acc"], "layers": layers,
            "grad_norm_outlier": gn["outlier"], "grad_norm_all": gn["outlier"] + scale * gn["clean_sampled"]}


def push_summary(histories: dict[int, list[dict]], ds: OutlierDataset) -> dict[str, Any] | None:
    """Claim 7's per-model records from the pushes the hook recorded (None when none were): per measured epoch
    and BN layer the outliers' and everyone's push and the radial cosine, the gradient-norm sums and the
    outliers' accuracy; and plan 3.0's statistic (row attribution) so its verdict stays visible."""
    frac = float(ds.is_outlier.mean()) if ds.n_train else 0.0
    per_seed = {}
    for seed, hist in histories.items():
        recs = [(h["epoch"], h["gamma_push"]) for h in hist if (h.get("gamma_push") or {}).get("version")
                == PUSH_VERSION]
        if not recs:
            continue
        v3 = outlier_excess_share([{n: {"outlier": r["outlier_rows"], "all": r["all"]} for n, r in p["layers"].items()}
                                   for _, p in recs], frac)
        per_seed[str(seed)] = {"epochs": [_epoch_push(e, p) for e, p in recs],
                               "v3_excess_share": (v3 or {}).get("excess_share"),
                               "scale_identifiable": _identifiable(hist).get("scale_identifiable")}
    if not per_seed:
        return None
    return {"version": PUSH_VERSION, "outlier_fraction": frac, "per_seed": per_seed,
            "definition": "per measured epoch and BN layer, summed over the layer's channels and the training set "
                          "(training mode, batches of the training batch size): the push Σ_i −sign(γ_c)·∂ℓ_i/∂γ_c "
                          "of each example's own loss for the outliers and for all examples; radial_cos = "
                          "Σ(γ·∂L/∂γ + β·∂L/∂β) / (‖(γ, β)‖·Σ_batches ‖(∂L/∂γ, ∂L/∂β)‖) (≈ 0: scale-invariant "
                          "layer); the all-parameter gradient norm ‖∇θ ℓ_i‖ summed over the outliers and over all "
                          "examples (clean ones from a fixed seeded sample, scaled up); the outliers' training "
                          "accuracy in the same pass. v3_excess_share: plan 3.0's statistic (row attribution); "
                          "scale_identifiable: per BN layer, from the model's graph (bnmem.models.identifiable)"}


def _identifiable(hist: list[dict]) -> dict[str, Any]:
    """The last epoch's identifiability record of one run ({} for a run recorded before it existed)."""
    return next((h["identifiable"] for h in reversed(hist) if "identifiable" in h), {})


def _step_median(ident: dict[str, Any], layer: str) -> float | None:
    step = (ident.get("effective_step") or {}).get(layer)
    return step["median"] if step else None


def summarize(histories: dict[int, list[dict]]) -> dict[str, Any]:
    """Per-epoch curves (mean over seeds) and final per-layer values from the histories; per layer also
    ``scale_identifiable`` (the same for every seed: a property of the graph; None for runs recorded before
    it existed) and ``median_effective_step`` (the mean over seeds of each seed's channel median)."""
    idents = {str(k): _identifiable(h) for k, h in histories.items()}
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
            flags = {i.get("scale_identifiable", {}).get(layer) for i in idents.values()} - {None}
            steps = {k: _step_median(idents[k], layer) for k in vals}
            known = [v for v in steps.values() if v is not None]
            final[mode][layer] = {
                "n_channels": next(iter(vals.values()))["n_channels"],
                "layer_type": next(iter(vals.values())).get("layer_type"),
                "median_ratio": float(np.mean([v["median_ratio"] for v in vals.values()])),
                "frac_above_1": float(np.mean([v["frac_above_1"] for v in vals.values()])),
                "per_seed": {k: {"median_ratio": v["median_ratio"], "frac_above_1": v["frac_above_1"],
                                 "median_effective_step": steps[k]} for k, v in vals.items()},
                "scale_identifiable": flags.pop() if len(flags) == 1 else None,
                "median_effective_step": float(np.mean(known)) if len(known) == len(steps) else None,
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
    ds = load_once(cfg.data)
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
            "scale_identifiable": "per BN layer, from the model's traced graph: does scaling its γ and β by a "
                                  "common c > 0 change the logits (batch statistics, or the running statistics "
                                  "re-estimated after the rescaling)? False: its |γ|/σ scale is not identifiable",
            "effective_step": f"per BN channel c, η·γ_c²·Σ_W Σ_k ‖W[k, c]‖² / v_k at the last epoch (η = "
                              f"{cfg.train.lr:g}, the configured learning rate; W each conv / linear layer the "
                              f"channel reaches first; v_k the running variance + eps of the BN that output "
                              f"channel k reaches next, 1 for a logit); median_effective_step is the channel "
                              f"median (mean over seeds)",
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
