"""The defenses lens's results as printable text (its command's output and its report section).

Torch-free (results dicts in, text out), so the report renders it without
importing the lens (the spec's ``summary_ref`` names :func:`summary`).
"""

from __future__ import annotations

from typing import Any

from bnmem.attacks import spec as attack_spec
from bnmem.formatting import eps_value, mean_pm
from bnmem.frontier import recommendation, risk_name, setting_text
from bnmem.texttable import table

__all__ = ["audit_text", "summary", "summary_table"]


def _audit_cell(v: dict[str, Any]) -> str:
    audit = v.get("dp_audit")
    if audit is None:
        return "-"
    return ("yes" if audit["passed"] else "NO") + f" (max {eps_value(audit['eps_lb_max'])})"


def audit_text(result: dict[str, Any]) -> str:
    """One sentence per DP variant: its largest ε lower bound against its accountant ε."""
    lines = []
    for name in result["variant_names"]:
        v = result["variants"][name]
        audit = v.get("dp_audit")
        if audit is None:
            continue
        eps = v["epsilon"]["mean"]
        verdict = ("consistent with the accountant" if audit["passed"] else
                   "MORE leakage than the accountant's ε allows: the DP pipeline is broken somewhere")
        lines.append(f"{name}: the largest empirical ε lower bound over attacks, subsets, targets and replicates "
                     f"is {eps_value(audit['eps_lb_max'])} (95% family-wise) against the accountant's "
                     f"ε = {eps_value(eps)}: {verdict}.")
    return "\n".join(lines)


def summary_table(result: dict[str, Any]) -> str:
    """Printable frontier table: one row per variant (means ± half the 95% interval over replicates)."""
    rows = []
    has_out = bool(result["subset_sizes"].get("outliers"))
    # One AUC column per attack the lens evaluated (those playing DEFENSES when it ran); ε_lb and the TPRs of the
    # reference attack (PRIMARY).
    first = result["variants"][result["variant_names"][0]]["attacks"]
    shown = [a for a in attack_spec.playing(attack_spec.DEFENSES) if a in first]
    ref = attack_spec.the(attack_spec.PRIMARY)
    for name in result["variant_names"]:
        v = result["variants"][name]
        att = v["attacks"]
        front = ("all" if name in result["frontier"]["all"] else "") + (
            (" outl" if name in result["frontier"]["outliers"] else "") if has_out else "")
        row = [name, mean_pm(v.get("epsilon"), 2) if "epsilon" in v else "-", mean_pm(v["eps_lb"][ref]["all"], 2),
               _audit_cell(v), mean_pm(v["test_acc"]),
               mean_pm(v["memorization"]),
               *(mean_pm(att[a]["all"]["auc"]) for a in shown)]
        if has_out:
            row += [mean_pm(att[a]["outliers"]["auc"]) for a in shown]
        row += [mean_pm(att[ref]["all"]["tpr_at_1pct_fpr"], 1, scale=100),
                mean_pm(att[ref]["all"]["tpr_at_0.1pct_fpr"], 1, scale=100),
                mean_pm(v["seconds_per_model"], 1), front.strip() or "-"]
        rows.append(row)
    short = {a: attack_spec.get(a).short_label for a in (*shown, ref)}
    header = ["variant", "ε", f"ε_lb ({short[ref]})", "ε_lb ≤ ε", "test acc", "memorized",
              *(f"{short[a]} AUC" for a in shown)]
    if has_out:
        header += [f"{short[a]} AUC outl" for a in shown]
    header += [f"{short[ref]} TPR@1% (%)", "TPR@0.1% (%)", "s/model", "on front"]
    c = result["conditions"]
    title = (f"Defenses frontier: {setting_text(result)}; {c['replicates']} replicates (± half the 95% t-interval); "
             f"front on {risk_name(result)} vs test accuracy")
    return "\n".join([title, table(rows, header)])


def summary(result: dict[str, Any]) -> str:
    """The frontier table followed by the plain-language recommendation (what a command or report prints)."""
    audit = audit_text(result)
    return summary_table(result) + "\n\n" + recommendation(result) + (f"\n\n{audit}" if audit else "")
