"""The report's descriptive (not claim) tables of per-example memorization scores and empirical ε bounds.

Both come from the lira lens's shadow models (docs/attacks.md):

- :func:`memorization_score_tables`: per setting, the mean Feldman–Zhang score and the fraction of
  examples above 0.5 per norm and subset, and BN − other paired per example. With several replicates
  the interval is over replicate means (:func:`bnmem.stats.replicated_difference`, replicates as the
  unit); with one, the lens's delete-one-model jackknife. The gallery and the score distributions
  (``mem_gallery.png``, ``mem_scores.png``) are figures of the lira section.
- :func:`epsilon_tables`: ε_lb per norm, attack and subset (mean over targets, then over replicates)
  with the largest per-target bound.

Neither enters a claim verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bnmem.analysis_plan import BN
from bnmem.attacks import spec as attack_spec
from bnmem.formatting import finite
from bnmem.names import LIRA
from bnmem.report.results import Setting, fmt, pct, settings_of
from bnmem.report.rundata import RunData
from bnmem.report.tables import Table
from bnmem.stats import replicated_difference

SUBSETS = ("all", "clean", "flipped", "ood")
EPS_SUBSETS = ("all", "outliers")
MEM_FILE = "mem_scores.npz"


def _mem_block(lens_data: dict[str, Any]) -> dict[str, Any] | None:
    block = lens_data.get("memorization")
    return block if isinstance(block, dict) and "by_norm" in block else None


def _per_example_diffs(path: Path, ref: str, other: str, variant: str) -> dict[str, np.ndarray] | None:
    """Per-subset BN − other per-example differences of one replicate, from the saved score arrays."""
    try:
        with np.load(path / ref / MEM_FILE) as a, np.load(path / other / MEM_FILE) as b:
            diff = a[f"mem_{variant}"] - b[f"mem_{variant}"]
            noisy, ood = a["is_noisy"].astype(bool), a["is_ood"].astype(bool)
    except (OSError, KeyError, ValueError):
        return None
    masks = {"all": np.ones_like(noisy), "clean": ~noisy & ~ood, "flipped": noisy, "ood": ood}
    return {s: diff[m] for s, m in masks.items()}


def _interval_text(pd: Any) -> str:
    if pd is None or finite(pd.get("mean")) is None:
        return "—"
    if pd.get("ci_low") is None:
        return f"{pd['mean']:+.3f} (no interval)"
    return f"{pd['mean']:+.3f} [{pd['ci_low']:+.3f}, {pd['ci_high']:+.3f}]"


def _paired_cell(diffs: list[dict[str, np.ndarray] | None], blocks: list[tuple[Path, dict]], ref: str, other: str,
                 variant: str, sub: str) -> str:
    """BN − other for one subset: over replicates when several have per-example differences (``diffs``, one
    per block), else the lens's delete-one-model jackknife."""
    if len(blocks) >= 2:
        groups = [d[sub] for d in diffs if d is not None and d[sub].size]
        if len(groups) >= 2:
            pd = replicated_difference(groups, within_unit="examples", within_independent=False).to_dict()
            return _interval_text(pd) + f" ({pd['n']} replicates)"
    jack = ((blocks[0][1].get("paired") or {}).get(f"{ref}-{other}") or {}).get(variant, {}).get(sub)
    return _interval_text(jack) + (" (jackknife over models)" if jack else "")


def _variant(block: dict[str, Any]) -> str:
    return "top1" if "top1" in (block.get("variants") or []) else "conf"


def _label(setting: Setting) -> str:
    """The setting's label, naming its training recipe when it is not the paper's shared one (a study runs
    both, and the two tables would otherwise carry the same title)."""
    recipes = {str(lens.conditions.get("recipe", "shared")) for _, lens in setting.lenses(LIRA)}
    other = sorted(recipes - {"shared"})
    return f"{setting.label} · recipe {', '.join(other)}" if other else setting.label


