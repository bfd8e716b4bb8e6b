"""Helpers every claim module uses: conditions of a number, where it was measured, per-seed pairing."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import numpy as np

from bnmem.analysis_plan import BN
from bnmem.names import FAIR_ARMS, PAPER_PROTOCOL
from bnmem.attacks import spec as attack_spec
from bnmem.report.claims.core import Claim, Evaluation, PreviousVerdict, not_run
from bnmem.report.results import Setting, corrupted_subsets, finite, norms_of
from bnmem.report.rundata import LensOutput
from bnmem.stats import pair_by_key

# Conditions shown next to a number (a lens's full conditions are in the report's conditions section).
DISPLAY_KEYS = (
    "dataset", "arch", "norms", "seeds", "replicates", "label_noise", "ood", "ood_source", "epochs",
    "bn_mode_at_query", "shadow_models", "views", "keep_seed", "attack", "subset", "gradient_definition",
    "bn_mode", "checkpoints", "regularizer_lambda", "lambda_selection", "gs_tau", "sigma", "layers", "gs_reg",
    "model", "steps", "lr", "n_outliers", "outlier_kind", "seed", "recipe", "selection_replicate",
    "evaluation_replicates", "n_layers", "n_seeds",
)
# Fair arms (each norm's learning rate and epochs selected on validation, bnmem.train.recipe) decide wherever a
# claim's lens ran them; the paper's protocol (one shared recipe, same epochs) is then a robustness variant,
# shown in the panel, never deciding. A claim whose lenses take no recipe is decided under the paper's protocol.
# What a variant row calls each recipe.
RECIPE_VARIANT = {PAPER_PROTOCOL: "paper's protocol", FAIR_ARMS: "per-norm (fair arms)"}
# Each attack's label, as its spec declares it (bnmem.attacks.spec).
ATTACK_NAMES = attack_spec.LABELS


def cond(setting: Setting, lens: LensOutput, **extra: Any) -> dict[str, Any]:
    """The conditions of one number: the setting's, the lens's own, and what the claim adds."""
    c = {**setting.first.conditions, **lens.conditions, "replicates": setting.replicates, **extra}
    if len(setting.cells) > 1:
        c.pop("seeds", None)  # differ per replicate; the cells table lists them
    return {k: c[k] for k in DISPLAY_KEYS if c.get(k) is not None}


def where(setting: Setting, tail: str = "") -> str:
    """'<setting> (n replicates): <tail>'."""
    n = len(setting.cells)
    head = f"{setting.label} ({n} replicate{'s' if n != 1 else ''})"
    return f"{head}: {tail}" if tail else head


def nanmean(values: Any) -> float:
    """Mean of the finite entries (nan when none)."""
    arr = np.array([np.nan if finite(v) is None else float(v) for v in (values or [])], dtype=float)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else math.nan


def log_of(v: Any) -> float:
    f = finite(v)
    return math.nan if f is None or f <= 0 else math.log(f)


def last(values: Any) -> float:
    vals = [finite(v) for v in (values or [])]
    vals = [v for v in vals if v is not None]
    return vals[-1] if vals else math.nan


def has_per_seed(v: Any) -> bool:
    return isinstance(v, dict) and "per_seed" in v


def seed_diffs(lens: LensOutput, other: str, value: Callable[[dict[str, Any]], float]) -> np.ndarray:
    """Per seed (paired by seed) BN − other of ``value`` of the per-seed records."""
    a = {s: value(c) for s, c in lens.data[BN]["per_seed"].items()}
    b = {s: value(c) for s, c in lens.data[other]["per_seed"].items()}
    _, av, bv = pair_by_key(a, b)
    return av - bv


def bn_comparison(claim: Claim, setting: Setting, lens: LensOutput, has_data: Callable[[Any], bool]
                  ) -> tuple[list[str] | None, list[tuple[str, str]]]:
    """The norms and corrupted subsets a BN-vs-other claim compares in one setting, or (None, []) after
    recording why it cannot (BN or a second norm missing, or clean data)."""
    norms = norms_of(lens, has_data)
    subsets = corrupted_subsets(lens)
    if BN not in norms or len(norms) < 2:
        claim.evaluations.append(not_run(where(setting), f"norms {norms}: needs batch and another norm"))
        return None, []
    if not subsets:
        claim.evaluations.append(not_run(where(setting), "no corrupted subset in this setting (clean data)"))
        return None, []
    return norms, subsets


def deciding_recipe(recipes: Iterable[str]) -> str:
    """The recipe that decides among ``recipes``: fair arms where they ran, else the paper's protocol."""
    return FAIR_ARMS if FAIR_ARMS in set(recipes) else PAPER_PROTOCOL


def mark_variants(claim: Claim) -> Claim:
    """Evaluations of a recipe other than the deciding one (:func:`deciding_recipe`) become robustness
    variants (shown, never deciding), named for their recipe ("recipe paper's protocol")."""
    deciding = deciding_recipe(e.conditions.get("recipe") or PAPER_PROTOCOL for e in claim.evaluations)
    for e in claim.evaluations:
        recipe = e.conditions.get("recipe") or PAPER_PROTOCOL  # a result naming none ran the one recipe
        if recipe != deciding:
            e.deciding = False
            e.variant = f"recipe {RECIPE_VARIANT.get(recipe, recipe)}"
    return claim


def conditions_text(c: dict[str, Any]) -> str:
    """'dataset=digits; arch=lenet; norms=batch,none; ...' for CSV and tables."""
    parts = []
    for k, v in c.items():
        if isinstance(v, list):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, dict):
            v = "; ".join(f"{a}: {b}" for a, b in v.items())
        parts.append(f"{k}={v}")
    return "; ".join(parts)


def previous(claim: Claim, where_: str, value: float | None, status: str) -> None:
    """Record one evaluation's verdict under plan 2.0."""
    claim.previous.append(PreviousVerdict(where_, value, status))
