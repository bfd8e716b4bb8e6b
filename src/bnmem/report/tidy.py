"""The tidy (long-form) table of a run's results: one row per measured number.

``bnmem export`` and :func:`bnmem.results.load` build it. Each row is one value
of one metric, measured in one cell (a replicate of a setting) by one lens, for
one norm, on one unit (a model seed, or a LiRA target model), on one subset, at
one epoch where the metric is a curve. The cell's conditions are columns, so a
row can be filtered and grouped without reading any results file. The columns
are documented in docs/results.md; :data:`COLUMNS` is their order.

Only per-unit numbers are exported (the lenses' own means and intervals are
recomputable from them). Each lens's reader (:mod:`bnmem.report.readers`) is named
by its report view (:mod:`bnmem.report.views`, found through the lens's spec); a lens whose view
names none (a plugin, a new built-in) is read generically: every number of its
results file is a row (:func:`generic_rows`), NaN included, so none is dropped.
The lenses whose spec says ``tidy=False`` (the built-in theory and defenses: once
per study; per variant and replicate) contribute no rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem.formatting import finite
from bnmem.report.readers import (  # noqa: F401 - the readers, importable from here as before
    CURVE_KEYS, generic_rows, gamma_sigma_rows, gradnorms_rows, lira_rows, memorize_rows, mitigate_rows,
)
from bnmem.report.results import replicate_of, setting_key
from bnmem.report.rundata import CellOutput as Cell, LensOutput as Lens, RunData, load_run
from bnmem.report.views import tidy_reader

Row = dict[str, Any]

# Conditions of the cell, as columns (left of the measurement columns).
CONDITION_COLUMNS = ("dataset", "arch", "label_noise", "ood", "ood_source", "recipe")
MEASURE_COLUMNS = ("lens", "norm", "method", "unit", "unit_id", "subset", "metric", "epoch", "value")
COLUMNS = ("cell", "setting", "replicate", *CONDITION_COLUMNS, *MEASURE_COLUMNS)
"""The tidy table's columns, in order (docs/results.md describes each)."""
# Text columns that may not apply to a row (no OOD inputs; memorize has no method): "-" there.
NOT_APPLICABLE = "-"
NOT_APPLICABLE_TEXT = ("ood_source", "method")


def reader_of(kind: str):
    """The tidy reader of a lens: its view's, else the generic one; None when its spec keeps it out."""
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


def _setting_names(run: RunData) -> dict[str, str]:
    """Setting key -> its label, unique within the run (the recipe named where it is not the shared one)."""
    settings: dict[str, str] = {}
    for cell in run.cells:
        key = setting_key(cell)
        if key not in settings:
            recipe = cell.conditions.get("recipe")
            label = cell.describe() + (f" · {recipe} recipe" if recipe and recipe != "shared" else "")
            taken = set(settings.values())
            settings[key] = label if label not in taken else f"{label} #{len(settings)}"
    return settings


def setting_labels(run: RunData) -> dict[str, str]:
    """Cell id -> the label of its setting (the ``setting`` column of the tidy and deciding tables)."""
    names = _setting_names(run)
    return {cell.id: names[setting_key(cell)] for cell in run.cells}


def tidy_rows(run: RunData) -> list[Row]:
    """Every row of the tidy table of a loaded run, in cell, lens, norm order."""
    settings = _setting_names(run)
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
