"""Claims 4 and 7 on the BN layers whose γ scale is identifiable (plan 6.0's decision helpers).

Where a BN layer's output reaches the loss only through positively homogeneous operations into other
normalizations, scaling its γ and β by c > 0 leaves every logit unchanged, so its |γ|/σ can be any value for
the same function. The gamma-sigma lens records, per layer, ``scale_identifiable`` from the model's traced graph
(:mod:`bnmem.models.identifiable`, held against the float64 γ-rescaling oracle). These helpers decide claim 4
with exactly claim 4's test (:mod:`bnmem.report.claims.layer_test`, through
:func:`bnmem.report.claims.claim4.layer_analysis`) over the identifiable layers only and describe the others;
for claim 7 they take the deciding layers from the same flag, with the radial-cosine flag as a cross-check.
The effective step η·G² of the next layer (scale-free) is a described robustness row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from bnmem.analysis_plan import GS_SIGMA, NOT_RUN
from bnmem.report.claims.core import Analysis
from bnmem.report.results import finite, layer_rows

# The plan text the lead puts in plan 6.0 (docs/analysis-plan.md is generated from bnmem.analysis_plan).
IDENTIFIABLE_RULE = (
    "A BN layer's γ scale is identifiable when multiplying its γ and β by a common c > 0 changes the logits, "
    "under batch statistics or under the running statistics re-estimated after the rescaling (with the model's "
    "fixed running statistics every rescaling changes them, so that mode cannot define it). It is computed from "
    "the model's graph, one traced forward pass at the level of torch functions (bnmem.models.identifiable): "
    "not identifiable where the layer's output reaches the loss only through ReLU, pooling, flatten, bias-free "
    "linear maps (a bias just before a BN is centered out) and residual or concatenated paths into BatchNorms, "
    "which divide the scale back out; an operation the rule does not know counts as identifiable. A test holds "
    "the rule against the float64 oracle (c = 3, eps → 0, identifiable when the largest logit change exceeds "
    "1e-9 of the largest |logit|) on every BN layer of LeNet, MLP, ResNet-20, ResNet-18 and DenseNet.")
CLAIM4_RULE = (
    "Claim 4 is decided on the identifiable layers only, with the same test: per layer a one-sided t-test over "
    "replicates of log(median channel |γ|/σ), combined by the partial-conjunction test for 'more than half of "
    "the identifiable layers above 1' (refuted by 'at least half below 1'). The other layers are described "
    "(their number, and per replicate how many have median |γ|/σ above 1), never deciding; a setting without an "
    "identifiable layer is not run for claim 4.")
CLAIM7_RULE = (
    "Claim 7 decides on the identifiable layers of the same rule; the radial-cosine flag (below the plan's bound "
    "at every measured epoch) is kept as a cross-check and any layer where the two disagree is named.")
EFFECTIVE_STEP_ROW = (
    "Robustness row (described, no threshold): per BN channel c the effective step of what it feeds, "
    "η·γ_c²·Σ_W Σ_k ‖W[k, c]‖²/v_k (W each conv / linear layer the channel reaches first, v_k the running "
    "variance + eps of the BatchNorm its output channel k reaches next, 1 for a logit), scale-free where |γ|/σ "
    "is not: unchanged by rescaling a non-identifiable layer's (γ, β) and by moving a factor between γ_c and "
    "W[:, c]. Per layer the channel median, per setting the geometric mean over models.")

CLAIM4_ANALYSIS = "identifiable layers only (plan 6.0)"
EFFECTIVE_STEP_ANALYSIS = "effective step η·G² of the next layer, per layer (described)"


@dataclass(frozen=True)
class LayerSplit:
    """A setting's BN layers by the graph rule: ``identifiable`` decide, ``described`` do not, ``unknown`` were
    recorded without the flag (a run from before it existed, or replicates that disagree)."""

    identifiable: tuple[str, ...]
    described: tuple[str, ...]
    unknown: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.unknown

    def text(self) -> str:
        n = len(self.identifiable) + len(self.described) + len(self.unknown)
        out = f"{len(self.identifiable)} of {n} BN layers identifiable ({', '.join(self.identifiable) or 'none'})"
        return out + (f"; flag missing for {', '.join(self.unknown)}" if self.unknown else "")


def layer_split(reps: Sequence[tuple[Any, Any]], mode: str = GS_SIGMA) -> LayerSplit:
    """The split of the first replicate's layers (in its order) by every replicate's ``scale_identifiable``."""
    names = [r["name"] for r in layer_rows(reps[0][1].data, mode)] if reps else []
    seen: dict[str, set] = {n: set() for n in names}
    for _, lens in reps:
        rows = {r["name"]: r for r in layer_rows(lens.data, mode)}
        for n in names:
            seen[n].add(rows.get(n, {}).get("scale_identifiable"))
    one = {n: next(iter(v)) if len(v) == 1 else None for n, v in seen.items()}
    return LayerSplit(tuple(n for n in names if one[n] is True), tuple(n for n in names if one[n] is False),
                      tuple(n for n in names if one[n] is None))


def restricted(reps: Sequence[tuple[Any, Any]], keep: Sequence[str]) -> list[tuple[Any, Any]]:
    """The replicates with each gamma_sigma.json's per-layer records (``final`` of every σ definition) cut to the
    layers in ``keep``: claim 4's own functions then compute over those layers only."""
    keep = set(keep)
    out = []
    for cell, lens in reps:
        final = {m: {n: r for n, r in layers.items() if n in keep} if isinstance(layers, dict) else layers
                 for m, layers in (lens.data.get("final") or {}).items()}
        out.append((cell, replace(lens, data={**lens.data, "final": final})))
    return out


