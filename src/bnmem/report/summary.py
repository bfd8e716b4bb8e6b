"""``summary.md`` (checklist and key tables in markdown) and ``summary.csv`` (one row per claim, then plan 6.0's
robustness panel: one row per claim and estimand)."""

from __future__ import annotations

import csv
import io as _io
from typing import Any

from bnmem.analysis_plan import NOT_RUN, PLAN, PLAN_VERSION, PREVIOUS_VERSION, plan_sha256
from bnmem.report.claims import Claim, conditions_text
from bnmem.report.forest import split_verdicts
from bnmem.report.power import power_check, power_of
from bnmem.report.rundata import RunData
from bnmem.report.tables import Table

# Existing columns keep their order; later plans' are appended (4.0: run_label, the same sentence on every row;
# 6.0: role, estimand, held_fixed, power_check).
CSV_COLUMNS = ("id", "claim", "kind", "metric", "value", "ci_low", "ci_high", "status", "agreement", "coverdicts",
               "previous_status", "plan_version", "rule", "ci_method", "where", "conditions",
               "vs_paper", "paper_low", "paper_high", "ci_level", "agreement_magnitude", "previous_plan_version",
               "plan_sha256", "run_label", "power", "power_n", "power_unit", "n_for_80", "power_basis", "verdict",
               "min_effect_80", "role", "estimand", "held_fixed", "power_check")
# summary.csv's `role`: the claim's verdict row (its primary estimand decides), or one row of its robustness panel.
VERDICT_ROLE, ROBUSTNESS_ROLE = "verdict", "robustness"


def _md(text: Any) -> str:
    """Text safe inside a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_md(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.6g}"


def claim_rows(claims: list[Claim], label: str = "", sha: str | None = None) -> list[dict[str, str]]:
    """One record per claim, the deciding evaluation's numbers (empty when not run); ``label``: the run's
    confirmatory / exploratory sentence (:func:`bnmem.report.preregistration.run_label`), on every row;
    ``sha``: the deciding plan's hash (default: hashed now; a loaded run carries it, ``RunData.plan``)."""
    out = []
    sha = sha or plan_sha256()
    for c in claims:
        d = c.decisive
        row = c.row()
        out.append({
            "id": c.id,
            "claim": c.title,
            "kind": c.kind,
            "metric": c.metric,
            "value": _num(d.value) if d else "",
            "ci_low": _num(d.ci_low) if d else "",
            "ci_high": _num(d.ci_high) if d else "",
            "status": c.status,
            "agreement": row["agreement_direction"],
            "coverdicts": "; ".join(f"{a.name}: {a.status}" for a in c.coverdicts()),
            "previous_status": c.previous_status,
            "plan_version": PLAN_VERSION,
            "rule": c.rule,
            "ci_method": d.method if d else "",
            "where": d.where if d else c.not_run_reason(),
            "conditions": conditions_text(d.conditions) if d else "",
            "vs_paper": row["vs_paper"],
            "paper_low": _num(row["paper_low"]),
            "paper_high": _num(row["paper_high"]),
            "ci_level": _num(row["level"]),
            "agreement_magnitude": row["agreement_magnitude"],
            "previous_plan_version": PREVIOUS_VERSION,
            "plan_sha256": sha,
            **_power_fields(c),
            "run_label": label,
            "role": VERDICT_ROLE,
            "estimand": _primary_estimand(c),
            "held_fixed": c.held_fixed(),
            "power_check": power_check(c),
        })
    return out


def _primary_estimand(c: Claim) -> str:
    p = PLAN.get(c.id)
    return p.estimand if p is not None else ""


