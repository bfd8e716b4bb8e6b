"""The power of every claim's design, where the verdict is read (headline, summary.md, summary.csv, forest).

Each claim's test and planning effect are declared once, in its claim module (read through
:data:`bnmem.analysis_plan.PLANNING`); the power math is :mod:`bnmem.power`. A claim's design is its deciding
settings (:class:`SettingDesign`): the units (replicates) each has, the spread of one unit's value (observed in a run, or the plan's declared SD),
the paper's range where the test reads it, and for claim 4 the layers and seeds of the simulation. The
power of "reproduced" is the product over settings (every setting must pass) of the product over the
claim's endpoints (claim 6: the cut and the cost); :func:`units_for` finds the units 80% power needs.
``bnmem design`` (:mod:`bnmem.design`) calls the same functions with a planned design.

Plan 5.0: power is a property of a design, read before the data decide, so a report shows it only where it
says something. A decided row (reproduced, contradicted, larger or smaller than the paper, a derivation check)
shows no power figure; an undecided one (inconclusive, direction only) shows the smallest effect its achieved
n could have detected with 80% power at the spread it observed (:func:`min_detectable`), and the replicates
80% power at the declared planning effect would need.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from bnmem.analysis_plan import (
    CHECK_FAILED, CHECK_PASSED, CONTRADICTED, INCONCLUSIVE, LARGER, NOT_RUN, PLANNING, POWER_TARGET, REPRODUCED,
    SMALLER, TEST_ABOVE, TEST_BAND, TEST_BELOW, TEST_EXACT, TEST_LAYERS,
    UNDERPOWERED_BELOW, Endpoint, reproduced_level,
)
from bnmem.power import power_above, power_all, power_band, power_below, power_simulated_all, units_needed
from bnmem.report.claims import Claim
from bnmem.report.claims.core import at_level

SIM_RUNS = 400  # Monte Carlo studies per design of an exact rule (claim 4): power ± 0.025 (standard error)
SIM_SEED = 26
MAX_UNITS = 1000  # "replicates needed" beyond this reads "more than 1000"
# Plan 5.0: rows whose status is decided show no power (power describes a design, not a result).
DECIDED = (REPRODUCED, CONTRADICTED, LARGER, SMALLER, CHECK_PASSED, CHECK_FAILED, NOT_RUN)


@dataclass(frozen=True)
class SettingDesign:
    """One deciding setting of a claim as its power sees it.

    Attributes:
        n: units (replicates; seeds of the toy model for 5b).
        sds: endpoint name -> SD of one unit's value ("" = the claim's number).
        paper: the paper's (minimum, upper end), where an endpoint reads it.
        tests: tests of this setting that must all pass (claim 2: two gradient definitions).
        layers, seeds: claim 4's simulation: BN layers per model and seeds per replicate.
    """

    n: int
    sds: dict[str, float | None]
    paper: tuple[float, float] | None = None
    tests: int = 1
    layers: int = 4
    seeds: int = 1


@dataclass(frozen=True)
class ClaimPower:
    """A claim's power at its design, and the units 80% power needs (None: not applicable)."""

    cid: str
    power: float | None
    n: int = 0
    needed: int | None = None
    unit: str = "replicates"
    basis: str = ""
    settings: int = 0
    notes: list[str] = field(default_factory=list)
    status: str = ""  # the row's status ("" in a design: every figure shown)
    mde: float | None = None  # the smallest effect 80% power detects at the achieved n (undecided rows)
    fmt_effect: Any = None  # formats an effect as the claim displays it (default "+0.123")

    @property
    def shown(self) -> bool:
        """Whether the row shows a power figure (plan 5.0: never beside a decided status)."""
        return self.power is not None and self.status not in DECIDED

    @property
    def underpowered(self) -> bool:
        return self.power is not None and self.power < UNDERPOWERED_BELOW

    def needed_text(self) -> str:
        return (f"~{self.needed} {self.unit} needed" if self.needed is not None
                else f"more than {MAX_UNITS} {self.unit} needed")

    def verdict(self, status: str) -> str:
        """The status as the checklist reads it: an underpowered inconclusive row says so."""
        if status == INCONCLUSIVE and self.underpowered and self.shown:
            return f"{INCONCLUSIVE} (underpowered: power {self.power:.2f}; {self.needed_text()})"
        return status

    def mde_text(self) -> str:
        """'80% power at 3 replicates only for an effect ≥ +0.120 (observed spread)', or ''."""
        if self.mde is None or not math.isfinite(self.mde):
            return ""
        unit = self.unit if self.n != 1 else self.unit.rstrip("s")
        return (f"{POWER_TARGET:.0%} power at {self.n} {unit} only for an effect ≥ "
                f"{(self.fmt_effect or '{:+.3f}'.format)(self.mde)} ({self.basis})")

    def short_text(self) -> str:
        """The headline's compact form of :meth:`text`: '0.52 at 3 rep. (observed SD) · 80%: ~4', with
        ' · detects ≥ +0.120 at 80%' where the row has a minimum detectable effect, or '—' (a decided row: no
        power)."""
        if not self.shown:
            return "—"
        unit = "rep." if self.unit == "replicates" else self.unit
        basis = ("declared SD" if self.basis.startswith("declared") else
                 "observed SD" if self.basis.startswith("observed") else self.basis)
        need = f"~{self.needed}" if self.needed is not None else f"> {MAX_UNITS}"
        mde = "" if self.mde is None or not math.isfinite(self.mde) else \
            f" · detects ≥ {(self.fmt_effect or '{:+.3f}'.format)(self.mde)} at {POWER_TARGET:.0%}"
        return f"{self.power:.2f} at {self.n} {unit}" + (f" ({basis})" if basis else "") + \
            f" · {POWER_TARGET:.0%}: {need}" + mde

    def text(self) -> str:
        """An undecided row: the smallest effect its n could detect at 80% and the replicates the planning
        effect needs ('80% power at 3 replicates only for an effect ≥ +0.120 (observed spread); ~9 replicates
        needed for the planning effect'); a design: '0.52 at 3 replicates (observed spread); 80%: ~4
        replicates'; a decided row: '—'."""
        if not self.shown:
            return "—"
        if self.status:
            mde = self.mde_text()
            return (f"{mde}; " if mde else f"power {self.power:.2f} at {self.n} {self.unit} ({self.basis}); ") + \
                f"{self.needed_text()} for the planning effect"
        return (f"{self.power:.2f} at {self.n} {self.unit} ({self.basis}); {POWER_TARGET:.0%}: "
                f"{self.needed_text()}")


