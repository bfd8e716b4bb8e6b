"""``bnmem audit --fail-at BUDGET``: a pass/fail gate for CI, read from what the data rule out.

A budget is a level (``low``, ``moderate``, ``elevated``), an AUC (``auc=0.6``) or a TPR at a
false-positive rate the audit measures (``tpr@1%=0.05``, ``tpr@0.1%=0.02``). The gate reads the
audit's evidence from its **lower** ends — the level the data show at least (each group's level
from the lower end of its 95% AUC interval), the highest lower AUC end over the groups, the
highest lower Clopper–Pearson end of the TPR — so a model fails only when the data rule out that
its leakage is below the budget. An interval that merely *allows* the budget (its upper end)
does not fail the gate; the audit's level then states the range, and more shadow copies narrow it.

The gate never passes a model it could not assess: copies that do not resemble the model, a
model at chance level, or a TPR that no group's non-members can estimate give the "not assessed"
exit code, never 0.

Exit codes (:data:`EXIT_CODES`): 0 the budget is not reached; 3 it is reached; 4 not assessed;
2 remains bad input, as for every command.
"""

from __future__ import annotations

import re
from typing import Any

from bnmem.auditing.findings import LEVELS
from bnmem.attacks import spec as attack_spec
from bnmem.auditing.leakage import FPRS
from bnmem.auditing.level import GROUPS
from bnmem.auditing.report import ATTACK_NAMES
from bnmem.errors import BnmemError

PASSED, REACHED, NOT_ASSESSED_EXIT = 0, 3, 4
EXIT_CODES = {"passed": PASSED, "reached": REACHED, "not assessed": NOT_ASSESSED_EXIT}
# --fail-at's spellings of the FPRs the audit reads a TPR at (bnmem.auditing.leakage.FPRS).
TPR_KEYS = {"1%": "tpr_at_1pct_fpr", "0.1%": "tpr_at_0.1pct_fpr"}
BUDGET_HELP = ("fail the audit (exit 3) when the leakage the data rule out (lower ends of the 95% intervals) reaches "
               "this budget: a level (low, moderate, elevated), auc=0.6, tpr@1%=0.05 or tpr@0.1%=0.02; exit 4 when "
               "the audit could not assess the model (never 0)")


def parse_budget(text: str) -> dict[str, Any]:
    """``--fail-at``'s value as ``{"kind": "level" | "auc" | "tpr", "value", "fpr_key"?, "text"}``.

    Raises:
        BnmemError: any other spelling, or a number outside (0, 1].
    """
    raw = text.strip().lower()
    if raw in LEVELS:
        return {"kind": "level", "value": raw, "text": raw}
    m = re.fullmatch(r"(auc|tpr@(1%|0\.1%))\s*[=:]\s*([0-9.]+)", raw)
    if m is None:
        raise BnmemError(f"--fail-at {text!r}: give a level (low, moderate, elevated), auc=0.6, tpr@1%=0.05 or "
                         "tpr@0.1%=0.02")
    try:
        value = float(m.group(3))
    except ValueError:
        raise BnmemError(f"--fail-at {text!r}: {m.group(3)!r} is not a number") from None
    if not 0 < value <= 1:
        raise BnmemError(f"--fail-at {text!r}: the budget must lie in (0, 1]")
    if m.group(1) == "auc":
        return {"kind": "auc", "value": value, "text": f"auc={value:g}"}
    return {"kind": "tpr", "value": value, "fpr_key": TPR_KEYS[m.group(2)], "text": f"tpr@{m.group(2)}={value:g}"}


def _outcome(budget: dict[str, Any], state: str, reading: Any, where: str | None, text: str) -> dict[str, Any]:
    return {"budget": budget["text"], "state": state, "exit_code": EXIT_CODES[state], "reading": reading,
            "read_from": where, "text": text}


def evaluate_gate(result: dict[str, Any], budget: dict[str, Any] | str) -> dict[str, Any]:
    """The gate's outcome on a finished audit result (its ``risk`` section computed).

    Returns:
        ``{"budget", "state": "passed" | "reached" | "not assessed", "exit_code", "reading", "read_from",
        "text"}``: ``reading`` is the lower-end level, AUC or TPR the budget was compared with; ``read_from``
        the group and attack it came from.
    """
    budget = parse_budget(budget) if isinstance(budget, str) else budget
    risk = result["risk"]
    groups = risk.get("groups") or []
    if risk.get("blocker") or not groups:
        why = risk.get("blocker") or "no membership attack was measured (no shadow copies)"
        return _outcome(budget, "not assessed", None, None,
                        f"gate {budget['text']}: NOT ASSESSED (exit {NOT_ASSESSED_EXIT}): {why}")
    if budget["kind"] == "level":
        reading, setter = risk["level_lower"], max(groups, key=lambda g: LEVELS.index(g["level_lower"]))
        reached = LEVELS.index(reading) >= LEVELS.index(budget["value"])
        shown = (f"the level the data rule out is {reading} (lower ends of the AUC intervals; the level is "
                 f"{risk['level']})")
    elif budget["kind"] == "auc":
        setter = max(groups, key=lambda g: g["auc_ci"][0])
        reading = setter["auc_ci"][0]
        reached = reading >= budget["value"]
        shown = f"the highest lower AUC end is {reading:.3f}"
    else:
        found = tpr_lower_ends(result, budget["fpr_key"])
        if not found:
            return _outcome(budget, "not assessed", None, None,
                            f"gate {budget['text']}: NOT ASSESSED (exit {NOT_ASSESSED_EXIT}): no group has enough "
                            "non-member scores to estimate that TPR; add shadow copies or gate on auc= instead")
        reading, group, attack = max(found)
        setter = {"group": group, "attack": attack}
        reached = reading >= budget["value"]
        shown = f"the highest lower TPR end is {100 * reading:.1f}%"
    where = f"{setter.get('name', setter['group'])} ({ATTACK_NAMES[setter['attack']]})"
    state = "reached" if reached else "passed"
    verdict = f"FAILED (exit {REACHED})" if reached else "passed (exit 0)"
    return _outcome(budget, state, reading, where, f"gate {budget['text']}: {verdict}: {shown}, from {where}")


def tpr_lower_ends(result: dict[str, Any], key: str) -> list[tuple[float, str, str]]:
    """``(lower Clopper–Pearson end, group, attack)`` of the TPR at ``key`` wherever it is estimable."""
    leakage = (result.get("membership") or {}).get("leakage") or {}
    return [(g["ci"][key][0], name, attack) for attack in attack_spec.playing(attack_spec.HEADLINE)
            for name, g in leakage.get(attack, {}).items() if name in GROUPS and g.get("ci", {}).get(key) is not None]


assert set(TPR_KEYS.values()) == set(FPRS)  # the gate spells every FPR the audit measures