def panel_rows(claims: list[Claim], label: str = "", sha: str | None = None) -> list[dict[str, str]]:
    """Plan 6.0's robustness panel as summary.csv rows: per claim, each estimand of :meth:`Claim.panel` but the
    primary (its verdict row), with its number, interval and status ('not run' where the run did not measure
    it); the analysis's own name beside the estimand when they differ."""
    out = []
    sha = sha or plan_sha256()
    for c in claims:
        primary = _primary_estimand(c)
        for est, a in c.panel():
            if est == primary and a.name != est:
                continue  # the primary: the claim's verdict row
            out.append({
                "id": c.id, "claim": c.title, "kind": c.kind, "value": _num(a.value), "ci_low": _num(a.ci_low),
                "ci_high": _num(a.ci_high), "status": a.status, "plan_version": PLAN_VERSION,
                "ci_method": a.method, "where": a.note if a.status == NOT_RUN else "", "plan_sha256": sha,
                "run_label": label, "role": ROBUSTNESS_ROLE,
                "estimand": est if a.name in (est, "") or c.label(a) == est else f"{est} — {c.label(a)}",
            })
    return out


# What each status means (the HTML report's legend says the same beside its colours).
STATUS_LEGEND = (
    "Statuses (decided on the interval): *reproduced* = on the paper's side, at or above its stated minimum; "
    "*larger than the paper* = wholly above the paper's range (3a/3b: its minimum cleared, its upper end refuted); "
    "*direction only* = on the paper's side, reaching below its minimum (or failing another stated condition); "
    "*smaller than the paper* = on the paper's side but wholly below its stated minimum (its magnitude refuted); "
    "*inconclusive* = the interval includes the null, or there is none; *contradicted* = on the other side. "
    "A row shows its least supportive setting in that order: contradicted, smaller than the paper, inconclusive, "
    "direction only, larger than the paper, reproduced.")


def _power_fields(c: Claim) -> dict[str, str]:
    """The power columns: power of "reproduced" at the run's design, its n and unit, the units 80% power needs,
    what the spread came from, and the status as read (an underpowered inconclusive row says so)."""
    p = power_of(c)
    if not p.shown:  # plan 5.0: a decided row (or one without a declared test) shows no power
        return {"power": "", "power_n": "", "power_unit": "", "n_for_80": "", "power_basis": "",
                "verdict": c.status, "min_effect_80": ""}
    assert p.power is not None
    return {"power": f"{p.power:.3f}", "power_n": str(p.n), "power_unit": p.unit,
            "n_for_80": "" if p.needed is None else str(p.needed), "power_basis": p.basis,
            "verdict": p.verdict(c.status), "min_effect_80": "" if p.mde is None else f"{p.mde:.6g}"}


def render_csv(claims: list[Claim], label: str = "", sha: str | None = None) -> str:
    """summary.csv: one row per claim (:data:`CSV_COLUMNS`, `role` verdict), then its robustness panel's rows
    (`role` robustness, :func:`panel_rows`), ``label`` in full in its run_label column (``sha``: as
    :func:`claim_rows`)."""
    buf = _io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(claim_rows(claims, label, sha))
    w.writerows(panel_rows(claims, label, sha))
    return buf.getvalue()


def disclosure_of(run: RunData, claims: list[Claim]) -> list[str]:
    """A confirmatory run's earlier attempts and each row's chances (:func:`bnmem.report.attempts.disclosure`)."""
    from bnmem.report.attempts import disclosure

    return disclosure(claims, run.plan.study)


def panel_lines(claims: list[Claim]) -> list[str]:
    """summary.md's robustness panel (plan 6.0): per claim a table of its estimands, the primary first."""
    lines = ["## Robustness panel", "",
             f"Per claim, the primary estimand (it decides) and each alternative, named by what it holds fixed "
             f"(plan {PLAN_VERSION}); an estimand this run did not measure reads 'not run'.", ""]
    for c in claims:
        panel = c.panel()
        if not panel:
            continue
        held = c.held_fixed()
        lines += [f"### {c.id} ({c.status}): {c.agreement_text()}" + (f" · **{held}**" if held else ""), ""]
        prow = []
        for est, a in panel:
            ci = c.ci_text(a.ci_low, a.ci_high)
            name = c.label(a) if a.name != est else "" if a.valid else "(invalid: shown, not counted)"
            prow.append([est, name, c.fmt(a.value), ci, a.status])
        lines += [md_table(["estimand", "analysis", "value", "CI", "status"], prow), ""]
    return lines


