"""The tidy (long-form) table of a run's results: one row per measured number.

``bnmem export`` and :func:`bnmem.results.load` build it. Each row is one value
of one metric, measured in one cell (a replicate of a setting) by one lens, for
one norm, on one unit (a model seed, or a LiRA target model), on one subset, at
one epoch where the metric is a curve. The cell's conditions are columns, so a
row can be filtered and grouped without reading any results file. The columns
are documented in docs/results.md; :data:`COLUMNS` is their order.

Only per-unit numbers are exported (the lenses' own means and intervals are
recomputable from them). Each lens's reader is named by its report view
(:mod:`bnmem.report.views`, found through the lens's spec); a lens whose view
names none (a plugin, a new built-in) is read generically: every number of its
results file is a row (:func:`generic_rows`), NaN included, so none is dropped.
The lenses whose spec says ``tidy=False`` (the built-in theory and defenses: once
per study; per variant and replicate) contribute no rows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

from bnmem.lenses import spec as specs
from bnmem.formatting import finite
from bnmem.names import BATCH_NORM
from bnmem.report.results import gradnorm_checkpoints, mitigate_variants, replicate_of, setting_key
from bnmem.report.rundata import CellOutput as Cell, LensOutput as Lens, RunData, load_run

# Conditions of the cell, as columns (left of the measurement columns).
CONDITION_COLUMNS = ("dataset", "arch", "label_noise", "ood", "ood_source", "recipe")
MEASURE_COLUMNS = ("lens", "norm", "method", "unit", "unit_id", "subset", "metric", "epoch", "value")
COLUMNS = ("cell", "setting", "replicate", *CONDITION_COLUMNS, *MEASURE_COLUMNS)
# Text columns that may not apply to a row (no OOD inputs; memorize has no method): "-" there.
NOT_APPLICABLE = "-"
NOT_APPLICABLE_TEXT = ("ood_source", "method")

# memorize / mitigate curve keys -> (subset, metric)
CURVE_KEYS = {
    "clean_acc": ("clean", "accuracy"),
    "noisy_acc": ("noisy", "accuracy"),
    "noisy_orig_acc": ("noisy", "accuracy_original_label"),
    "ood_acc": ("ood", "accuracy"),
    "test_acc": ("test", "accuracy"),
    "train_acc": ("train", "accuracy"),
    "val_acc": ("validation", "accuracy"),
}

Row = dict[str, Any]


def _num(v: Any) -> float:
    f = finite(v)
    return math.nan if f is None else f


def _curve_rows(lens: str, norm: str, method: str, per_seed: dict[str, Any]) -> Iterator[Row]:
    """Per-epoch accuracies of each seed (epochs numbered from 1)."""
    for seed, curves in per_seed.items():
        if not isinstance(curves, dict):
            continue
        for key, values in curves.items():
            if key not in CURVE_KEYS or not isinstance(values, list):
                continue
            subset, metric = CURVE_KEYS[key]
            for epoch, v in enumerate(values, start=1):
                if v is None:
                    continue  # the subset does not exist in this cell (e.g. no OOD inputs)
                yield {"lens": lens, "norm": norm, "method": method, "unit": "seed", "unit_id": int(seed),
                       "subset": subset, "metric": metric, "epoch": epoch, "value": _num(v)}


def memorize_rows(lens: Lens) -> Iterator[Row]:
    for norm in lens.conditions.get("norms") or []:
        rec = lens.data.get(norm)
        if isinstance(rec, dict) and isinstance(rec.get("per_seed"), dict):
            yield from _curve_rows(lens.kind, norm, "", rec["per_seed"])


def gradnorms_rows(lens: Lens) -> Iterator[Row]:
    """Each seed's median per-sample gradient norm per subset, per definition and checkpoint."""
    for norm in lens.conditions.get("norms") or []:
        rec = lens.data.get(norm)
        if not isinstance(rec, dict):
            continue
        for definition, per_def in rec.items():
            if not isinstance(per_def, dict):
                continue
            for epoch, ck in gradnorm_checkpoints(per_def):
                for seed, s in (ck.get("per_seed") or {}).items():
                    for key, v in s.items():
                        if v is None or not key.startswith("median_"):
                            continue
                        yield {"lens": lens.kind, "norm": norm, "method": definition, "unit": "seed",
                               "unit_id": int(seed), "subset": key[len("median_"):], "metric": "median_grad_norm",
                               "epoch": epoch, "value": _num(v)}


def gamma_sigma_rows(lens: Lens) -> Iterator[Row]:
    """Per seed, BN layer and σ definition: the layer's median |γ|/σ and fraction of channels above 1
    at the final epoch (``subset`` = the layer)."""
    norm = lens.conditions.get("norm") or BATCH_NORM
    epoch = lens.conditions.get("epochs")
    final = lens.data.get("final") or {}
    for mode, layers in final.items():
        if not isinstance(layers, dict):
            continue
        for layer, rec in layers.items():
            for seed, s in ((rec or {}).get("per_seed") or {}).items():
                for metric in ("median_ratio", "frac_above_1"):
                    if isinstance(s, dict) and s.get(metric) is not None:
                        yield {"lens": lens.kind, "norm": norm, "method": mode, "unit": "seed",
                               "unit_id": int(seed), "subset": layer, "metric": metric, "epoch": epoch,
                               "value": _num(s[metric])}


