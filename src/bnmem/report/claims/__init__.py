"""The paper's claims, each decided by the declared analysis plan (:mod:`bnmem.analysis_plan`).

One module per claim: everything about a claim lives in its module, which
declares ``CLAIMS`` (its :class:`bnmem.analysis_plan.ClaimPlan` s: the plan's text,
constants, planning effect, display, forest-plot axis and design branch) and
``evaluate(run) -> list[Claim]``. The modules are found by the plan's registry
(:func:`bnmem.analysis_plan.claim_modules`: every module of this package that
declares ``CLAIMS``), so adding a claim is adding its module and its test; the
grading core (statuses, intervals, the least supportive setting, multiplicity)
is :mod:`bnmem.report.claims.core`.

A claim is evaluated once per setting it can be measured in (a setting groups
the replicate cells whose conditions differ only in the replicate; each BN vs
baseline pair and corrupted subset is its own evaluation). A claim with k
deciding evaluations is evaluated a second time with every interval at
1 − 0.05/k, and :func:`bnmem.report.claims.core.combine` tests 'contradicted'
(which one setting decides) at that level and everything else at 95% (a row is
reproduced only if every setting is). The claim's row (:meth:`Claim.row`) shows
the least supportive deciding evaluation, the robustness panel's agreement, and
the verdict under the previous plan version's rule
(:data:`bnmem.analysis_plan.PREVIOUS_VERSION`): a module records it when the
previous rule differs from the current one; otherwise the previous verdict is
the current one. Either way the previous verdicts go through plan 4.0's
multiplicity, which 5.0 and 6.0 kept: the 95% pass, or the family-level pass
where either reads 'contradicted'.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable

from bnmem.analysis_plan import CONTRADICTED, claim_modules, family_level
from bnmem.report.claims.core import (
    RANK, ROW_KEYS, Analysis, Claim, Evaluation, PreviousVerdict, at_level, combine, grade, grade_v2, vs_paper,
    weakest,
)
from bnmem.report.claims.shared import conditions_text, mark_variants
from bnmem.report.rundata import RunData

__all__ = ["Analysis", "Claim", "Evaluation", "PreviousVerdict", "RANK", "ROW_KEYS", "RULES", "conditions_text",
           "evaluate_claims", "evaluate_rule", "grade", "grade_v2", "rule_ids", "vs_paper", "weakest"]

# The rule modules, in the paper's order: the claim modules the plan's registry finds in this package.
RULES: tuple[ModuleType, ...] = claim_modules()


def rule_ids() -> list[str]:
    """Every claim id some rule module decides (a test keeps it equal to the plan's ids)."""
    return [p.id for m in claim_modules() for p in m.CLAIMS]


def _previous_from(c: Claim) -> list[PreviousVerdict]:
    """The previous plan's verdicts a module recorded, else (the rule did not change) the current ones."""
    if c.previous:
        return list(c.previous)
    return [PreviousVerdict(e.where, e.value, e.status) for e in c.deciding()]


def _previous_combined(at_95: list[PreviousVerdict], at_family: list[PreviousVerdict]) -> list[PreviousVerdict]:
    """Plan 4.0's multiplicity on the previous verdicts: each at 95% unless its family-level twin (the same
    place, in order) or it reads 'contradicted'."""
    out = []
    for i, p in enumerate(at_95):
        f = at_family[i] if i < len(at_family) and at_family[i].where == p.where else p
        out.append(f if CONTRADICTED in (p.status, f.status) else p)
    return out


def _with_family_level(evaluate: Callable[[RunData], list[Claim]], run: RunData) -> list[Claim]:
    """Evaluate once at 95% (which also counts each claim's deciding tests k), then again at 1 − 0.05/k,
    and combine the two passes (:func:`bnmem.report.claims.core.combine`)."""
    first = [mark_variants(c) for c in evaluate(run)]
    out = []
    for i, c in enumerate(first):
        k = c.family_size()
        if k <= 1:
            c.previous = _previous_from(c)
            out.append(c)
            continue
        with at_level(family_level(k)):
            fam = mark_variants(evaluate(run)[i])
        previous = _previous_combined(_previous_from(c), _previous_from(fam))
        c = combine(c, fam, family_level(k))
        c.previous = previous
        out.append(c)
    return out


def evaluate_rule(module: ModuleType, run: RunData) -> list[Claim]:
    """The claims one rule module decides, exactly as the report decides them (multiplicity and the previous
    plan's verdicts included): what tests and simulations call."""
    return _with_family_level(module.evaluate, run)


def evaluate_claims(run: RunData) -> list[Claim]:
    """Every claim of the paper, in the paper's order, decided by the current plan."""
    return [c for module in claim_modules() for c in evaluate_rule(module, run)]
