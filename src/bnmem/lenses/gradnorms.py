"""Lens 2, per-sample influence: gradient norms of clean vs corrupted examples, with vs without BN.

For every (norm, seed) a model is trained exactly as in ``bnmem memorize`` (same
data, corruption, initial weights and batch order); at the chosen epochs the
trainer's ``on_epoch`` hook measures the float64 per-sample gradient norm of
every training example (see :mod:`bnmem.measure.gradnorms`) and writes it to the
job folder, so an interrupted run resumes without recomputing finished checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, field_validator, model_validator

from bnmem import io
from bnmem.data.loaded import load_once
from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError
from bnmem.config import ExperimentConfig
from bnmem.formatting import fmt
from bnmem.texttable import table
from bnmem.measure.gradnorms import BATCH_METHODS, DEFINITIONS, EVAL_METHODS, per_sample_grad_norms, subset_summary
from bnmem.figures.gradnorms import plot_gradnorms
from bnmem.lenses.registry import Lens, register
from bnmem.lenses.spec import SPECS
from bnmem.names import GRADNORMS
from bnmem.lenses.conditions import conditions
from bnmem.lenses.runs import run_folder, train_runs
from bnmem.rundir import prepare_run_dir
from bnmem.train.trainer import EpochHook

SUBSETS = ("clean", "noisy", "ood")

BN_MODE = {
    "eval": "eval mode: BN normalizes with its running statistics (each example's gradient is its own)",
    "batch": "train-mode BN: each example's own loss term, forward pass normalized with the statistics of a "
             "random batch of the training batch size that contains it (running statistics untouched)",
}


class GradNormsConfig(ExperimentConfig):
    """Config of ``bnmem gradnorms``.

    Attributes:
        at: 1-based epochs after which the norms are measured.
        definitions: ``eval`` and/or ``batch`` (see :mod:`bnmem.measure.gradnorms`).
        method: ``auto``/``ghost``/``vmap``/``loop`` for ``eval``; the ``batch``
            definition uses ``auto`` (batched Jacobian) unless ``loop`` is given.
        batch_subset: measure the ``batch`` definition on this many examples
            only (a seeded random subset; None: all).
    """

    at: list[int] | None = Field(None, description="checkpoint epochs (default: derived from train.epochs)")
    definitions: list[str] = ["eval"]
    method: str = "auto"
    batch_subset: int | None = None

    @field_validator("at")
    @classmethod
    def _epochs(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return None
        if not v or min(v) < 1:
            raise ValueError(f"checkpoint epochs must be >= 1, got {v}")
        return sorted(set(v))

    @field_validator("definitions")
    @classmethod
    def _definitions(cls, v: list[str]) -> list[str]:
        bad = [d for d in v if d not in DEFINITIONS]
        if bad or not v:
            raise ValueError(f"unknown gradient definition {bad or v}; choose from {', '.join(DEFINITIONS)}")
        return list(dict.fromkeys(v))

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if v not in EVAL_METHODS:
            raise ValueError(f"unknown gradient-norm method {v!r}; choose one of {', '.join(EVAL_METHODS)}")
        return v

    @field_validator("batch_subset")
    @classmethod
    def _subset(cls, v: int | None) -> int | None:
        if v is not None and v < 2:
            raise ValueError(f"batch_subset must be at least 2, got {v}")
        return v

    @model_validator(mode="after")
    def _within_training(self) -> "GradNormsConfig":
        if self.at is None:
            # Setting a field inside an after-validator re-runs validation; bypass it for the derived default.
            object.__setattr__(self, "at", default_checkpoints(self.train.epochs))
        if max(self.at) > self.train.epochs:
            raise ValueError(f"checkpoint epoch {max(self.at)} is past the last epoch ({self.train.epochs}); "
                             f"raise --epochs or lower --at")
        return self

    def batch_method(self) -> str:
        return self.method if self.method in BATCH_METHODS else "auto"


def default_checkpoints(epochs: int) -> list[int]:
    """Checkpoints that fit any run length: dense early ones (epochs 1, 2, 3, before either norm has fitted
    the corrupted subset: analysis plan 3.0's claim 2 uses only those), 1/6 and 1/3 of training, and the end
    (30 epochs: 1, 2, 3, 5, 10, 30)."""
    return sorted({e for e in (1, 2, 3, max(1, epochs // 6), max(1, epochs // 3), epochs) if e <= epochs})


def gradnorm_file(job: Path, definition: str, epoch: int) -> Path:
    return job / f"gradnorms_{definition}_ep{epoch}.npy"


def batch_subset_indices(ds: OutlierDataset, size: int | None, seed: int) -> np.ndarray | None:
    """The examples the ``batch`` definition measures (None: all), seeded by the data seed."""
    if size is None or size >= ds.n_train:
        return None
    rng = np.random.default_rng([int(seed), 0x6E4D])
    return np.sort(rng.choice(ds.n_train, size=size, replace=False))


def measure_hook(cfg: GradNormsConfig, ds: OutlierDataset, job: Path, seed: int) -> EpochHook:
    """The ``on_epoch`` hook: at each checkpoint, measure and save every definition's norms.

    Returns per checkpoint ``{"gradnorms": {definition: {method, medians...}}}`` into the
    training history, which is how a resumed or finished run knows the method used.
    """
    subset = batch_subset_indices(ds, cfg.batch_subset, cfg.data.seed)

    def hook(epoch: int, model) -> dict | None:
        if epoch not in cfg.at:
            return None
        rec = {}
        for d in cfg.definitions:
            r = per_sample_grad_norms(
                model, ds.x_train, ds.y_train, definition=d,
                method=cfg.method if d == "eval" else cfg.batch_method(),
                batch_size=cfg.train.batch_size, seed=seed, subset=subset if d == "batch" else None,
            )
            io.write_npy(gradnorm_file(job, d, epoch), r.norms)
            rec[d] = {**r.describe(), **{f"median_{s}": subset_summary(r.norms[m])["median"]
                                         for s, m in ds.masks().items() if s in SUBSETS}}
        return {"gradnorms": rec}

    return hook


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def checkpoint_metrics(values: dict[int, np.ndarray], ds: OutlierDataset, info: dict) -> dict[str, Any]:
    """Subset statistics at one checkpoint, pooled over seeds, plus per-seed median ratios.

    Args:
        values: seed -> (n_train,) norms (NaN: not measured).
        ds: the dataset (masks).
        info: what the history recorded (definition, method, ...).
    """
    masks = ds.masks()
    pooled = {s: subset_summary(np.concatenate([v[masks[s]] for v in values.values()])) for s in SUBSETS}
    per_seed = {}
    for seed, v in values.items():
        med = {s: subset_summary(v[masks[s]])["median"] for s in SUBSETS}
        per_seed[str(seed)] = {**{f"median_{s}": med[s] for s in SUBSETS},
                               "noisy_clean_median_ratio": _ratio(med["noisy"], med["clean"]),
                               "ood_clean_median_ratio": _ratio(med["ood"], med["clean"])}
    return {
        **info,
        **pooled,
        "noisy_clean_median_ratio": _ratio(pooled["noisy"]["median"], pooled["clean"]["median"]),
        "ood_clean_median_ratio": _ratio(pooled["ood"]["median"], pooled["clean"]["median"]),
        "per_seed": per_seed,
    }


def run_gradnorms(cfg: GradNormsConfig, out: str | Path, *, progress: bool = True, executor: Any = None) -> dict[str, Any]:
    """Train every (norm, seed), measure per-sample gradient norms at ``cfg.at``, summarize.

    Writes ``config.json``, one folder per ``<norm>/seed<k>`` (training run plus
    ``gradnorms_<definition>_ep<e>.npy``; resumable), ``gradnorms.npz``,
    ``metrics.json`` and ``gradnorms.png`` into ``out``.

    Args:
        cfg: the experiment config.
        out: run directory.
        progress: show tqdm bars.

    Returns:
        The metrics dict (also written to ``metrics.json``).

    Raises:
        BnmemError: data or directory problems, or a finished job missing its norms.
    """
    out = prepare_run_dir(out, cfg.model_dump(mode="json"))
    ds = load_once(cfg.data)
    arr = np.full((len(cfg.norms), len(cfg.seeds), len(cfg.definitions), len(cfg.at), ds.n_train), np.nan)
    info: dict[tuple[str, str, int], dict] = {}
    runs = train_runs(cfg, ds, out, hook=measure_hook, progress=progress)
    for i, norm in enumerate(cfg.norms):
        for j, seed in enumerate(cfg.seeds):
            job = run_folder(out, norm, seed)
            history = runs[norm][seed]
            for k, d in enumerate(cfg.definitions):
                for c, epoch in enumerate(cfg.at):
                    path = gradnorm_file(job, d, epoch)
                    if not path.exists():
                        raise BnmemError(f"{path} is missing from a finished job; delete {job} and rerun")
                    arr[i, j, k, c] = np.load(path)
                    rec = history[epoch - 1].get("gradnorms", {}).get(d, {})
                    info[(norm, d, epoch)] = {key: rec[key] for key in rec if not key.startswith("median_")}
    metrics: dict[str, Any] = {}
    for i, norm in enumerate(cfg.norms):
        metrics[norm] = {
            d: {f"epoch_{e}": checkpoint_metrics({s: arr[i, j, k, c] for j, s in enumerate(cfg.seeds)}, ds,
                                                 {"epoch": e, **info[(norm, d, e)]})
                for c, e in enumerate(cfg.at)}
            for k, d in enumerate(cfg.definitions)
        }
    io.write_npz(out / "gradnorms.npz", gradnorms=arr, norms=np.array(cfg.norms), seeds=np.array(cfg.seeds),
                 definitions=np.array(cfg.definitions), epochs=np.array(cfg.at), is_clean=ds.is_clean,
                 is_noisy=ds.is_noisy, is_ood=ds.is_ood, y_train=ds.y_train.numpy(), y_train_orig=ds.y_train_orig)
    result = LENS.stamp({
        **metrics,
        "conditions": {
            **conditions(cfg),
            "checkpoints": cfg.at,
            "definitions": cfg.definitions,
            "bn_mode": {d: BN_MODE[d] for d in cfg.definitions},
            "batch_size": cfg.train.batch_size,
            "batch_subset": cfg.batch_subset,
            "dtype": "float64",
            "loss": "per-example cross-entropy against the training label (flipped for noisy examples); "
                    "no weight decay",
            "norm_of": "L2 norm over all trainable parameters",
            "epochs": cfg.train.epochs,
            "npz_axes": ["norm", "seed", "definition", "checkpoint", "example"],
        },
        "dataset": ds.summary(),
    })
    io.write_json(out / LENS.results, result)
    plot_gradnorms(arr, cfg, ds, out / "gradnorms.png")
    return result


def summary_table(result: dict[str, Any]) -> str:
    """Printable medians per norm, definition and checkpoint."""
    cond = result["conditions"]
    rows = []
    for norm in cond["norms"]:
        for d in cond["definitions"]:
            for e in cond["checkpoints"]:
                m = result[norm][d][f"epoch_{e}"]
                rows.append([norm, d, str(e), fmt(m["clean"]["median"], ".4f"), fmt(m["noisy"]["median"], ".4f"),
                             fmt(m["ood"]["median"], ".4f"), fmt(m["noisy_clean_median_ratio"], ".2f"),
                             fmt(m["ood_clean_median_ratio"], ".2f")])
    return table(rows, ["norm", "definition", "epoch", "clean med", "noisy med", "ood med", "noisy/clean",
                        "ood/clean"])


LENS = register(Lens.of(SPECS[GRADNORMS], config=GradNormsConfig, run=run_gradnorms, summary=summary_table,
                        hook=measure_hook))
