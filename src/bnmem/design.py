"""``bnmem design STUDY.yaml``: per claim, the power of a study's design, the replicates 80% power needs, the
study's estimated cost, and the smallest design that gives every claim 80% power.

A claim's deciding settings in a study are its cells of the deciding recipe (fair arms, the default, where the
claim's lens takes a recipe; else the paper's protocol) grouped over replicates (the report's settings),
restricted as the claim's module declares (:attr:`bnmem.analysis_plan.ClaimPlan.design`): corrupted settings
(claims 1, 2, 3a, 6, 7), clean ones (3b), every one (4), the toy model once per study (5b, its seeds the unit).
Each setting's spread is
the pilot run's (``--pilot``: the same setting's SD when the pilot measured it, else the largest SD the pilot
observed for the claim, said so; plan 5.0: the one-sided 80% upper confidence bound on it,
:data:`bnmem.analysis_plan.PILOT_SD_BOUND`, since an SD from a few units is uncertain by a large factor) or the
plan's declared planning SD; the power math and each claim's test
are :mod:`bnmem.report.power`'s, the ones the report uses.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from bnmem import analysis_plan as ap
from bnmem.errors import BnmemError
from bnmem.names import PAPER_PROTOCOL, STUDY_FILE
from bnmem.power import sd_upper_bound
from bnmem.report.claims.shared import deciding_recipe
from bnmem.report.power import SettingDesign, design_power, unit_of, units_for
from bnmem.study.recipes import SELECTED_RECIPES_KEY
from bnmem.study.run import Cell, expand_grid, runs_in

@dataclass
class ClaimDesign:
    """One claim's row of the design table."""

    cid: str
    settings: list[SettingDesign]
    unit: str = "replicates"
    basis: str = ""
    power: float | None = None
    needed: int | None = None
    why_not: str = ""


@lru_cache(maxsize=None)
def bn_layers(arch: str, dataset: str) -> int:
    """How many BN layers ``arch`` has on ``dataset``'s input shape (built once on the CPU)."""
    import torch.nn as nn

    from bnmem.data.sources import dataset_shape
    from bnmem.models import build_model

    shape, classes = dataset_shape(dataset)
    model = build_model(arch, shape, classes, "batch")
    return sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _settings(study: Any, cid: str) -> list[tuple[str, list[Cell]]]:
    """(label, replicate cells) of each deciding setting of claim ``cid`` in the study: those of the deciding
    recipe (fair arms where the claim's lens takes a recipe and the study runs them, else the paper's
    protocol: :func:`bnmem.report.claims.shared.deciding_recipe`, as the report decides)."""
    from bnmem.lenses.spec import find

    which = ap.PLAN[cid].design.settings  # the claim module's declaration
    spec = find(ap.PLAN[cid].lens)
    takes = spec is not None and spec.takes_recipe
    recipe = deciding_recipe(r for r in study.grid.recipes if takes or r == PAPER_PROTOCOL)
    groups: dict[str, list[Cell]] = {}
    for c in expand_grid(study):
        if c.recipe != recipe:
            continue
        clean = c.outliers.label_noise == 0 and c.outliers.ood == 0
        if (which == ap.CLEAN and not clean) or (which == ap.CORRUPTED and clean):
            continue
        groups.setdefault(f"{c.dataset} · {c.arch} · {c.outliers.tag()}", []).append(c)
    return list(groups.items())


def _nested_selection() -> bool:
    """Whether the mitigate lens selects λ inside every replicate (nested selection: its config names
    ``selection_seeds``), so every replicate is evaluated; otherwise one replicate selects and is held out."""
    from bnmem.lenses import registry

    return "selection_seeds" in registry.get("mitigate").config.model_fields


def _evaluated_units(cid: str, replicates: int) -> int:
    """Replicates that enter a claim's interval (claim 6 without nested selection holds one out for λ)."""
    held_out = ap.PLAN[cid].design.held_out_selection
    return replicates - 1 if held_out and replicates > 1 and not _nested_selection() else replicates


