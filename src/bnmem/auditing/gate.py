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

What the gate reads (its grammar: ``[target:][SLICE:]BUDGET``):

* ``BUDGET`` alone (``moderate``, ``auc=0.6``): the shadow copies' groups, as before slices and the
  target-model audit existed: the recipe's risk;
* ``target:BUDGET`` (``target:auc=0.6``): the shipped model itself, attacked on its members against the
  held-out set (:mod:`bnmem.auditing.target`; needs ``--non-members``, not ``--shadow-models``);
* ``SLICE:BUDGET`` (``class=7:auc=0.6``, ``correct:moderate``, ``incorrect:tpr@1%=0.1``) and
  ``target:SLICE:BUDGET``: one slice (:mod:`bnmem.auditing.slices`), of the copies or of the target. A
  class is named as the data name it (an image folder's class folder; the label's number for tensors).
  A slice too small to attack is "not assessed" (exit 4).

The gate's text names what it read: "from the shadow copies" or "from your model as shipped".

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
BUDGET_FORMS = ("a level (low, moderate, elevated), auc=0.6, tpr@1%=0.05 or tpr@0.1%=0.02, optionally after target: "
                "(the shipped model) and/or a slice (class=NAME:, correct:, incorrect:), e.g. target:class=7:auc=0.6")
TARGET, COPIES = "target", "copies"
_SCOPED = re.compile(r"(?:(target)\s*:\s*)?(?:(class=[^:]+?|correct|incorrect)\s*:\s*)?(.+)", re.IGNORECASE)


def parse_budget(text: str) -> dict[str, Any]:
    """``--fail-at``'s value as ``{"kind": "level" | "auc" | "tpr", "value", "fpr_key"?, "text"}``.

    With ``target:`` and/or a slice (the module's grammar) the dict also holds ``"scope": "target"`` and
    ``"slice"``, and its ``text`` spells them; a plain budget has neither (it reads the copies' groups).

    Raises:
        BnmemError: any other spelling, or a number outside (0, 1].
    """
    scoped = _SCOPED.fullmatch(text.strip())
    target, sl = scoped.group(1), scoped.group(2)
    budget = _budget(scoped.group(3), text)
    if sl is not None:
        sl = f"class={sl.split('=', 1)[1].strip()}" if "=" in sl else sl.lower()  # a class name keeps its case
        budget["slice"] = sl
    if target is not None:
        budget["scope"] = TARGET
    prefix = ("target:" if target else "") + (f"{sl}:" if sl else "")
    return {**budget, "text": prefix + budget["text"]}


def _budget(raw: str, text: str) -> dict[str, Any]:
    raw = raw.strip().lower()
    if raw in LEVELS:
        return {"kind": "level", "value": raw, "text": raw}
    m = re.fullmatch(r"(auc|tpr@(1%|0\.1%))\s*[=:]\s*([0-9.]+)", raw)
    if m is None:
        raise BnmemError(f"--fail-at {text!r}: give {BUDGET_FORMS}")
    try:
        value = float(m.group(3))
    except ValueError:
        raise BnmemError(f"--fail-at {text!r}: {m.group(3)!r} is not a number") from None
    if not 0 < value <= 1:
        raise BnmemError(f"--fail-at {text!r}: the budget must lie in (0, 1]")
    if m.group(1) == "auc":
        return {"kind": "auc", "value": value, "text": f"auc={value:g}"}
    return {"kind": "tpr", "value": value, "fpr_key": TPR_KEYS[m.group(2)], "text": f"tpr@{m.group(2)}={value:g}"}


def on_target(budget: str | dict[str, Any] | None) -> bool:
    """The budget reads the shipped model (``target:...``), not the copies."""
    if budget is None:
        return False
    return (parse_budget(budget) if isinstance(budget, str) else budget).get("scope") == TARGET


def check_budget_slice(budget: str | None, class_names: list[str]) -> None:
    """A slice the budget names exists in the data (before any work).

    Raises:
        BnmemError: a class the data do not have.
    """
    if budget is None:
        return
    from bnmem.auditing.slices import check_slice

    sl = parse_budget(budget).get("slice")
    if sl is not None:
        check_slice(sl, class_names, f"--fail-at {budget!r}")