def sim_runs() -> int:
    """:data:`SIM_RUNS`, read at call time (a test may lower it)."""
    return SIM_RUNS


def _alpha() -> float:
    return (1.0 - reproduced_level()) / 2.0


def _limits(ep: Endpoint, paper: tuple[float, float] | None) -> tuple[float, float]:
    """(effect, threshold) of an endpoint in a setting (the paper's range where the plan says so)."""
    effect = ep.effect if ep.effect is not None else (paper[1] if paper else math.nan)
    threshold = ep.threshold if ep.threshold is not None else (paper[0] if paper else math.nan)
    return effect, threshold


def _beta_draw(rng: np.random.Generator, mean: float, sd: float, size: int) -> np.ndarray:
    """Per-replicate probabilities with the given mean and SD (constant when the SD is ~0 or too large)."""
    var = sd * sd
    if var <= 1e-12 or var >= mean * (1 - mean):
        return np.full(size, mean)
    k = mean * (1 - mean) / var - 1
    return rng.beta(mean * k, (1 - mean) * k, size)


def _exact_power(ep: Endpoint, n: int, sd: float, s: SettingDesign) -> float:
    """Claim 4: the rule's own decision (:func:`claim4.layer_fraction_estimate`, for all simulated studies at
    once: :func:`claim4.layer_fraction_reproduced`) on simulated layer counts (settings alike in n, spread,
    layers and seeds are simulated once)."""
    return _exact_power_cached(ep, n, round(float(sd), 12), s.layers, max(1, s.seeds), sim_runs())


def layer_fraction_draw(rng: np.random.Generator, k: int, mean: float, between: float, layers: int,
                        seeds: int) -> np.ndarray:
    """One simulated claim-4 study: [k replicates, seeds] fractions of ``layers`` layers above 1, each replicate's
    probability drawn around ``mean`` with SD ``between``. One binomial call for all replicates: the generator
    fills the array in order, so the draws are those of one call per replicate (tested)."""
    p = _beta_draw(rng, mean, between, k)
    return rng.binomial(layers, np.repeat(p, seeds).reshape(k, seeds)) / layers


@lru_cache(maxsize=4096)
def _exact_power_cached(ep: Endpoint, n: int, sd: float, layers: int, seeds: int, runs: int) -> float:
    from bnmem.report.claims.claim4 import layer_fraction_reproduced

    s = SettingDesign(n, {}, layers=layers, seeds=seeds)
    mean = float(ep.effect if ep.effect is not None else 0.75)
    # The observed SD of replicate means includes the binomial noise of L layers × seeds: keep only the rest.
    between = math.sqrt(max(0.0, sd * sd - mean * (1 - mean) / (s.layers * max(1, s.seeds))))

    def draw(rng: np.random.Generator, k: int) -> np.ndarray:
        return layer_fraction_draw(rng, k, mean, between, s.layers, max(1, s.seeds))

    def decide_all(studies: list[list[np.ndarray]]) -> np.ndarray:
        with at_level(reproduced_level()):
            return layer_fraction_reproduced(studies)

    # Every simulated study decided at once: the rule's arithmetic over an array of studies (tested against
    # layer_fraction_estimate study by study), the same draws from the same generator.
    return power_simulated_all(decide_all, draw, n, runs=runs, seed=SIM_SEED)