def memorization_score_tables(run: RunData) -> list[Table]:
    """One descriptive table per setting with lira results that carry memorization scores."""
    tables = []
    for setting in settings_of(run, LIRA):
        blocks = [(lens.path, b) for _, lens in setting.lenses(LIRA) if (b := _mem_block(lens.data))]
        if not blocks:
            continue
        first = blocks[0][1]
        variant, ref = _variant(first), first.get("reference", BN)
        norms = list(first["by_norm"])
        subs = [s for s in SUBSETS if (first["by_norm"][ref][variant].get(s) or {}).get("n")]
        rows = []
        for norm in norms:
            # Each replicate's per-example differences, read once per norm (not once per subset).
            diffs = ([_per_example_diffs(path, ref, norm, variant) for path, _ in blocks]
                     if norm != ref and len(blocks) >= 2 else [])
            for sub in subs:
                means = [finite(b["by_norm"][norm][variant][sub]["mean"]) for _, b in blocks]
                fracs = [finite(b["by_norm"][norm][variant][sub]["frac_above_half"]) for _, b in blocks]
                row = [norm, sub, str(first["by_norm"][norm][variant][sub]["n"]),
                       fmt(np.mean([m for m in means if m is not None]) if any(m is not None for m in means) else None),
                       pct(np.mean([f for f in fracs if f is not None]) if any(f is not None for f in fracs) else None)]
                row.append(_paired_cell(diffs, blocks, ref, norm, variant, sub) if norm != ref else "")
                rows.append(row)
        overlap = {k: v for k, v in ((first.get("top_k_overlap") or {}).items())}
        notes = [f"top-{k} overlap {pair} ({variant}): {pct(v)}" for pair, per in overlap.items()
                 for k, v in (per.get(variant) or {}).items()]
        tables.append(Table(
            title=f"Per-example memorization scores (descriptive) — {_label(setting)}",
            header=["norm", "subset", "examples", "mean mem", "mem > 0.5", f"{ref} − norm, per example [95% CI]"],
            rows=rows,
            caption=("Feldman–Zhang memorization score mem(i) = P[correct | i IN] − P[correct | i OUT] over the "
                     f"lira shadow models ({'top-1 correctness' if variant == 'top1' else 'p_y = sigmoid(φ)'}); "
                     f"means over {len(blocks)} replicate(s). Interval: over replicate means with several "
                     "replicates, else the delete-one-model jackknife. Descriptive: no claim rests on it. "
                     "Gallery and distributions: mem_gallery.png, mem_scores.png in the lira section."),
            notes=notes))
    return tables


def epsilon_tables(run: RunData) -> list[Table]:
    """ε_lb per norm, attack and subset for every lira setting (descriptive)."""
    tables = []
    for setting in settings_of(run, LIRA):
        lenses = [lens for _, lens in setting.lenses(LIRA)]
        norms = [n for n in (lenses[0].conditions.get("norms") or []) if isinstance(lenses[0].data.get(n), dict)]
        rows = []
        for norm in norms:
            for attack in attack_spec.playing(attack_spec.EPSILON):
                for sub in EPS_SUBSETS:
                    got = [(lens.data[norm].get(attack) or {}).get(sub) or {} for lens in lenses]
                    means = [finite(g.get("eps_lb")) for g in got]
                    maxes = [finite(g.get("eps_lb_max")) for g in got]
                    if all(m is None for m in means):
                        continue
                    rows.append([norm, attack, sub, fmt(np.mean([m for m in means if m is not None]), ".2f"),
                                 fmt(max((m for m in maxes if m is not None), default=None), ".2f")])
        if rows:
            tables.append(Table(
                title=f"Empirical ε lower bounds (descriptive) — {_label(setting)}",
                header=["norm", "attack", "subset", "ε_lb (mean over targets and replicates)", "largest per target"],
                rows=rows,
                caption=("Per target: max over ROC thresholds of log((TPR_low − δ)/FPR_high) and its complement, "
                         "Clopper–Pearson at 95% jointly over thresholds, δ = 1/(examples the target trained on). "
                         "Any (ε, δ)-DP guarantee for this training would need ε ≥ ε_lb; a lower bound from one "
                         "attack, not a privacy guarantee (docs/attacks.md).")))
    return tables