def described_layers(reps: Sequence[tuple[Any, Any]], layers: Sequence[str], mode: str = GS_SIGMA) -> str:
    """The non-deciding layers as a description: their number and, per replicate, how many have median |γ|/σ
    above 1 (mean over its models)."""
    if not layers:
        return "no BN layer without an identifiable scale"
    per_rep = []
    for _, lens in restricted(reps, layers):
        rows = layer_rows(lens.data, mode)
        seeds: dict[str, int] = {}
        for r in rows:
            for s, v in (r.get("per_seed") or {}).items():
                m = finite((v or {}).get("median_ratio"))
                seeds[s] = seeds.get(s, 0) + int(m is not None and m > 1.0)
        if seeds:
            per_rep.append(f"{np.mean(list(seeds.values())):.1f}")
    return (f"described, not deciding: {len(layers)} layers whose γ scale is not identifiable "
            f"({', '.join(layers)}); per replicate, layers with median |γ|/σ > 1: "
            f"{', '.join(per_rep) or 'none measured'} of {len(layers)}")


def claim4_identifiable(reps: Sequence[tuple[Any, Any]], analyse: Callable[..., Analysis],
                        mode: str = GS_SIGMA) -> Analysis:
    """Claim 4's partial-conjunction decision over the identifiable layers (``analyse``: claim 4's own
    :func:`~bnmem.report.claims.claim4.layer_analysis`, passed in so that this module imports no claim module),
    the others described in the note. Not run where the flag is missing or no layer is identifiable."""
    split = layer_split(reps, mode)
    if not split.complete:
        return Analysis(CLAIM4_ANALYSIS, None, None, None, NOT_RUN,
                        note=f"{split.text()}: rerun the gamma-sigma lens to record scale_identifiable")
    if not split.identifiable:
        return Analysis(CLAIM4_ANALYSIS, None, None, None, NOT_RUN,
                        note=f"{split.text()}: no layer can decide; " + described_layers(reps, split.described, mode))
    return analyse(CLAIM4_ANALYSIS, restricted(reps, split.identifiable), mode,
                   f"{split.text()}; " + described_layers(reps, split.described, mode))


def effective_steps(reps: Sequence[tuple[Any, Any]], mode: str = GS_SIGMA) -> dict[str, float | None]:
    """Per BN layer the geometric mean over every model of its median channel effective step (None where a
    model lacks it)."""
    names = [r["name"] for r in layer_rows(reps[0][1].data, mode)] if reps else []
    logs: dict[str, list[float | None]] = {n: [] for n in names}
    for _, lens in reps:
        rows = {r["name"]: r for r in layer_rows(lens.data, mode)}
        for n in names:
            for v in ((rows.get(n) or {}).get("per_seed") or {}).values():
                s = finite((v or {}).get("median_effective_step"))
                logs[n].append(math.log(s) if s is not None and s > 0 else None)
    out: dict[str, float | None] = {}
    for n, x in logs.items():
        vals = [v for v in x if v is not None]
        out[n] = math.exp(math.fsum(vals) / len(vals)) if vals and len(vals) == len(x) else None
    return out


def effective_step_analysis(reps: Sequence[tuple[Any, Any]], mode: str = GS_SIGMA) -> Analysis:
    """The described robustness row: per layer the effective step (identifiable layers marked), no verdict."""
    split = layer_split(reps, mode)
    steps = effective_steps(reps, mode)
    known = {n: v for n, v in steps.items() if v is not None}
    if not known:
        return Analysis(EFFECTIVE_STEP_ANALYSIS, None, None, None, NOT_RUN, note="no effective step recorded")
    parts = [f"{n}{'*' if n in split.identifiable else ''} {v:.3g}" for n, v in known.items()]
    return Analysis(EFFECTIVE_STEP_ANALYSIS, float(np.median(list(known.values()))), None, None, NOT_RUN,
                    method="described: the median over layers of each layer's geometric mean over models",
                    note="* identifiable; " + "; ".join(parts), valid=False)


def graph_flags(models: Sequence[tuple[int, dict[str, dict[str, Any]]]]) -> dict[str, bool] | None:
    """Claim 7's models' ``scale_identifiable`` (the same in every model); None when a model lacks it or two
    models disagree."""
    flags: dict[str, bool] | None = None
    for _, seeds in models:
        for rec in seeds.values():
            f = rec.get("scale_identifiable")
            if not isinstance(f, dict) or (flags is not None and f != flags):
                return None
            flags = dict(f)
    return flags


@dataclass(frozen=True)
class Claim7Layers:
    """Claim 7's deciding and described layers by the graph rule, and where the radial cosine disagrees."""

    deciding: tuple[str, ...]
    described: tuple[str, ...]
    disagree: tuple[str, ...]
    source: str  # "graph" or "radial cosine" (runs recorded before the flag)


def claim7_layers(models: Sequence[tuple[int, dict[str, dict[str, Any]]]], cos: dict[str, float],
                  invariant: Sequence[str]) -> Claim7Layers:
    """The deciding layers of claim 7: the identifiable ones of the graph rule where every model recorded it,
    else the radial cosine's (``invariant``: the layers claim 7's plan-5.0 flag calls scale-invariant, from
    :func:`~bnmem.report.claims.claim7.scale_invariant`); ``disagree`` names the layers the two flags split."""
    flags = graph_flags(models)
    invariant = set(invariant)
    if flags is None:
        return Claim7Layers(tuple(n for n in cos if n not in invariant), tuple(n for n in cos if n in invariant),
                            (), "radial cosine")
    names = list(flags) + [n for n in cos if n not in flags]
    disagree = tuple(n for n in names if n in cos and n in flags and flags[n] == (n in invariant))
    return Claim7Layers(tuple(n for n in names if flags.get(n)), tuple(n for n in names if not flags.get(n)),
                        disagree, "graph")
