"""Audit a user's own model: normalization layers, BN γ/σ, gradient-norm outliers, accuracy, membership risk.

Python::

    import bnmem
    result = bnmem.audit(model, (x_train, y_train), (x_test, y_test), out="runs/audit")
    print(result.markdown)

(``bnmem.audit`` is this module, callable: calling it calls :func:`audit`.)

Command line: ``bnmem audit --model MODEL.pt --dataset digits --out runs/audit``
(see :mod:`bnmem.cli.commands.audit`). Both write ``audit.json`` and ``audit.md``.

What it measures, on the model as given (eval mode, BN with its running statistics):

* the normalization layers (:func:`bnmem.models.norms.norm_layers`);
* per BN layer, |γ|/σ per channel with σ the running estimate (and, for a
  regular ``nn.Module``, the σ of one training batch), the median and the
  fraction of channels above 1 (:mod:`bnmem.measure.gamma_sigma`);
* the per-sample gradient norm of every training example (eval definition,
  float64; :mod:`bnmem.measure.gradnorms`), its top-k examples and, when the
  corrupted samples are known, how many of those are corrupted;
* train/test accuracy (and the fit of flipped/OOD labels when known);
* optionally (``shadow_models`` M > 0), membership-inference risk of the
  *training recipe*: M fresh copies of the architecture train on seeded halves
  of the data (every example IN for exactly half), and LiRA/RMIA run
  leave-one-out over them (:mod:`bnmem.attacks`), as the lira lens does;
* a short plain-language risk summary (:mod:`bnmem.audit_report`): rules of
  thumb from the study, not guarantees.
"""

from __future__ import annotations

import hashlib
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from bnmem import io
from bnmem.audit_load import TORCHSCRIPT, check_inputs, is_scripted
from bnmem.audit_membership import check_shadow_request, fresh_copy, masks_known, membership_section
from bnmem.config import DataConfig, StrictModel, TrainConfig
from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError
from bnmem.measure.predict import predict_logits

# Classes counted as normalization layers in a TorchScript module (its submodules
# are RecursiveScriptModules; their original class name is all that is left).
_SCRIPTED_NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "GroupNorm", "LayerNorm",
                   "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm")
_SCRIPTED_BN = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")
PROBE_BATCH = 128


class AuditConfig(StrictModel):
    """What ``bnmem audit`` reads besides the model: the data it was trained on, the shadow recipe."""

    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()


@dataclass
class AuditResult:
    """What :func:`audit` found.

    Attributes:
        data: the full result (also ``audit.json``).
        markdown: the human-readable report (also ``audit.md``).
        out: where the files went (None when not written).
    """

    data: dict[str, Any]
    markdown: str
    out: Path | None = None

    @property
    def risk(self) -> dict[str, Any]:
        return self.data["risk"]


# --- data ------------------------------------------------------------------------------