def _pilot_sds(pilot: list[Any] | None, cid: str) -> dict[tuple[str, float, float], dict[str, float | None]]:
    """(arch, label noise, OOD) -> endpoint SDs the pilot observed for claim ``cid``."""
    out: dict[tuple[str, float, float], dict[str, float | None]] = {}
    for c in pilot or []:
        if c.id != cid:
            continue
        for e in c.deciding():
            if ap.PLAN[cid].design.settings != ap.ONCE_PER_STUDY and unit_of(e) != "replicates":
                continue  # an interval over one replicate's seeds: not the spread of replicate means
            key = (str(e.conditions.get("arch")), float(e.conditions.get("label_noise") or 0),
                   float(e.conditions.get("ood") or 0))
            out[key] = {"": sd_upper_bound(e.sd, e.n, ap.PILOT_SD_BOUND),
                        **{k: sd_upper_bound(v[1], v[0], ap.PILOT_SD_BOUND) for k, v in e.spreads.items()}}
    return out


def _sds_for(cell: Cell, observed: dict[tuple[str, float, float], dict[str, float | None]],
             names: list[str]) -> tuple[dict[str, float | None], str]:
    """The spreads of one setting: the pilot's for the same setting, else its largest for the claim."""
    key = (cell.arch, float(cell.outliers.label_noise), float(cell.outliers.ood))
    bound = f" ({ap.PILOT_SD_BOUND:.0%} upper bound on its SD)"
    if key in observed:
        return observed[key], "pilot: same setting" + bound
    if observed:
        pooled = {n: max((v.get(n) for v in observed.values() if v.get(n) is not None), default=None)
                  for n in names}
        return pooled, "pilot: largest SD of its settings" + bound
    return {n: None for n in names}, "declared planning SD"


def claim_design(study: Any, cid: str, pilot: list[Any] | None = None) -> ClaimDesign:
    """Claim ``cid``'s settings in ``study`` with their n and spreads, its power and the units 80% needs."""
    eps = ap.PLANNING.get(cid)
    plan = ap.PLAN[cid]
    if not eps:
        why = ("exploratory (beyond the paper): no planning effect, no power" if plan.kind == ap.BEYOND_PAPER
               else "a derivation check: no power")
        return ClaimDesign(cid, [], why_not=why)
    lens = plan.lens
    if lens not in study.lenses.enabled():
        return ClaimDesign(cid, [], why_not=f"the study does not run the {lens} lens")
    names = [e.name for e in eps]
    observed = _pilot_sds(pilot, cid)
    if plan.design.settings == ap.ONCE_PER_STUDY:
        cfg = study.lenses.options(lens) or {}
        n = int(cfg.get("counterfactual_seeds", 5))
        sds = {"": max((v.get("") for v in observed.values() if v.get("") is not None), default=None)}
        basis = "pilot" if sds[""] is not None else "declared planning SD"
        d = ClaimDesign(cid, [SettingDesign(n, sds)], "seeds of the toy model", basis)
    else:
        settings, bases = [], set()
        tests = plan.design.tests(study.lenses.options(lens) or {}) if plan.design.tests else 1
        for _, cells in _settings(study, cid):
            cells = [c for c in cells if runs_in(study, lens, c)]  # the lens's allotment
            if not cells:
                continue
            c = cells[0]
            sds, basis = _sds_for(c, observed, names)
            bases.add(basis)
            mix = c.outliers.label_noise or c.outliers.ood or None
            paper = plan.paper_range(mix) if plan.paper_range else None
            settings.append(SettingDesign(_evaluated_units(cid, len(cells)), sds, paper, tests,
                                          bn_layers(c.arch, c.dataset) if plan.design.per_layer else 4,
                                          len(c.seeds)))
        if not settings:
            return ClaimDesign(cid, [], why_not="no setting of the study measures it")
        d = ClaimDesign(cid, settings, basis="; ".join(sorted(bases)))
    d.power = design_power(cid, d.settings)
    d.needed = units_for(cid, d.settings)
    return d


def evaluate_design(study: Any, pilot_dir: str | Path | None = None) -> list[ClaimDesign]:
    """Every claim of the plan in ``study``'s design (spreads from ``pilot_dir`` when given)."""
    pilot = None
    if pilot_dir is not None:
        from bnmem.report.claims import evaluate_claims
        from bnmem.report.rundata import load_run

        if not (Path(pilot_dir) / STUDY_FILE).exists() and not Path(pilot_dir).is_dir():
            raise BnmemError(f"pilot run {pilot_dir} does not exist")
        pilot = evaluate_claims(load_run(pilot_dir))
    return [claim_design(study, cid, pilot) for cid in ap.PLAN]


