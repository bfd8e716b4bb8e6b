"""Readers of the lenses' results files, and the grouping of replicate cells into settings.

The claim rules (:mod:`bnmem.report.claims`) and the key tables
(:mod:`bnmem.report.tables`) read the lens results through these helpers, so a
field is looked up in one place.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from bnmem import formatting
from bnmem.analysis_plan import BASELINE, BN
from bnmem.formatting import EM_DASH, finite
from bnmem.report.rundata import CellOutput, LensOutput, RunData

# Conditions that differ between the replicates of one setting (each replicate has its
# own corruption, keep-matrix and model seeds); every other condition defines the setting.
REPLICATE_KEYS = frozenset({"replicate", "seed", "seeds", "data_seed", "corruption_seed", "keep_seed",
                            "model_seeds", "base_seed"})
_REPLICATE_SUFFIX = re.compile(r"-r(\d+)$")


# The report marks a missing number with an em dash (bnmem.formatting holds the one formatter).
fmt = partial(formatting.fmt, missing=EM_DASH)
pct = partial(formatting.pct, missing=EM_DASH)


def baselines(norms: list[str]) -> list[tuple[str, bool]]:
    """(other norm, deciding) for every non-BN norm: ``none`` decides when present."""
    others = [n for n in norms if n != BN]
    has_none = BASELINE in others
    return [(n, (n == BASELINE) or not has_none) for n in others]


# ----------------------------------------------------------------- settings and replicates


def replicate_of(cell: CellOutput) -> int:
    """The cell's replicate index: its ``replicate`` condition, else an id suffix ``-r<k>``, else 0."""
    r = cell.conditions.get("replicate")
    if isinstance(r, int) or (isinstance(r, str) and r.isdigit()):
        return int(r)
    m = _REPLICATE_SUFFIX.search(cell.id)
    return int(m.group(1)) if m else 0


@dataclass
class Setting:
    """The replicates of one experimental setting (conditions equal but for the replicate).

    Attributes:
        label: human label of the setting (a replicate's label without the replicate).
        cells: the replicate cells, in replicate order.
    """

    label: str
    cells: list[CellOutput]

    @property
    def first(self) -> CellOutput:
        return self.cells[0]

    @property
    def replicates(self) -> list[int]:
        return [replicate_of(c) for c in self.cells]

    def lenses(self, kind: str) -> list[tuple[CellOutput, LensOutput]]:
        """(cell, lens) of one kind over the replicates that ran it."""
        return [(c, c.lenses[kind]) for c in self.cells if kind in c.lenses]


# Per-cell figures, key tables and condition blocks are shown for each setting's first SHOWN_REPLICATES
# replicates only, by default (`bnmem report --shown-replicates N`: build_report's ``shown_replicates``, passed
# down to every part of the page); the others are named with their folders. The claims use every replicate; what
# is shown is what a replicate looks like, and a study with many replicates would otherwise embed every one of
# them (the decisive study's 10 replicates: 8.4 MB of figures; its claim-2 follow-up's 240: 3.7 MB of
# gradient-norm tables, against the page's 5 MB budget).
SHOWN_REPLICATES = 3


def shown(cell: CellOutput | None, shown_replicates: int) -> bool:
    """Whether a cell's own figures and tables are shown on a page showing each setting's first
    ``shown_replicates`` replicates: a study-wide output, or one of those replicates."""
    return cell is None or replicate_of(cell) < shown_replicates


def setting_key(cell: CellOutput) -> str:
    """The conditions that define a setting, as a canonical string (the training recipe counts too, when
    only a lens's own conditions name it, so shared and per-norm recipes never pool as replicates)."""
    c = {k: v for k, v in cell.conditions.items() if k not in REPLICATE_KEYS}
    if "recipe" not in c:
        recipes = {str(lens.conditions["recipe"]) for lens in cell.lenses.values() if "recipe" in lens.conditions}
        if recipes:
            c["recipe"] = sorted(recipes)
    return json.dumps(c, sort_keys=True, default=str)


def settings_of(run: RunData, kind: str) -> list[Setting]:
    """The settings that ran lens ``kind``: cells grouped by :func:`setting_key`, in first-cell order."""
    groups: dict[str, list[CellOutput]] = {}
    for cell in run.cells:
        if kind in cell.lenses:
            groups.setdefault(setting_key(cell), []).append(cell)
    return [Setting(cells[0].describe(), sorted(cells, key=replicate_of)) for cells in groups.values()]


# ----------------------------------------------------------------- lens fields


def norms_of(lens: LensOutput, has_results) -> list[str]:
    """The norms a lens has results for, in the run's order."""
    listed = lens.conditions.get("norms")
    if isinstance(listed, list):
        return [n for n in listed if n in lens.data and has_results(lens.data[n])]
    return [k for k, v in lens.data.items() if has_results(v)]


def corrupted_subsets(lens: LensOutput) -> list[tuple[str, str]]:
    """(subset name, human name) of the corrupted subsets the lens's data had."""
    ds = lens.data.get("dataset") if isinstance(lens.data.get("dataset"), dict) else {}
    cond = lens.conditions
    out = []
    if (ds.get("n_noisy") or 0) > 0 or (not ds and (cond.get("label_noise") or 0) > 0):
        out.append(("noisy", "flipped-label subset"))
    if (ds.get("n_ood") or 0) > 0 or (not ds and (cond.get("ood") or 0) > 0):
        out.append(("ood", "OOD subset"))
    return out