def mitigate_rows(lens: Lens) -> Iterator[Row]:
    """Per variant (``method``: batch, batch+gs1, none...) each seed's accuracy curves, and the variant's
    LiRA AUC over its shadow models (``unit`` = shadow_models: one number for all of them)."""
    for name, rec in mitigate_variants(lens.data).items():
        norm = rec.get("norm", name)
        yield from _curve_rows(lens.kind, norm, name, rec.get("per_seed") or {})
        lira = rec.get("lira")
        if not isinstance(lira, dict):
            continue
        attacks = lira.get("attacks") if isinstance(lira.get("attacks"), dict) else {lira.get("attack"): lira}
        for attack, block in attacks.items():
            for subset, s in (block or {}).items():
                if isinstance(s, dict) and s.get("auc") is not None:
                    yield {"lens": lens.kind, "norm": norm, "method": f"{name} {attack}", "unit": "shadow_models",
                           "unit_id": None, "subset": subset, "metric": "auc", "epoch": None,
                           "value": _num(s["auc"])}


def lira_rows(lens: Lens) -> Iterator[Row]:
    """Per norm, attack (``method``) and subset: every ``*_per_target`` list, one row per target model."""
    for norm in lens.conditions.get("norms") or []:
        rec = lens.data.get(norm)
        if not isinstance(rec, dict):
            continue
        for attack, block in rec.items():
            if not isinstance(block, dict):
                continue
            for subset, s in block.items():
                if not isinstance(s, dict):
                    continue
                for key, values in s.items():
                    if key.endswith("_per_target") and isinstance(values, list) \
                            and any(finite(v) is not None for v in values):  # all NaN: the subset is empty here
                        for t, v in enumerate(values):
                            yield {"lens": lens.kind, "norm": norm, "method": attack, "unit": "target",
                                   "unit_id": t, "subset": subset, "metric": key[: -len("_per_target")],
                                   "epoch": None, "value": _num(v)}


# Keys of a results file that describe it rather than measure (not read by the generic reader).
_NOT_MEASURED = (specs.LENS_KEY, specs.SCHEMA_KEY, "conditions", "config", "settings")


def generic_rows(lens: Lens) -> Iterator[Row]:
    """Every number of a results file the table has no reader for: ``metric`` is its key path
    (``a.b``; outer list positions as ``a[i]``), ``unit_id`` its position in the innermost list."""

    def walk(v: Any, path: str, pos: int | None) -> Iterator[Row]:
        if isinstance(v, dict):
            for k, x in v.items():
                if path or k not in _NOT_MEASURED:
                    yield from walk(x, f"{path}.{k}" if path else str(k), None)
        elif isinstance(v, list):
            flat = all(not isinstance(x, (dict, list)) for x in v)
            for i, x in enumerate(v):
                yield from walk(x, path, i) if flat else walk(x, f"{path}[{i}]", None)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield {"lens": lens.kind, "norm": None, "method": None, "unit": None if pos is None else "index",
                   "unit_id": pos, "subset": None, "metric": path, "epoch": None, "value": _num(v)}

    yield from walk(lens.data, "", None)


def reader_of(kind: str):
    """The tidy reader of a lens: its view's, else the generic one; None when its spec keeps it out."""
    from bnmem.report.views import tidy_reader  # the views name this module's readers

    return tidy_reader(kind)


def _cell_columns(cell: Cell, lens: Lens, settings: dict[str, str]) -> Row:
    c = {**lens.conditions, **{k: v for k, v in cell.conditions.items() if v is not None}}
    out: Row = {"cell": cell.id, "setting": settings[setting_key(cell)], "replicate": replicate_of(cell)}
    for k in CONDITION_COLUMNS:
        out[k] = c.get(k)
    if out["recipe"] is None:
        out["recipe"] = lens.conditions.get("recipe", "shared")
    out["ood_source"] = out["ood_source"] if (finite(out["ood"]) or 0) > 0 else None
    return out


def tidy_rows(run: RunData) -> list[Row]:
    """Every row of the tidy table of a loaded run, in cell, lens, norm order."""
    settings: dict[str, str] = {}
    for cell in run.cells:
        key = setting_key(cell)
        if key not in settings:
            recipe = cell.conditions.get("recipe")
            label = cell.describe() + (f" · {recipe} recipe" if recipe and recipe != "shared" else "")
            taken = set(settings.values())
            settings[key] = label if label not in taken else f"{label} #{len(settings)}"
    rows: list[Row] = []
    for cell in run.cells:
        for kind, lens in cell.lenses.items():
            reader = reader_of(kind)
            if reader is None:
                continue
            head = _cell_columns(cell, lens, settings)
            rows.extend({**head, **r} for r in reader(lens))
    return rows


def load(run_dir: str | Path, progress: bool = False):
    """The tidy table of a run directory as a pandas DataFrame (columns: :data:`COLUMNS`).

    Raises:
        BnmemError: ``run_dir`` holds no bnmem results.
    """
    import pandas as pd

    df = pd.DataFrame(tidy_rows(load_run(run_dir, progress)), columns=list(COLUMNS))
    # Text columns hold text in every row ("-": not applicable), so a CSV of the table reads back with one
    # dtype per column (pd.read_csv warns about mixed types where long runs of a column are empty).
    for col in NOT_APPLICABLE_TEXT:
        df[col] = df[col].fillna(NOT_APPLICABLE).replace("", NOT_APPLICABLE)
    for col in ("replicate", "unit_id", "epoch"):
        df[col] = df[col].astype("Int64")
    for col in ("label_noise", "ood", "value"):
        df[col] = df[col].astype("float64")
    return df