def render_markdown(run: RunData, claims: list[Claim], tables: dict[str, list[Table]]) -> str:
    """The checklist, every claim's evaluations, and the key tables."""
    title = run.study or run.root.name
    lines = [f"# bnmem report — {title}", "",
             f"**{run.plan.label}**", "",
             run.plan.headline(), "",
             *([run.plan.provenance, ""] if run.plan.provenance else []),
             *[x for line in disclosure_of(run, claims) for x in (line, "")],
             f"Run directory `{run.root}` ({run.layout} layout). Analysis plan version **{PLAN_VERSION}** "
             "(docs/analysis-plan.md). Differences are BN − no normalization, paired by seed (or LiRA target model); "
             "intervals are 95% with replicates as the unit, at 1 − 0.05/k where a claim's k settings were tested "
             "for 'contradicted' (see the HTML report's Method section).", ""]
    if run.cells:
        lines.append(md_table(
            ["cell", "dataset", "arch", "norms", "seeds", "label noise", "OOD", "lenses"],
            [[c.id, str(c.conditions.get("dataset", "?")), str(c.conditions.get("arch", "?")),
              ",".join(map(str, c.conditions.get("norms") or [])), ",".join(map(str, c.conditions.get("seeds") or [])),
              str(c.conditions.get("label_noise", "—")), str(c.conditions.get("ood", "—")), ", ".join(sorted(c.lenses))]
             for c in run.cells]))
        lines.append("")
    if run.environment:
        lines += ["Versions: " + ", ".join(f"{k} {v}" for k, v in run.environment.items()), ""]
    lines += ["## Claims checklist", ""]
    rows = []
    for c in claims:
        d = c.decisive
        ci = c.ci_text(d.ci_low, d.ci_high) if d else "—"
        kind = "" if c.kind == "evidence" else f" ({c.kind})"
        p = power_of(c)
        held = c.held_fixed()
        status = f"**{p.verdict(c.status)}**" + (f" ({held})" if held else "")
        rows.append([c.id, c.title + kind, c.metric, c.fmt(d.value) if d else "—", ci, status,
                     " · ".join(x for x in (p.text(), power_check(c)) if x and x != "—") or p.text(),
                     c.vs_paper or "—", c.agreement_text(), c.previous_status, c.rule])
    lines += [md_table(["#", "claim", "metric", "value", "CI", "status",
                        "power (undecided rows: the effect 80% could detect; units needed)", "vs paper",
                        "robustness", f"plan {PREVIOUS_VERSION}", "rule"], rows), ""]
    lines += [STATUS_LEGEND, ""]
    splits = [f"- Claim {c.id}: {s}" for c in claims if (s := split_verdicts(c))]
    lines += (["Settings that disagree (the row shows the least supportive):", "", *splits, ""] if splits else [])
    lines += panel_lines(claims)
    lines += ["## Claim details", ""]
    for c in claims:
        lines.append(f"### {c.id}. {c.title} — {c.status}")
        lines.append("")
        if not c.evaluations:
            lines += [f"Not run: {c.not_run_reason()}.", ""]
            continue
        erows = []
        for e in c.evaluations:
            ci = c.ci_text(e.ci_low, e.ci_high)
            erows.append([e.where + ("" if e.deciding else " (not deciding)"), c.fmt(e.value), ci, e.status,
                          "; ".join(x for x in (e.method, e.note) if x)])
        lines += [md_table(["where", "value", "CI", "status", "method · notes"], erows), ""]
        if c.previous:
            lines += [f"Under plan {PREVIOUS_VERSION} ({c.previous_rule}): "
                      + "; ".join(f"{p.where}: {c.fmt(p.value)} {p.status}" for p in c.previous), ""]
        lines += [f"- {n}" for n in c.notes]
    lines += ["## Key tables", ""]
    for section in tables.values():
        for t in section:
            body = (f"```\n{t.preformatted}\n```" if t.preformatted is not None
                    else md_table(t.header, t.rows) if t.rows else "(no rows)")
            lines += [f"### {t.title}", "", body, ""]
            if t.caption:
                lines += [f"_{t.caption}_", ""]
    return "\n".join(lines).rstrip() + "\n"