def _read(result: dict[str, Any], budget: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], str | None,
                                                                   str]:
    """What the budget reads: the groups (or the one slice) with their levels, the leakage they come from, why
    they cannot be read (None when they can), and whose leakage it is."""
    risk, sl = result["risk"], budget.get("slice")
    if budget.get("scope") == TARGET:
        tr, sec = risk.get("target") or {}, result.get("target") or {}
        if not tr.get("measured"):
            return [], {}, "the shipped model was not attacked (give --non-members, a held-out set)", "your model"
        leakage = {a: subs for a, subs in sec["leakage"].items()
                   if not tr.get("reference_free_only") or a in ("loss",)}
        groups = [g for g in tr["groups"] if g["group"] == (sl or "all")]
        why = None if groups else f"{sl}: {sec['skipped'].get(sl, 'no such slice in the data')}"
        return groups, {a: {k: v for k, v in subs.items() if k == (sl or "all")} for a, subs in leakage.items()}, \
            why, "your model as shipped"
    mem = result.get("membership") or {}
    if risk.get("blocker") or not risk.get("groups"):
        return [], {}, risk.get("blocker") or "no membership attack was measured (no shadow copies)", "the copies"
    if sl is None:
        return risk["groups"], {a: {k: v for k, v in subs.items() if k in GROUPS}
                                for a, subs in (mem.get("leakage") or {}).items()}, None, "the shadow copies"
    slices = (mem.get("slices") or {})
    groups = [g for g in (risk.get("slices") or {}).get("items", []) if g["group"] == sl]
    why = None if groups else f"{sl}: {slices.get('skipped', {}).get(sl, 'no such slice in the data')}"
    return groups, {a: {k: v for k, v in subs.items() if k == sl}
                    for a, subs in (slices.get("leakage") or {}).items()}, why, "the shadow copies"


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
    groups, leakage, why, whose = _read(result, budget)
    if why:
        return _outcome(budget, "not assessed", None, None,
                        f"gate {budget['text']}: NOT ASSESSED (exit {NOT_ASSESSED_EXIT}): {why}")
    plain = budget.get("scope") is None and budget.get("slice") is None
    if budget["kind"] == "level":
        setter = max(groups, key=lambda g: LEVELS.index(g["level_lower"]))
        reading = setter["level_lower"]
        reached = LEVELS.index(reading) >= LEVELS.index(budget["value"])
        level = risk["level"] if plain else setter["level"]
        shown = (f"the level the data rule out is {reading} (lower ends of the AUC intervals; the level is "
                 f"{level})")
    elif budget["kind"] == "auc":
        setter = max(groups, key=lambda g: g["auc_ci"][0])
        reading = setter["auc_ci"][0]
        reached = reading >= budget["value"]
        shown = f"the highest lower AUC end is {reading:.3f}"
    else:
        found = tpr_lower_ends(result, budget["fpr_key"], leakage)
        if not found:
            return _outcome(budget, "not assessed", None, None,
                            f"gate {budget['text']}: NOT ASSESSED (exit {NOT_ASSESSED_EXIT}): no group has enough "
                            "non-member scores to estimate that TPR; add shadow copies or gate on auc= instead")
        reading, group, attack = max(found)
        setter = {"group": group, "attack": attack}
        reached = reading >= budget["value"]
        shown = f"the highest lower TPR end is {100 * reading:.1f}%"
    where = f"{setter.get('name', setter['group'])} ({ATTACK_NAMES[setter['attack']]})"
    where += "" if plain else f", from {whose}"
    state = "reached" if reached else "passed"
    verdict = f"FAILED (exit {REACHED})" if reached else "passed (exit 0)"
    return _outcome(budget, state, reading, where, f"gate {budget['text']}: {verdict}: {shown}, from {where}")


def tpr_lower_ends(result: dict[str, Any], key: str,
                   leakage: dict[str, dict[str, Any]] | None = None) -> list[tuple[float, str, str]]:
    """``(lower Clopper–Pearson end, group, attack)`` of the TPR at ``key`` wherever it is estimable (in
    ``leakage``: by default the copies' groups under the headline attacks)."""
    if leakage is None:
        leakage = {a: {k: v for k, v in subs.items() if k in GROUPS}
                   for a, subs in ((result.get("membership") or {}).get("leakage") or {}).items()
                   if a in attack_spec.playing(attack_spec.HEADLINE)}
    return [(g["ci"][key][0], name, attack) for attack, subs in leakage.items()
            for name, g in subs.items() if g.get("ci", {}).get(key) is not None]


assert set(TPR_KEYS.values()) == set(FPRS)  # the gate spells every FPR the audit measures