def outlier_mix(cell: CellOutput) -> float | None:
    """The injected outlier fraction of a cell (label noise or OOD), None on clean data."""
    mix = (finite(cell.conditions.get("label_noise")) or 0) + (finite(cell.conditions.get("ood")) or 0)
    return mix or None


def gradnorm_checkpoints(per_def: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """``[(epoch, checkpoint summary)]`` of one norm and definition of a gradnorms metrics.json."""
    out = []
    for key, val in per_def.items():
        if isinstance(val, dict) and key.startswith("epoch_"):
            try:
                out.append((int(key.split("_", 1)[1]), val))
            except ValueError:
                continue
    return sorted(out)


def lira_summary(data: dict[str, Any], norm: str, attack: str, subset: str) -> dict[str, Any] | None:
    """One attack's metrics on one subset (auc, auc_per_target, tpr_at_...), or None."""
    block = data.get(norm)
    if not isinstance(block, dict) or not isinstance(block.get(attack), dict):
        return None
    s = block[attack].get(subset)
    return s if isinstance(s, dict) else None


def lira_norms(data: dict[str, Any], conditions: dict[str, Any]) -> list[str]:
    """The norms a lira metrics.json has attack results for, in the run's order."""
    def has(v: Any) -> bool:
        return isinstance(v, dict) and any(isinstance(a, dict) and "all" in a for a in v.values())

    listed = conditions.get("norms")
    if isinstance(listed, list):
        return [n for n in listed if has(data.get(n))]
    return [k for k, v in data.items() if k not in ("paired", "accuracy", "conditions") and has(v)]


def lira_jackknife(data: dict[str, Any], other: str, attack: str, subset: str) -> dict[str, Any] | None:
    """The lens's delete-one-model jackknife of the paired AUC difference, if it wrote one:
    ``paired["batch-<other>"][attack][subset]["auc"]["jackknife"] = {"leave_one_out": [...]}``."""
    p = (((data.get("paired") or {}).get(f"{BN}-{other}") or {}).get(attack) or {}).get(subset) or {}
    jk = (p.get("auc") or {}).get("jackknife") if isinstance(p.get("auc"), dict) else None
    return jk if isinstance(jk, dict) and isinstance(jk.get("leave_one_out"), list) else None


def layer_rows(data: dict[str, Any], mode: str = "running") -> list[dict[str, Any]]:
    """Per-layer records ``{name, median_ratio, frac_above_1, n_channels, layer_type?, per_seed?}`` of a
    gamma_sigma.json (``final[mode][layer]``; a flat ``layers`` mapping or list is accepted too)."""
    final = data.get("final")
    if isinstance(final, dict) and isinstance(final.get(mode), dict):
        return [{"name": k, **v} for k, v in final[mode].items() if isinstance(v, dict)]
    layers = data.get("layers")
    if isinstance(layers, dict):
        return [{"name": k, **v} for k, v in layers.items() if isinstance(v, dict)]
    if isinstance(layers, list):
        return [r for r in layers if isinstance(r, dict)]
    return []


def layer_median(row: dict[str, Any]) -> float | None:
    for key in ("median_ratio", "median"):
        if key in row:
            return finite(row[key])
    return None


def layer_type(row: dict[str, Any]) -> str | None:
    """"conv" or "fc" when the lens recorded it (BatchNorm2d/3d: conv, BatchNorm1d: fc), else None."""
    t = row.get("layer_type")
    return t if t in ("conv", "fc") else None


def mitigate_variants(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Variant name -> its record (``bnmem mitigate``: top-level keys listed in ``variants``)."""
    names = data.get("variants")
    if isinstance(names, list):
        return {n: data[n] for n in names if isinstance(data.get(n), dict)}
    return {}


def mitigate_at(rec: dict[str, Any], when: str, key: str) -> float | None:
    """The mean over seeds of one accuracy of a mitigate variant."""
    return finite(((rec.get(when) or {}).get(key) or {}).get("mean"))


def mitigate_seeds(rec: dict[str, Any], when: str, key: str) -> list[float]:
    """Per-seed values of one accuracy of a mitigate variant (nan where missing)."""
    vals = ((rec.get(when) or {}).get(key) or {}).get("per_seed") or []
    return [math.nan if finite(v) is None else float(v) for v in vals]


def mitigate_key(variants: dict[str, dict[str, Any]]) -> str:
    """noisy_acc when the data had flipped labels, else ood_acc."""
    bn = variants.get(BN) or next(iter(variants.values()), {})
    if mitigate_at(bn, "final", "noisy_acc") is None and mitigate_at(bn, "final", "ood_acc") is not None:
        return "ood_acc"
    return "noisy_acc"


def variant_lira(rec: dict[str, Any], attack: str, subset: str = "all") -> dict[str, Any] | None:
    """One attack's LiRA summary of a mitigate variant (``auc``, ``auc_per_target``...), or None.

    Accepts ``lira[attack][subset]``, ``lira["attacks"][attack][subset]`` and the one-attack form
    ``lira = {"attack": <name>, subset: {...}}``.
    """
    lira = rec.get("lira")
    if not isinstance(lira, dict):
        return None
    for block in (lira.get(attack), (lira.get("attacks") or {}).get(attack)):
        if isinstance(block, dict) and isinstance(block.get(subset), dict):
            return block[subset]
    if lira.get("attack", "online") == attack and isinstance(lira.get(subset), dict):
        return lira[subset]
    return None
