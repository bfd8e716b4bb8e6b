"""Claim 4's per-layer test (plan 5.0): one-sided t-tests per BN layer, combined by a partial-conjunction test.

Per BN layer l, the units are the replicates (each the mean over its models of log(median channel |γ|/σ));
with one replicate, its models. A one-sided Student t-test over the units (n − 1 df) gives p⁺_l (mean > 0,
|γ|/σ above 1) and p⁻_l (mean < 0). The partial-conjunction test of Benjamini & Heller (2008) with the
Bonferroni combination asks whether at least u of the L layers are above 1:
p = min(1, (L − u + 1)·p⁺_(u)), p⁺_(u) the u-th smallest. "Most layers" is u = ⌊L/2⌋ + 1; its refutation,
"at least half the layers below 1", is u' = ⌈L/2⌉ on p⁻.

Because (L − u + 1)·p⁺_(u) < α exactly when at least u layers have p⁺ < α/(L − u + 1), the test equals one
confidence bound: the layer ranked u-th by its evidence (the *pivotal* layer) has its one-sided lower bound at
α/(L − u + 1) above ratio 1. Since L − u' + 1 = u, the refutation's pivotal layer is the same layer (ranked
u'-th from the other end), with its upper bound at α/(L − u' + 1). The claim's row shows that layer's |γ|/σ
with these two bounds, so the interval reads as the test does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import special
from scipy import stats as sps

from bnmem.stats import PairedDiff


@dataclass(frozen=True)
class LayerTest:
    """One BN layer's t-test over its units (log |γ|/σ scale). ``p_plus``/``p_minus`` are NaN when the test is
    undefined (fewer than 2 units, or no spread)."""

    name: str
    n: int
    mean: float
    sd: float
    p_plus: float
    p_minus: float

    @property
    def se(self) -> float:
        return self.sd / math.sqrt(self.n) if self.n >= 2 else math.nan

    @property
    def defined(self) -> bool:
        return math.isfinite(self.p_plus)

    def bound(self, alpha: float, upper: bool) -> float | None:
        """The one-sided (1 − alpha) confidence bound of the mean log ratio; None when undefined."""
        if not self.defined:
            return None
        half = float(special.stdtrit(self.n - 1, 1.0 - alpha)) * self.se  # the t quantile (a fast ufunc)
        return self.mean + half if upper else self.mean - half

    def interval(self, level: float) -> tuple[float | None, float | None]:
        """The two-sided t-interval at ``level`` (the per-layer table's)."""
        a = (1.0 - level) / 2.0
        return self.bound(a, upper=False), self.bound(a, upper=True)


def layer_test(name: str, units: Sequence[float]) -> LayerTest:
    """One-sided t-tests of mean > 0 and mean < 0 over the finite ``units`` (n − 1 df)."""
    x = [float(v) for v in units if v is not None and math.isfinite(v)]  # a few values: plain floats are fastest
    n = len(x)
    mean = math.fsum(x) / n if n else math.nan
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1)) if n >= 2 else math.nan
    if n < 2 or max(x) == min(x):  # no spread (rounding would leave ~1e-17): undefined, never "certain"
        return LayerTest(name, n, mean, sd, math.nan, math.nan)
    t = mean / (sd / math.sqrt(n))
    return LayerTest(name, n, mean, sd, float(special.stdtr(n - 1, -t)), float(special.stdtr(n - 1, t)))


def u_above(layers: int) -> int:
    """"More than half of L layers": u = ⌊L/2⌋ + 1."""
    return layers // 2 + 1


def u_below(layers: int) -> int:
    """"At least half of L layers": u' = ⌈L/2⌉."""
    return (layers + 1) // 2