def design_table(rows: list[ClaimDesign]) -> list[list[str]]:
    """Rows of the printed table: claim, settings, n, power, units for 80%, spreads from."""
    out = []
    for r in rows:
        if r.power is None:
            out.append([r.cid, "-", "-", "-", "-", r.why_not])
            continue
        n = sorted({s.n for s in r.settings})
        need = "-" if r.needed is None else f"{r.needed}"
        out.append([r.cid, str(len(r.settings)), ",".join(map(str, n)) + f" {r.unit}",
                    f"{r.power:.2f}", need, r.basis])
    return out


def proposal(study_doc: dict[str, Any], rows: list[ClaimDesign]) -> tuple[dict[str, Any], list[str]]:
    """The smallest design that gives every claim 80% power, as a study document, with the claims that no
    number of units reaches: per lens the replicates its claims need (``lenses.NAME.replicates``), the grid's
    replicates the largest of them, the toy model's seeds what claim 5b needs."""
    doc = copy.deepcopy(study_doc)
    unreachable = []
    by_lens: dict[str, int] = {}
    seeds = None
    for r in rows:
        if r.power is None:
            continue
        if r.needed is None:
            unreachable.append(r.cid)
            continue
        if r.unit.startswith("seeds"):
            seeds = max(seeds or 0, r.needed)
            continue
        held_out = 1 if _evaluated_units(r.cid, 2) < 2 else 0  # plan 3.0's claim 6: one replicate selects λ
        lens = ap.PLAN[r.cid].lens
        by_lens[lens] = max(by_lens.get(lens, 2), r.needed + held_out)
    reps = max(by_lens.values(), default=int((doc.get("grid") or {}).get("replicates", 1)))
    doc.setdefault("grid", {})["replicates"] = reps
    lenses = doc.setdefault("lenses", {})
    if isinstance(lenses, list):  # a list of names: each with its defaults
        lenses = doc["lenses"] = {name: {} for name in lenses}
    for key in list(lenses):
        opts = lenses[key] if isinstance(lenses[key], dict) else {}
        name = "gamma-sigma" if key == "gamma_sigma" else key
        if name in by_lens:
            lenses[key] = {**opts, "replicates": by_lens[name]} if by_lens[name] < reps else \
                {k: v for k, v in opts.items() if k != "replicates"}
    if seeds is not None:
        theory = lenses.get("theory") or {}
        lenses["theory"] = {**theory, "counterfactual_seeds": max(2, seeds)}
    doc["name"] = f"{doc.get('name', 'study')}-proposed"
    return doc, unreachable


def fmt_power(p: float | None) -> str:
    return "-" if p is None or not math.isfinite(p) else f"{p:.2f}"


def pilot_study(run_dir: str | Path) -> Any:
    """The study a run directory ran (its study.json, without the plan and confirmatory records)."""
    from bnmem import io
    from bnmem.study.schema import Study

    try:
        doc = io.read_json(Path(run_dir) / STUDY_FILE)
    except (OSError, ValueError):
        raise BnmemError(f"{run_dir} has no readable {STUDY_FILE}: give a run directory of `bnmem run`") from None
    doc = {k: v for k, v in doc.items() if k not in (ap.RECORD_KEY, ap.CONFIRMATORY_KEY, SELECTED_RECIPES_KEY)}
    return Study.model_validate(doc)


def pilot_jobs(run_dir: str | Path) -> list[Any]:
    """The jobs a run directory ran, with the seeds it ran them with: a confirmatory run's derived from the key
    its study.json records (:func:`bnmem.provenance.record_key`), so that its calibration finds the runs each
    shared-training job wrote (``<norm>/seed<k>``) under their derived seeds."""
    from bnmem import io
    from bnmem.provenance import record_key
    from bnmem.study.run import build_jobs

    study = pilot_study(run_dir)  # a missing or unreadable study.json: one clear line
    record = io.read_json(Path(run_dir) / STUDY_FILE).get(ap.CONFIRMATORY_KEY)
    return build_jobs(study, record_key(record) if record else None)[1]