def as_dataset(
    train_data: OutlierDataset | tuple[torch.Tensor, torch.Tensor],
    test_data: tuple[torch.Tensor, torch.Tensor] | None = None,
    noisy_mask: np.ndarray | None = None,
    ood_mask: np.ndarray | None = None,
) -> OutlierDataset:
    """Wrap ``(x, y)`` tensors (or pass an :class:`OutlierDataset` through) for the audit.

    Args:
        train_data: the data the model was trained on: an OutlierDataset (its
            noisy/OOD masks are used) or ``(x, y)`` tensors.
        test_data: held-out ``(x, y)``; ignored for an OutlierDataset (it has its own).
        noisy_mask, ood_mask: known mislabeled / out-of-distribution training
            examples (bool arrays), for ``(x, y)`` data.

    Raises:
        BnmemError: malformed tensors or masks.
    """
    if isinstance(train_data, OutlierDataset):
        return train_data
    x, y = _xy(train_data, "train_data")
    n = x.shape[0]
    masks = {}
    for name, m in (("noisy_mask", noisy_mask), ("ood_mask", ood_mask)):
        arr = np.zeros(n, dtype=bool) if m is None else np.asarray(m)
        if arr.shape != (n,) or not (arr.dtype == bool or np.isin(arr, (0, 1)).all()):
            raise BnmemError(f"{name} must be a boolean array of shape ({n},), got {arr.dtype} {arr.shape}")
        masks[name] = arr.astype(bool)
    if test_data is not None:
        xt, yt = _xy(test_data, "test_data")
        if xt.shape[1:] != x.shape[1:]:
            raise BnmemError(f"test_data inputs have shape {tuple(xt.shape[1:])}, train_data {tuple(x.shape[1:])}")
    else:
        xt, yt = x[:0], y[:0]
    num_classes = int(max(int(y.max()) if n else 0, int(yt.max()) if yt.numel() else 0) + 1)
    known = masks["noisy_mask"] | masks["ood_mask"]
    return OutlierDataset(
        name="user data", x_train=x, y_train=y, y_train_orig=np.where(known, -1, y.numpy()),
        is_noisy=masks["noisy_mask"], is_ood=masks["ood_mask"], x_test=xt, y_test=yt, num_classes=num_classes,
        input_shape=tuple(int(s) for s in x.shape[1:]), mean=np.zeros(1), std=np.ones(1), seed=0,
        info={"source": "tensors given to bnmem.audit", "masks_known": noisy_mask is not None or ood_mask is not None},
    )