def endpoint_power(ep: Endpoint, n: int, sd: float | None, s: SettingDesign) -> float:
    """The power of one endpoint's test in one setting at n units with unit SD ``sd``."""
    sd = ep.sd if sd is None or not math.isfinite(sd) else sd
    effect, threshold = _limits(ep, s.paper)
    if ep.test == TEST_ABOVE:
        return power_above(n, sd, effect, threshold, _alpha())
    if ep.test == TEST_BELOW:
        return power_below(n, sd, effect, threshold, _alpha())
    if ep.test == TEST_BAND:
        return power_band(n, sd, effect, ep.band or (threshold, threshold), _alpha())
    if ep.test == TEST_EXACT:
        return _exact_power(ep, n, sd, s)
    if ep.test == TEST_LAYERS:  # claim 4 (plan 5.0): the partial-conjunction rule's own arithmetic
        from bnmem.report.claims.layer_test import partial_conjunction_power

        return partial_conjunction_power(n, sd, effect, s.layers, (1.0 - reproduced_level()) / 2.0)
    raise ValueError(f"unknown test {ep.test!r}")


def design_power(cid: str, settings: list[SettingDesign], n: int | None = None,
                 endpoints: tuple[Endpoint, ...] | None = None) -> float | None:
    """The power of claim ``cid``'s "reproduced" over its deciding settings (every one must pass), each at its
    own n or all at ``n`` (``endpoints``: instead of the plan's); None for a claim without a declared test (a
    derivation check) or no setting."""
    eps = PLANNING.get(cid) if endpoints is None else endpoints
    if not eps or not settings:
        return None
    per = []
    for s in settings:
        k = s.n if n is None else n
        p = power_all(endpoint_power(ep, k, s.sds.get(ep.name), s) for ep in eps)
        per.append(p ** max(1, s.tests))
    return power_all(per)


def units_for(cid: str, settings: list[SettingDesign], target: float = POWER_TARGET) -> int | None:
    """The units per setting that give claim ``cid`` ``target`` power (None beyond :data:`MAX_UNITS`)."""
    if not PLANNING.get(cid) or not settings:
        return None
    return units_needed(lambda k: design_power(cid, settings, k) or 0.0, target, limit=MAX_UNITS)


def min_detectable(cid: str, settings: list[SettingDesign], target: float = POWER_TARGET) -> float | None:
    """The smallest true effect (the same in every setting) at which claim ``cid``'s "reproduced" has
    ``target`` power at the settings' own n and spreads, in the endpoint's own scale: for a claim decided by one
    one-sided t-test on its number (claims 1, 2, 3a, 3b, 7), and for claim 4's partial-conjunction test (the
    mean log |γ|/σ of every layer; :func:`on_number_scale` turns it into the ratio the claim shows); None for
    the others (bands, discrete or two-endpoint rules) or where even an effect of 1000 standard deviations does
    not reach it (fewer than 2 units)."""
    eps = PLANNING.get(cid)
    if not eps or len(eps) != 1 or eps[0].test not in (TEST_ABOVE, TEST_LAYERS) or not settings:
        return None
    ep = eps[0]
    sds = [s.sds.get(ep.name) for s in settings]
    scale = max([abs(v) for v in sds if v is not None and math.isfinite(v)] + [ep.sd, 1e-12])
    base = max(_limits(ep, s.paper)[1] for s in settings)

    def power_at(effect: float) -> float:
        return design_power(cid, settings, endpoints=(dataclasses.replace(ep, effect=effect),)) or 0.0

    lo, hi = base, base + 1000 * scale
    if power_at(hi) < target:
        return None
    for _ in range(60):  # power grows with the effect: bisection to ~1e-15 of the bracket
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power_at(mid) < target else (lo, mid)
    return hi


def on_number_scale(cid: str, effect: float | None) -> float | None:
    """An effect of claim ``cid``'s endpoint on the scale of the number the claim shows: claim 4's test reads the
    mean log |γ|/σ of a layer and its row shows the ratio itself, so its effect is exponentiated; every other
    claim's endpoint is its number."""
    eps = PLANNING.get(cid) or ()
    if effect is None or not eps or eps[0].test != TEST_LAYERS:
        return effect
    return math.exp(effect)