def partial_conjunction(p: Sequence[float], u: int) -> float:
    """Benjamini–Heller's Bonferroni partial-conjunction p-value that at least u of the L nulls are false:
    min(1, (L − u + 1)·p_(u)); an undefined p counts as 1."""
    arr = np.sort(np.where(np.isfinite(np.asarray(p, dtype=np.float64)), p, 1.0))
    if not 1 <= u <= arr.size:
        return 1.0
    return float(min(1.0, (arr.size - u + 1) * arr[u - 1]))


def _pivot(tests: Sequence[LayerTest], u: int, plus: bool) -> LayerTest:
    """The layer with the u-th smallest p (undefined counts as 1; ties by name, for a stable choice)."""
    def key(t: LayerTest) -> tuple[float, str]:
        p = t.p_plus if plus else t.p_minus
        return (p if math.isfinite(p) else 1.0, t.name)

    return sorted(tests, key=key)[u - 1]


@dataclass(frozen=True)
class LayerDecision:
    """The partial-conjunction decision of one setting and the pivotal layer's numbers (log scale)."""

    tests: tuple[LayerTest, ...]
    p_above: float  # "more than half of the layers above 1"
    p_below: float  # "at least half of the layers below 1"
    pivot: LayerTest
    low: float | None  # the pivot's lower bound at α/(L − u + 1)
    high: float | None  # the (refutation's) pivot's upper bound at α/(L − u' + 1)

    @property
    def layers(self) -> int:
        return len(self.tests)

    def shown_above(self, alpha: float) -> int:
        """The most layers the data show above 1 at ``alpha``: the largest v with every partial-conjunction
        p-value for 1..v below alpha (a valid lower confidence bound on the number of layers above 1)."""
        p = [t.p_plus for t in self.tests]
        v = 0
        while v < len(p) and partial_conjunction(p, v + 1) < alpha:
            v += 1
        return v

    def estimate(self, units: str) -> PairedDiff:
        """The pivotal layer's |γ|/σ (geometric mean over units) with the test's bounds, on the ratio scale;
        its ``sd`` is the pivot's SD of log ratios (what power reads)."""
        ex = (lambda v: None if v is None else math.exp(v))
        lo, hi = ex(self.low), ex(self.high)
        if lo is None or hi is None:
            lo = hi = None
        return PairedDiff(math.exp(self.pivot.mean) if math.isfinite(self.pivot.mean) else math.nan, lo, hi,
                          self.pivot.n, units, "", sd=self.pivot.sd if math.isfinite(self.pivot.sd) else None)


def decide_layers(tests: Sequence[LayerTest], alpha: float) -> LayerDecision:
    """The partial-conjunction p-values and the pivotal layer's bounds at one-sided ``alpha``."""
    L = len(tests)
    ua, ub = u_above(L), u_below(L)
    pa = partial_conjunction([t.p_plus for t in tests], ua)
    pb = partial_conjunction([t.p_minus for t in tests], ub)
    pivot_a, pivot_b = _pivot(tests, ua, True), _pivot(tests, ub, False)
    return LayerDecision(tuple(tests), pa, pb, pivot_a, pivot_a.bound(alpha / (L - ua + 1), upper=False),
                         pivot_b.bound(alpha / (L - ub + 1), upper=True))


def partial_conjunction_power(n: int, sd: float, effect: float, layers: int, alpha: float) -> float:
    """The power of "more than half of L layers above 1" when every layer's mean log ratio is ``effect`` with
    unit SD ``sd``, layers independent: P(Binomial(L, q) ≥ u), q the power of one layer's one-sided t-test at
    α/(L − u + 1) (the rule's own arithmetic: p < α exactly when at least u layers pass that level)."""
    if n < 2 or not (sd is not None and math.isfinite(sd)) or layers < 1:
        return 0.0
    u = u_above(layers)
    a = alpha / (layers - u + 1)
    if sd == 0:
        q = float(effect > 0)
    else:
        crit = sps.t.ppf(1.0 - a, n - 1)
        q = float(sps.nct.sf(crit, n - 1, effect * math.sqrt(n) / sd))
    return float(sps.binom.sf(u - 1, layers, q))