def _xy(data: Any, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise BnmemError(f"{what} must be an OutlierDataset or an (x, y) pair of tensors")
    x, y = (torch.as_tensor(v) for v in data)
    if x.shape[0] != y.shape[0] or y.ndim != 1 or x.shape[0] == 0:
        raise BnmemError(f"{what}: x {tuple(x.shape)} and y {tuple(y.shape)} must hold the same number (> 0) of examples")
    if y.dtype.is_floating_point:
        raise BnmemError(f"{what}: labels must be integers, got {y.dtype}")
    return x.float(), y.long()


def _masks_known(ds: OutlierDataset) -> bool:
    return masks_known(ds)


# --- measurements ----------------------------------------------------------------------


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
            stats = gamma_sigma_stats(model, probe.to(_device(model)), mode)
        except BnmemError as e:  # e.g. BN without running statistics
            out["notes"].append(f"{mode} σ: {e}")
            continue
        for layer in stats["layers"].values():  # per-channel γ/σ lists stay, the raw γ and σ go
            layer.pop("gamma", None), layer.pop("sigma", None)
        out[mode] = stats
    return out


def _device(model: nn.Module) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def gradnorm_section(model: nn.Module, ds: OutlierDataset, top_k: int = 20, max_examples: int | None = None,
                     seed: int = 0) -> tuple[dict[str, Any], np.ndarray]:
    """Per-sample gradient norms (eval definition) and the top-k training examples.

    Args:
        model: the model.
        ds: the data.
        top_k: how many of the largest norms to list.
        max_examples: measure a seeded random subset of this size (None: all).
        seed: seed of that subset.

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
    dev = _device(model)
    with warnings.catch_warnings():
        # torch warns about .grad of non-leaf tensors inside TorchScript modules; harmless here.
        warnings.filterwarnings("ignore", message=".*grad attribute of a Tensor that is not a leaf.*")
        r = per_sample_grad_norms(model, ds.x_train.to(dev), ds.y_train.to(dev), definition="eval", method=method,
                                  subset=subset)
    norms = r.norms
    measured = np.flatnonzero(np.isfinite(norms))
    order = measured[np.argsort(-norms[measured], kind="stable")]
    top = order[: min(top_k, order.size)]
    pred = predict_logits(model, ds.x_train[torch.as_tensor(top)].to(dev)).argmax(1).numpy() if top.size else []
    known = _masks_known(ds)
    rows = []
    for i, p in zip(top, pred):
        flag = "noisy" if ds.is_noisy[i] else "ood" if ds.is_ood[i] else None
        rows.append({"index": int(i), "grad_norm": float(norms[i]), "label": int(ds.y_train[i]),
                     "original_label": int(ds.y_train_orig[i]) if ds.y_train_orig[i] >= 0 and flag else None,
                     "predicted": int(p), "fits_label": bool(int(p) == int(ds.y_train[i])),
                     "flagged": flag if known else None})
    median = float(np.median(norms[measured])) if measured.size else None
    section: dict[str, Any] = {
        **r.describe(),
        "bn_mode": "eval: BN layers normalize with their running statistics (each example's gradient is its own)",
        "n_measured": int(measured.size),
        "subset": "all training examples" if subset is None else f"a seeded random subset of {subset.size}",
        "median": median,
        "top_k": rows,
        "top_k_mean_over_median": (float(np.mean(norms[top])) / median) if median else None,
    }
    if known:
        flagged = ds.is_outlier[top]
        base = float(ds.is_outlier[measured].mean())
        section["masks"] = {
            "top_k_flagged": int(flagged.sum()),
            "top_k_fraction_flagged": float(flagged.mean()) if top.size else None,
            "fraction_flagged_overall": base,
            "enrichment": float(flagged.mean()) / base if top.size and base else None,
            # "outlier" repeats "noisy" or "ood" when only one kind is present.
            "by_subset": {s: subset_summary(norms[m]) for s, m in ds.masks().items()
                          if m.any() and (s != "outlier" or (ds.is_noisy.any() and ds.is_ood.any()))},
        }
    return section, norms


@torch.no_grad()
def accuracy_section(model: nn.Module, ds: OutlierDataset) -> dict[str, Any]:
    """Eval-mode accuracy on the training and test splits (and on known outliers)."""
    dev = _device(model)

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
    if _masks_known(ds):
        out["clean_train_acc"] = acc(ds.x_train, ds.y_train, ds.is_clean)
        out["noisy_acc"] = acc(ds.x_train, ds.y_train, ds.is_noisy)  # against the flipped label: memorization
        out["ood_acc"] = acc(ds.x_train, ds.y_train, ds.is_ood)
    return out


# --- the audit -------------------------------------------------------------------------


def audit(
    model: nn.Module,
    train_data: OutlierDataset | tuple[torch.Tensor, torch.Tensor],
    test_data: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    noisy_mask: np.ndarray | None = None,
    ood_mask: np.ndarray | None = None,
    top_k: int = 20,
    max_examples: int | None = 10_000,
    shadow_models: int = 0,
    train: TrainConfig | dict | None = None,
    out: str | Path | None = None,
    seed: int = 0,
    progress: bool = False,
    source: dict[str, Any] | None = None,
) -> AuditResult:
    """Audit ``model`` on the data it was trained on.

    Args:
        model: any classifier ``nn.Module`` returning logits (or a TorchScript module).
        train_data: its training data, an :class:`OutlierDataset` or ``(x, y)``
            tensors in the model's input format.
        test_data: held-out ``(x, y)`` (for an OutlierDataset its own test split is used).
        noisy_mask, ood_mask: known mislabeled / OOD training examples (bool), for ``(x, y)`` data.
        top_k: largest gradient norms to list.
        max_examples: measure gradient norms on at most this many training
            examples (a seeded random subset; None: all).
        shadow_models: M > 0 also estimates membership risk with M shadow copies
            (even, >= 4; needs a regular nn.Module and a ``train`` recipe).
        train: the training recipe of the shadow copies (TrainConfig or dict;
            default: TrainConfig()).
        out: write ``audit.json`` and ``audit.md`` here (None: don't write).
        seed: seed of the probe batch and the gradient-norm subset.
        progress: progress bars for shadow training.
        source: where the model and data came from (written into the result).

    Returns:
        An :class:`AuditResult`.

    Raises:
        BnmemError: the model does not accept the data, malformed data, or
            shadow models asked for a TorchScript model.
    """
    from bnmem.audit_report import risk_summary, to_markdown

    ds = as_dataset(train_data, test_data, noisy_mask, ood_mask)
    train_cfg = train if isinstance(train, TrainConfig) else TrainConfig.model_validate(train or {})
    if shadow_models:
        check_shadow_request(model, shadow_models)  # before any slow work
    out = io.ensure_dir(out) if out is not None else None
    model.eval()
    n_outputs = check_inputs(model, ds.x_train[:2].to(_device(model)), ds.num_classes, ds.name)
    layers = norm_layer_table(model)
    result: dict[str, Any] = {
        "model": {
            "class": getattr(model, "original_name", type(model).__name__),
            "format": TORCHSCRIPT if is_scripted(model) else "nn.Module",
            "parameters": int(sum(p.numel() for p in model.parameters())),
            "outputs": n_outputs,
            **(source or {}),
        },
        "data": {**ds.summary(), "outliers_known": _masks_known(ds)},
        "norm_layers": layers,
        "gamma_sigma": gamma_sigma_section(model, ds, seed) if any(r["batchnorm"] for r in layers) else None,
    }
    result["gradient_norms"], norms = gradnorm_section(model, ds, top_k, max_examples, seed)
    result["accuracy"] = accuracy_section(model, ds)
    result["membership"] = (membership_section(model, ds, shadow_models, train_cfg, out, progress=progress)
                            if shadow_models else None)
    result["risk"] = risk_summary(result)
    markdown = to_markdown(result)
    if out is not None:
        io.write_npy(out / "gradient_norms.npy", norms)
        io.write_json(out / "audit.json", result)
        io.write_text(out / "audit.md", markdown)
    return AuditResult(data=result, markdown=markdown, out=out)


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def audit_file(model_path: str | Path, config: AuditConfig, *, out: str | Path,
               top_k: int = 20, max_examples: int | None = 10_000, shadow_models: int = 0,
               progress: bool = False) -> AuditResult:
    """``bnmem audit``: load a model file and a bnmem dataset, audit, write into ``out``.

    Args:
        model_path: a pickled nn.Module or a TorchScript file (trusted files only).
        config: ``data``: the data (and injected outliers) the model was trained
            on, as bnmem builds it; ``train``: the shadow copies' recipe and the device.
        out: output folder (a rerun with other settings is refused).
        top_k, max_examples, shadow_models, progress: see :func:`audit`.

    Raises:
        BnmemError: any problem with the file, the data, or their fit.
    """
    from bnmem.audit_load import load_model_file
    from bnmem.data import load_dataset
    from bnmem.rundir import prepare_run_dir

    data_cfg, train_cfg = config.data, config.train
    model, fmt = load_model_file(model_path)
    if shadow_models:
        check_shadow_request(model, shadow_models)
    digest = file_sha256(model_path)
    resolved = {"model": str(model_path), "model_sha256": digest, **config.model_dump(mode="json"),
                "top_k": top_k, "max_examples": max_examples, "shadow_models": shadow_models}
    ds = load_dataset(data_cfg)
    out = prepare_run_dir(out, resolved, name="audit_config.json")
    model = model.to(train_cfg.device)
    return audit(model, ds, top_k=top_k, max_examples=max_examples, shadow_models=shadow_models, train=train_cfg,
                 out=out, seed=data_cfg.seed, progress=progress,
                 source={"file": str(model_path), "file_format": fmt, "sha256": digest})


__all__: Sequence[str] = ("AuditConfig", "AuditResult", "as_dataset", "audit", "audit_file", "fresh_copy")


class _CallableModule(types.ModuleType):
    """``bnmem.audit`` is both this module and the function: calling the module calls :func:`audit`."""

    def __call__(self, *args: Any, **kwargs: Any) -> AuditResult:
        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