def unit_of(e: Any) -> str:
    """What the interval's units are: replicates, or (one replicate; the toy model) seeds."""
    reps = e.conditions.get("replicates")
    return "replicates" if isinstance(reps, list) and len(reps) >= 2 else "seeds"


def settings_of_claim(claim: Claim) -> list[SettingDesign]:
    """The deciding settings of an evaluated claim with their observed n and spreads."""
    out = []
    for e in claim.deciding():
        sds: dict[str, float | None] = {"": e.sd, **{k: v[1] for k, v in e.spreads.items()}}
        seeds = e.conditions.get("n_seeds") or 1
        out.append(SettingDesign(e.n, sds, e.paper, e.tests, int(e.conditions.get("n_layers") or 4), int(seeds)))
    return out


def claim_power(claim: Claim) -> ClaimPower:
    """The power of a claim's design at the run's n and observed spread, and the units 80% would need."""
    settings = settings_of_claim(claim)
    p = design_power(claim.id, settings)
    if p is None:
        return ClaimPower(claim.id, None)
    eps = PLANNING[claim.id]
    # An observed SD of 0 is an observed spread (the units agreed exactly), not a missing one.
    declared = [ep.name or "the claim's number" for ep in eps for s in settings
                if (v := s.sds.get(ep.name)) is None or not math.isfinite(v)]
    basis = "observed spread" if not declared else ("declared planning SD for " + ", ".join(dict.fromkeys(declared)))
    ds = claim.deciding()
    status = claim.status
    undecided = status not in DECIDED
    return ClaimPower(claim.id, p, min(s.n for s in settings), units_for(claim.id, settings),
                      unit_of(ds[0]) if ds else "replicates", basis, len(settings), status=status,
                      mde=on_number_scale(claim.id, min_detectable(claim.id, settings)) if undecided else None,
                      fmt_effect=_effect_format(claim))


def _effect_format(claim: Claim) -> Any:
    """How an effect of this claim is written in its power text: as the claim shows its number; claim 4's, a
    ratio, is said to hold in every layer (the simulated truth of its minimum detectable effect)."""
    eps = PLANNING.get(claim.id) or ()
    if eps and eps[0].test == TEST_LAYERS:
        return lambda v: f"{claim.fmt(v)} |γ|/σ in every layer"
    return claim.fmt


def power_of(claim: Claim) -> ClaimPower:
    """:func:`claim_power`, computed once per claim object (claim 4's simulation takes a second or two, and the
    CSV, markdown, headline and forest plot all read it)."""
    cached = claim.__dict__.get("_power")
    if cached is None:
        cached = claim.__dict__["_power"] = claim_power(claim)
    return cached


# Plan 6.0: the tests whose planning SD is the spread of one unit's value, comparable with the run's observed SD.
_SD_TESTS = (TEST_ABOVE, TEST_BELOW, TEST_BAND)


def power_check(claim: Claim) -> str:
    """Plan 6.0's check after the run: a design is sized on the plan's declared planning SD of one unit (the
    bound `bnmem design` uses without a pilot). Where a deciding setting's observed SD exceeds it, this says so,
    setting by setting, and gives the power of "reproduced" at the run's n at the observed SDs beside the power
    at the declared ones; '' where no observed SD exceeds its bound (or the claim has no SD-based test)."""
    eps = [ep for ep in PLANNING.get(claim.id, ()) if ep.test in _SD_TESTS]
    ds = claim.deciding()
    if not eps or not ds:
        return ""
    settings = settings_of_claim(claim)
    over = []
    for e, s in zip(ds, settings):
        if unit_of(e) != "replicates" and e.conditions.get("replicates") is not None:
            continue  # an interval over one replicate's seeds: not the spread the design's SD stands for
        for ep in eps:
            v = s.sds.get(ep.name)
            if v is not None and math.isfinite(v) and v > ep.sd:
                what = f"{ep.name} " if ep.name else ""
                over.append(f"{e.where}: {what}SD {v:.3g} > {ep.sd:.3g}")
    if not over:
        return ""
    declared = [dataclasses.replace(s, sds={ep.name: ep.sd for ep in PLANNING[claim.id]}) for s in settings]
    p_obs, p_decl = design_power(claim.id, settings), design_power(claim.id, declared)
    if p_obs is None or p_decl is None:
        return ""
    return (f"observed SD above the design's bound ({'; '.join(over)}): power at the observed SD {p_obs:.2f}, "
            f"not the {p_decl:.2f} the declared SD gives at the same n")
