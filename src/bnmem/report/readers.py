"""Each lens's rows of the tidy table (:mod:`bnmem.report.tidy`): one reader per built-in lens, and the
generic reader of any other lens's results file.

A lens's report view (:mod:`bnmem.report.views`) names its reader; a view that names none gets
:func:`generic_rows`: every number of the results file is a row, NaN included, so none is dropped. A row
holds the measurement columns (:data:`bnmem.report.tidy.MEASURE_COLUMNS`); the table adds the cell's.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from bnmem.formatting import finite
from bnmem.lenses import spec as specs
from bnmem.names import BATCH_NORM
from bnmem.report.results import gradnorm_checkpoints, mitigate_variants
from bnmem.report.rundata import LensOutput as Lens

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


def _norm_blocks(lens: Lens) -> Iterator[tuple[str, str, dict]]:
    """(norm, key, block) for every dict-valued entry of each norm's dict record (gradnorms' definitions,
    lira's attacks); anything else is skipped."""
    for norm in lens.conditions.get("norms") or []:
        rec = lens.data.get(norm)
        if isinstance(rec, dict):
            yield from ((norm, key, block) for key, block in rec.items() if isinstance(block, dict))


def memorize_rows(lens: Lens) -> Iterator[Row]:
    for norm in lens.conditions.get("norms") or []:
        rec = lens.data.get(norm)
        if isinstance(rec, dict) and isinstance(rec.get("per_seed"), dict):
            yield from _curve_rows(lens.kind, norm, "", rec["per_seed"])


def gradnorms_rows(lens: Lens) -> Iterator[Row]:
    """Each seed's median per-sample gradient norm per subset, per definition and checkpoint."""
    for norm, definition, per_def in _norm_blocks(lens):
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
    for norm, attack, block in _norm_blocks(lens):
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
