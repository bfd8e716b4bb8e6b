"""The measured sections of an audit: normalization layers, BN |γ|/σ, per-sample gradient norms, accuracy."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from bnmem.auditing.data import masks_known
from bnmem.auditing.load import is_scripted
from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError
from bnmem.measure.predict import predict_logits

# Classes counted as normalization layers in a TorchScript module (its submodules
# are RecursiveScriptModules; their original class name is all that is left).
_SCRIPTED_NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "GroupNorm", "LayerNorm",
                   "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm")
_SCRIPTED_BN = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")
PROBE_BATCH = 128


def norm_layer_table(model: nn.Module) -> list[dict[str, Any]]:
    """Every normalization layer: name, type, size, and whether it is a BatchNorm."""
    from bnmem.models.norms import norm_layers

    if is_scripted(model):
        found = [(n, m, m.original_name) for n, m in model.named_modules()
                 if getattr(m, "original_name", "") in _SCRIPTED_NORMS]
    else:
        found = [(n, m, type(m).__name__) for n, m in norm_layers(model)]
    rows = []
    for name, m, kind in found:
        size = getattr(m, "num_features", None) or getattr(m, "num_channels", None)
        if size is None and hasattr(m, "normalized_shape"):
            size = list(m.normalized_shape)
        rows.append({"name": name or "(root)", "type": kind, "size": size,
                     "batchnorm": kind in _SCRIPTED_BN or "BatchNorm" in kind})
    return rows


def _scripted_running_gamma_sigma(model: nn.Module) -> dict[str, Any]:
    """Running-σ γ/σ for a TorchScript module, in the layout of ``gamma_sigma_stats``."""
    layers = {}
    for name, m in model.named_modules():
        if getattr(m, "original_name", "") not in _SCRIPTED_BN:
            continue
        if getattr(m, "running_var", None) is None:
            continue
        sigma = torch.sqrt(m.running_var.detach().double() + float(m.eps)).numpy()
        weight = getattr(m, "weight", None)
        gamma = weight.detach().double().numpy() if weight is not None else np.ones_like(sigma)
        ratio = np.abs(gamma) / sigma
        layers[name] = {"n_channels": int(ratio.size), "median_ratio": float(np.median(ratio)),
                        "mean_ratio": float(ratio.mean()), "max_ratio": float(ratio.max()),
                        "frac_above_1": float((ratio > 1).mean()), "ratio": ratio.tolist()}
    ratios = np.concatenate([np.asarray(v["ratio"]) for v in layers.values()]) if layers else np.empty(0)
    return {"mode": "running", "sigma": "sqrt(running_var + eps)", "layers": layers, "summary": {
        "n_layers": len(layers), "n_channels": int(ratios.size),
        "median_ratio": float(np.median(ratios)) if ratios.size else None,
        "frac_above_1": float((ratios > 1).mean()) if ratios.size else None,
        "layers_median_above_1": sum(v["median_ratio"] > 1 for v in layers.values())}}


def gamma_sigma_section(model: nn.Module, ds: OutlierDataset, seed: int = 0) -> dict[str, Any]:
    """|γ|/σ per BN layer: running σ always, batch σ (one seeded training batch) for nn.Modules.

    Returns:
        ``{mode: gamma_sigma_stats-like dict without per-channel γ and σ lists}``
        plus ``notes``; empty ``{}`` modes are left out.
    """
    from bnmem.measure.gamma_sigma import gamma_sigma_stats

    out: dict[str, Any] = {"notes": []}
    if is_scripted(model):
        out["running"] = _scripted_running_gamma_sigma(model)
        out["notes"].append("TorchScript model: batch-σ statistics need a regular nn.Module (only running σ)")
        return out
    rng = np.random.default_rng([seed, 0xA0D1])
    probe = ds.x_train[torch.as_tensor(np.sort(rng.choice(ds.n_train, min(PROBE_BATCH, ds.n_train), replace=False)))]
    for mode in ("running", "batch"):
        try:
            stats = gamma_sigma_stats(model, probe.to(model_device(model)), mode)
        except BnmemError as e:  # e.g. BN without running statistics
            out["notes"].append(f"{mode} σ: {e}")
            continue
        for layer in stats["layers"].values():  # per-channel γ/σ lists stay, the raw γ and σ go
            layer.pop("gamma", None), layer.pop("sigma", None)
        out[mode] = stats
    return out


def model_device(model: nn.Module) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def gradnorm_section(model: nn.Module, ds: OutlierDataset, top_k: int = 20, max_examples: int | None = None,
                     seed: int = 0, max_memory: int | str | None = None,
                     rare: np.ndarray | None = None) -> tuple[dict[str, Any], np.ndarray]:
    """Per-sample gradient norms (eval definition) and the top-k training examples.

    Args:
        model: the model.
        ds: the data.
        top_k: how many of the largest norms to list.
        max_examples: measure a seeded random subset of this size (None: all).
        seed: seed of that subset.
        max_memory: memory budget of the measurement (None: half the free memory).
        rare: training examples known to be rare but correctly labelled (a kind of their own).

    Returns:
        The section and the (n_train,) float64 norms (NaN where not measured).
    """
    from bnmem.measure.gradnorms import per_sample_grad_norms, subset_summary

    n = ds.n_train
    subset = None
    if max_examples is not None and max_examples < n:
        subset = np.sort(np.random.default_rng([seed, 0x6A0D]).choice(n, max_examples, replace=False))
    # TorchScript modules work only with the per-example loop (no functional_call, no hooks).
    method = "loop" if is_scripted(model) else "auto"
    dev = model_device(model)
    with warnings.catch_warnings():
        # torch warns about .grad of non-leaf tensors inside TorchScript modules; harmless here.
        warnings.filterwarnings("ignore", message=".*grad attribute of a Tensor that is not a leaf.*")
        r = per_sample_grad_norms(model, ds.x_train.to(dev), ds.y_train.to(dev), definition="eval", method=method,
                                  subset=subset, max_memory=max_memory)
    norms = r.norms
    measured = np.flatnonzero(np.isfinite(norms))
    order = measured[np.argsort(-norms[measured], kind="stable")]
    top = order[: min(top_k, order.size)]
    median = float(np.median(norms[measured])) if measured.size else None
    section: dict[str, Any] = {
        **r.describe(),
        **r.execution(),
        "bn_mode": "eval: BN layers normalize with their running statistics (each example's gradient is its own)",
        "n_measured": int(measured.size),
        "subset": "all training examples" if subset is None else f"a seeded random subset of {subset.size}",
        "median": median,
        "top_k": top_rows(model, ds, norms, top, rare),
        "top_k_mean_over_median": (float(np.mean(norms[top])) / median) if median else None,
    }
    if masks_known(ds):
        section["masks"] = {
            **flagged_summary(norms, ds.is_outlier, measured, top),
            # "outlier" repeats "noisy" or "ood" when only one kind is present.
            "by_subset": {s: subset_summary(norms[m]) for s, m in ds.masks().items()
                          if m.any() and (s != "outlier" or (ds.is_noisy.any() and ds.is_ood.any()))},
        }
    if rare is not None:
        section["rare"] = {**flagged_summary(norms, rare, measured, top),
                           "by_subset": {"rare": subset_summary(norms[rare]), "others": subset_summary(norms[~rare])}}
    return section, norms


def top_rows(model: nn.Module, ds: OutlierDataset, norms: np.ndarray, top: np.ndarray,
             rare: np.ndarray | None) -> list[dict[str, Any]]:
    """The top-k rows: index, norm, label, prediction, and which known kind the example is (if any)."""
    dev = model_device(model)
    pred = predict_logits(model, ds.x_train[torch.as_tensor(top)].to(dev)).argmax(1).numpy() if top.size else []
    known = masks_known(ds)
    rows = []
    for i, p in zip(top, pred):
        flag = "noisy" if ds.is_noisy[i] else "ood" if ds.is_ood[i] else None
        kind = flag if known else None
        if kind is None and rare is not None and rare[i]:
            kind = "rare"
        rows.append({"index": int(i), "grad_norm": float(norms[i]), "label": int(ds.y_train[i]),
                     "original_label": int(ds.y_train_orig[i]) if ds.y_train_orig[i] >= 0 and flag else None,
                     "predicted": int(p), "fits_label": bool(int(p) == int(ds.y_train[i])),
                     "flagged": kind if (known or rare is not None) else None,
                     **({"file": ds.info["files"][i]} if "files" in ds.info else {})})
    return rows


# The percentile of the other examples' gradient norms a flagged example is compared with.
REST_PERCENTILE = 95


def flagged_summary(norms: np.ndarray, mask: np.ndarray, measured: np.ndarray, top: np.ndarray) -> dict[str, Any]:
    """How a flagged group sits among the gradient norms: its share of the top-k against its share of the data,
    and a robust comparison with the rest (the fraction of the group above the rest's 95th percentile, where
    5% would be no difference; a ratio of medians is not robust when the rest's median is near 0)."""
    flagged = mask[top]
    base = float(mask[measured].mean()) if measured.size else 0.0
    group, rest = norms[measured][mask[measured]], norms[measured][~mask[measured]]
    p_rest = float(np.percentile(rest, REST_PERCENTILE)) if rest.size else None
    return {
        "top_k_flagged": int(flagged.sum()),
        "top_k_fraction_flagged": float(flagged.mean()) if top.size else None,
        "fraction_flagged_overall": base,
        "enrichment": float(flagged.mean()) / base if top.size and base else None,
        "rest_percentile": REST_PERCENTILE,
        "rest_percentile_value": p_rest,
        "above_rest_percentile": float((group > p_rest).mean()) if group.size and p_rest is not None else None,
    }


@torch.no_grad()
def accuracy_section(model: nn.Module, ds: OutlierDataset, rare: np.ndarray | None = None) -> dict[str, Any]:
    """Eval-mode accuracy on the training and test splits (and on known outliers and rare examples)."""
    dev = model_device(model)

    def acc(x: torch.Tensor, y: torch.Tensor, mask: np.ndarray | None = None) -> float | None:
        if mask is not None:
            if not mask.any():
                return None
            x, y = x[torch.as_tensor(mask)], y[torch.as_tensor(mask)]
        if x.shape[0] == 0:
            return None
        return float((predict_logits(model, x.to(dev)).argmax(1) == y.cpu()).float().mean())

    out = {"train_acc": acc(ds.x_train, ds.y_train), "test_acc": acc(ds.x_test, ds.y_test),
           "bn_mode": "eval (running statistics)"}
    out["gap"] = (None if out["test_acc"] is None or out["train_acc"] is None
                  else out["train_acc"] - out["test_acc"])
    if masks_known(ds):
        out["clean_train_acc"] = acc(ds.x_train, ds.y_train, ds.is_clean)
        out["noisy_acc"] = acc(ds.x_train, ds.y_train, ds.is_noisy)  # against the flipped label: memorization
        out["ood_acc"] = acc(ds.x_train, ds.y_train, ds.is_ood)
    if rare is not None:
        out["rare_acc"] = acc(ds.x_train, ds.y_train, rare)  # their own, correct labels: not memorization alone
    return out
