"""The paper's claims, each decided by the declared analysis plan (:mod:`bnmem.analysis_plan`).

One module per claim, keyed by the plan's claim ids (each declares ``IDS`` and
``evaluate(run) -> list[Claim]``); the grading core (statuses, intervals, the
least supportive setting, multiplicity) is :mod:`bnmem.report.claims.core`.

A claim is evaluated once per setting it can be measured in (a setting groups
the replicate cells whose conditions differ only in the replicate; each BN vs
baseline pair and corrupted subset is its own evaluation). A claim with k
deciding evaluations is evaluated a second time with every interval at the
Bonferroni level 1 − 0.05/k, so its least supportive setting keeps a
family-wise 5% level. The claim's row (:meth:`Claim.row`) shows the least
supportive deciding evaluation, the robustness panel's agreement, and the
verdict under the previous plan version's rule.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable

from bnmem.analysis_plan import family_level
from bnmem.report.claims import claim1, claim2, claim3, claim4, claim5, claim6, claim7
from bnmem.report.claims.core import (
    RANK, ROW_KEYS, Analysis, Claim, Evaluation, PreviousVerdict, at_level, grade, grade_v2, vs_paper, weakest,
)
from bnmem.report.claims.shared import conditions_text, mark_variants
from bnmem.report.rundata import RunData

__all__ = ["Analysis", "Claim", "Evaluation", "PreviousVerdict", "RANK", "ROW_KEYS", "RULES", "conditions_text",
           "evaluate_claims", "grade", "grade_v2", "rule_ids", "vs_paper", "weakest"]

# The rule modules, in the paper's order.
RULES: tuple[ModuleType, ...] = (claim1, claim2, claim3, claim4, claim5, claim6, claim7)


def rule_ids() -> list[str]:
    """Every claim id some rule module decides (a test keeps it equal to the plan's ids)."""
    return [cid for m in RULES for cid in m.IDS]


def _with_family_level(evaluate: Callable[[RunData], list[Claim]], run: RunData) -> list[Claim]:
    """Evaluate once at 95% to count each claim's deciding tests k, then again at 1 − 0.05/k."""
    first = [mark_variants(c) for c in evaluate(run)]
    out = []
    for i, c in enumerate(first):
        k = c.family_size()
        if k <= 1:
            out.append(c)
            continue
        with at_level(family_level(k)):
            again = mark_variants(evaluate(run)[i])
        again.level = family_level(k)
        out.append(again)
    return out


def evaluate_claims(run: RunData) -> list[Claim]:
    """Every claim of the paper, in the paper's order, decided by the current plan."""
    return [c for module in RULES for c in _with_family_level(module.evaluate, run)]
