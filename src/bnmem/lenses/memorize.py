"""Lens 1, forced memorization: how fast and how far each norm fits the corrupted subset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.data import load_dataset
from bnmem.config import ExperimentConfig
from bnmem.texttable import fmt, table
from bnmem.measure.memorization import mean_curve
from bnmem.measure.memorization import CURVES, epochs_to_fit
from bnmem.figures.memorization import plot_memorization
from bnmem.lenses.registry import Lens, register
from bnmem.lenses.runs import train_runs
from bnmem.rundir import prepare_run_dir

FIT_LEVELS = (0.5, 0.9)


class MemorizeConfig(ExperimentConfig):
    """Config of ``bnmem memorize``."""


def summarize_runs(histories: dict[int, list[dict]], n_epochs: int) -> dict[str, Any]:
    """Per-seed curves, their means, fit epochs and final values for one norm."""
    per_seed = {str(s): {k: [h.get(k) for h in hist] for k in CURVES} for s, hist in histories.items()}
    mean = {k: mean_curve([c[k] for c in per_seed.values()]) for k in CURVES}
    fit = {
        f"{int(level * 100)}pct": {
            "per_seed": {s: epochs_to_fit(c["noisy_acc"], level) for s, c in per_seed.items()},
            "mean_curve": epochs_to_fit(mean["noisy_acc"], level),
        }
        for level in FIT_LEVELS
    }
    return {
        "per_seed": per_seed,
        "mean": mean,
        "epochs_to_fit_noisy": fit,
        "final": {k: v[-1] if v else None for k, v in mean.items()},
    }


def run_memorize(cfg: MemorizeConfig, out: str | Path, *, progress: bool = True, executor: Any = None) -> dict[str, Any]:
    """Train every (norm, seed) on identical corrupted data and record the curves.

    Writes ``config.json``, one folder per ``<norm>/seed<k>`` (resumable),
    ``metrics.json`` and ``memorization.png`` into ``out``.

    Returns:
        The metrics dict (also written to ``metrics.json``).
    """
    out = prepare_run_dir(out, cfg.model_dump(mode="json"))
    ds = load_dataset(cfg.data)
    runs = train_runs(cfg, ds, out, progress=progress)
    metrics = {norm: summarize_runs(runs[norm], cfg.train.epochs) for norm in cfg.norms}
    # One key per norm (as documented), plus the conditions of every number.
    result = LENS.stamp({
        **metrics,
        "conditions": {**cfg.conditions(), "bn_mode_at_query": "eval", "epochs": cfg.train.epochs},
        "dataset": ds.summary(),
    })
    io.write_json(out / "metrics.json", result)
    plot_memorization(metrics, out / "memorization.png",
                      title=f"{cfg.data.dataset} {cfg.arch}, label noise {cfg.data.label_noise}, OOD {cfg.data.ood}, seeds {cfg.seeds}")
    return result


def summary_table(result: dict[str, Any]) -> str:
    """Printable per-norm summary of a memorize result."""
    rows = []
    for norm in result["conditions"]["norms"]:
        m = result[norm]
        f = m["final"]
        fit = m["epochs_to_fit_noisy"]
        rows.append([norm, fmt(f["noisy_acc"]), fmt(f["ood_acc"]), fmt(f["clean_acc"]), fmt(f["test_acc"]),
                     str(fit["50pct"]["mean_curve"] or "-"), str(fit["90pct"]["mean_curve"] or "-")])
    return table(rows, ["norm", "noisy_acc", "ood_acc", "clean_acc", "test_acc", "fit50%@ep", "fit90%@ep"])


LENS = register(Lens(
    name="memorize", config=MemorizeConfig, run=run_memorize, figure="memorization.png",
    title="Forced memorization", summary=summary_table, trains_runs=True, stage=1,
))
