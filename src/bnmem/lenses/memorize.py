"""Lens 1, forced memorization: how fast and how far each norm fits the corrupted subset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.data.loaded import load_once
from bnmem.config import ExperimentConfig
from bnmem.formatting import fmt
from bnmem.texttable import table
from bnmem.measure.memorization import mean_curve
from bnmem.measure.memorization import CURVES, epochs_to_fit
from bnmem.figures.memorization import plot_memorization
from bnmem.lenses.registry import Lens, register
from bnmem.lenses.spec import SPECS
from bnmem.names import MEMORIZE
from bnmem.lenses.conditions import conditions
from bnmem.lenses.runs import PendingRun, train_fresh_together, train_run, train_runs
from bnmem.rundir import prepare_run_dir
from bnmem.train.recipe import RecipeOptions, read_selection, select_recipes, shared_record, train_for

FIT_LEVELS = (0.5, 0.9)
# Per-epoch values recorded besides CURVES, summarized at the last epoch.
FINAL_EXTRA = ("train_acc", "val_acc")


class MemorizeConfig(ExperimentConfig, RecipeOptions):
    """Config of ``bnmem memorize`` (``recipe: per-norm`` selects each norm's learning rate on validation)."""


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
    final = {k: v[-1] if v else None for k, v in mean.items()}
    for key in FINAL_EXTRA:  # train-IN and validation accuracy of the released (last-epoch) model
        vals = [hist[-1].get(key) for hist in histories.values() if hist]
        vals = [v for v in vals if v is not None]
        final[key] = float(sum(vals) / len(vals)) if vals else None
    return {
        "per_seed": per_seed,
        "mean": mean,
        "epochs_to_fit_noisy": fit,
        "final": final,
    }


def run_memorize(cfg: MemorizeConfig, out: str | Path, *, progress: bool = True, executor: Any = None) -> dict[str, Any]:
    """Train every (norm, seed) on identical corrupted data and record the curves.

    Writes ``config.json``, one folder per ``<norm>/seed<k>`` (resumable),
    ``metrics.json`` and ``memorization.png`` into ``out``.

    Returns:
        The metrics dict (also written to ``metrics.json``).
    """
    out = prepare_run_dir(out, cfg.model_dump(mode="json"))
    ds = load_once(cfg.data)
    per_norm = cfg.recipe == "per-norm"
    selection = (shared_record(cfg.train) if not per_norm
                 else read_selection(out / cfg.recipe_from, cfg.norms) if cfg.recipe_from
                 else select_recipes(cfg.norms, cfg.arch, ds, cfg.train, cfg.seeds, out / "recipe", cfg.lr_grid,
                                     max_epochs=cfg.max_epochs))
    if per_norm:
        # Each norm's selected learning rate, trained with per-epoch measurement (the selection trained the
        # candidates together without it); the runs live under recipe/ next to the selection's record. A norm's
        # seeds train together (one recipe), as the shared recipe's runs do.
        runs = {}
        for norm in cfg.norms:
            train = train_for(cfg.train, selection, norm)
            pending = [PendingRun(seed, train, out / "recipe" / norm / f"lr{train.lr:g}-e{train.epochs}" / f"seed{seed}")
                       for seed in cfg.seeds]
            train_fresh_together(cfg.model(norm), ds, pending, progress=f"{norm} lr {train.lr:g}" if progress else False)
            runs[norm] = {r.seed: train_run(cfg.model(norm), ds, train, r.seed, r.job,
                                            progress=f"{norm} seed {r.seed}" if progress else False)
                          for r in pending}
    else:
        runs = train_runs(cfg, ds, out, progress=progress)
    metrics = {norm: summarize_runs(runs[norm], train_for(cfg.train, selection, norm).epochs) for norm in cfg.norms}
    for norm in cfg.norms:
        own = train_for(cfg.train, selection, norm)
        metrics[norm]["recipe"] = {"lr": own.lr, "epochs": own.epochs, "mode": cfg.recipe,
                                   **({"stop": selection["per_norm"][norm].get("stop")} if per_norm else {})}
    # One key per norm (as documented), plus the conditions of every number.
    result = LENS.stamp({
        **metrics,
        "conditions": {**conditions(cfg), "bn_mode_at_query": "eval",
                       "epochs": (cfg.train.epochs if not per_norm
                                  else {n: train_for(cfg.train, selection, n).epochs for n in cfg.norms}),
                       "recipe": cfg.recipe, "recipe_selection": selection, "augment": cfg.train.augment,
                       "n_val": ds.n_val, "train_acc": "accuracy on every training example against its "
                       "training label (train-IN), last epoch; val_acc on the held-out validation split"},
        "dataset": ds.summary(),
    })
    io.write_json(out / LENS.results, result)
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
        lr = (m.get("recipe") or {}).get("lr")
        rows.append([norm, "-" if lr is None else f"{lr:g}", fmt(f.get("train_acc")), fmt(f["noisy_acc"]),
                     fmt(f["ood_acc"]), fmt(f["clean_acc"]), fmt(f["test_acc"]), fmt(f.get("val_acc")),
                     str(fit["50pct"]["mean_curve"] or "-"), str(fit["90pct"]["mean_curve"] or "-")])
    return table(rows, ["norm", "lr", "train_acc", "noisy_acc", "ood_acc", "clean_acc", "test_acc", "val_acc",
                        "fit50%@ep", "fit90%@ep"])


LENS = register(Lens.of(SPECS[MEMORIZE], config=MemorizeConfig, run=run_memorize, summary=summary_table))
