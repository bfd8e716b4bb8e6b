"""One self-contained HTML page: the claims checklist, the conditions, the figures.

Everything the page needs is inside it: CSS inline, figures as base64
``data:image/png`` URIs, no scripts, fonts or links to other files, so it opens
offline, can be mailed as one file, and looks the same in five years.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from bnmem.version import __version__
from bnmem.analysis_plan import (
    CHANGELOG, CHECK_FAILED, CHECK_PASSED, CONTRADICTED, DIRECTION_ONLY, INCONCLUSIVE, LARGER, NOT_RUN, PLAN,
    PLAN_VERSION, POWER_TARGET, PREVIOUS_VERSION, REPRODUCED, SMALLER, STATUSES, plan_sha256,
)
from bnmem.names import FAIR_ARMS, GRADNORMS, LIRA, MEMORIZE, PAPER_PROTOCOL
from bnmem.report.claims import Claim, conditions_text
from bnmem.report.claims.core import direction
from bnmem.report.results import SHOWN_REPLICATES, fmt, shown
from bnmem.report.rundata import LensOutput, RunData, lens_figures
from bnmem.report.tables import Table, epochs_text
from bnmem.report.views import LensView, outputs, sections
from bnmem.report.html_parts import (  # noqa: F401 (the page's parts, re-exported)
    CSS, PNG_MAGIC, _cell, data_uri, esc, png_bytes, png_data_uri, png_size, render_table,
)

def status_badge(status: str) -> str:
    """A coloured status label (the plan's statuses, check statuses, the previous plan's statuses)."""
    cls = "s-" + status.replace(" ", "-")
    return f'<span class="status {esc(cls)}">{esc(status)}</span>'


# What each status means, for the legend on the first screen (the plan block in Details has the full rules).
STATUS_MEANINGS = (
    (REPRODUCED, "interval on the paper's side, at or above its minimum"),
    (LARGER, "on its side, wholly above the paper's range (its minimum cleared, its upper end refuted)"),
    (DIRECTION_ONLY, "on its side, reaching below its minimum"),
    (SMALLER, "on its side, wholly below the paper's minimum (its magnitude refuted)"),
    (INCONCLUSIVE, "interval includes the null, or none"),
    (CONTRADICTED, "interval on the other side"),
    (CHECK_PASSED, "derivation check (not evidence) within tolerance"),
    (CHECK_FAILED, "derivation check outside tolerance"),
    (NOT_RUN, "no results in this run"),
)


def shown_statuses(claims: list[Claim]) -> set[str]:
    """The statuses the first screen shows: the claims' (headline) and their evaluations' and co-verdicts'
    (forest plot rows; a row that did not run is left out of the plot)."""
    shown = {c.status for c in claims}
    for c in claims:
        for e in c.evaluations:
            if e.status != NOT_RUN:
                shown |= {e.status} | {a.status for a in e.coverdicts if a.status != NOT_RUN}
    return shown


def status_legend(counts: dict[str, int] | None = None, shown: set[str] | None = None) -> str:
    """The pill of every status on the first screen (``shown``; default: all), how many claims have it
    (``counts``) and what it means, in one wrapped line; the others are named, defined in Details."""
    counts = counts or {}
    present = [(s, text) for s, text in STATUS_MEANINGS if shown is None or s in shown]
    items = "".join(f'<span class="legend-item">{status_badge(s)}{f" <b>×{counts[s]}</b>" if counts.get(s) else ""} '
                    f"{esc(text)}</span>" for s, text in present)
    rest = [s for s, _ in STATUS_MEANINGS if shown is not None and s not in shown]
    more = (f'<span class="legend-item">(not on this screen: {esc(", ".join(rest))}; see '
            '<a href="#plan">Analysis plan</a>)</span>') if rest else ""
    return f'<p class="legend" id="legend"><b>Status:</b> {items}{more}</p>'


def _ci(claim: Claim, low: float | None, high: float | None) -> str:
    return claim.ci_text(low, high)


def checklist(claims: list[Claim]) -> str:
    """The claims table: one row per claim with number, interval, status, agreement and the previous verdict."""
    rows = []
    for c in claims:
        d = c.decisive
        value = c.fmt(d.value) if d else "—"
        ci = _ci(c, d.ci_low, d.ci_high) if d else "—"
        where = esc(d.where) if d else esc(c.not_run_reason())
        kind = ("" if c.kind == "evidence" else
                f'<div class="note"><b>{esc(c.kind)}</b>: not evidence for the claim</div>')
        prev = c.previous_status
        rows.append(
            f'<tr class="claim" id="claim-{esc(c.id)}" data-claim="{esc(c.id)}" data-status="{esc(c.status)}" '
            f'data-previous="{esc(prev)}">'
            f"<td><b>{esc(c.id)}</b></td>"
            f'<td>{esc(c.title)}{kind}<div class="note">{esc(c.metric)}</div><div class="note">{where}</div></td>'
            f'<td class="num">{esc(value)}</td><td class="num">{esc(ci)}</td>'
            f"<td>{status_badge(c.status)}"
            + (f'<div class="note">vs paper: {esc(c.vs_paper)}</div>' if c.vs_paper else "")
            + (f'<div class="note held-fixed"><b>{esc(held)}</b></div>' if (held := c.held_fixed()) else "") + "</td>"
            f'<td class="note">{esc(c.agreement_text())}</td>'
            f"<td>{status_badge(prev)}</td>"
            f'<td class="rule">{esc(c.rule)}</td></tr>'
        )
    return ('<table class="checklist"><thead><tr><th>#</th><th>claim · metric · where</th><th>value</th>'
            f"<th>CI</th><th>status (plan {esc(PLAN_VERSION)})</th><th>robustness</th>"
            f"<th>under plan {esc(PREVIOUS_VERSION)}</th><th>rule</th></tr></thead><tbody>\n" + "\n".join(rows)
            + "\n</tbody></table>")


def claim_details(claims: list[Claim]) -> str:
    """Every evaluation of every claim (method, notes, co-verdicts) and the previous rule's verdicts."""
    out = []
    for c in claims:
        out.append(f'<h3 id="details-{esc(c.id)}">{esc(c.id)}. {esc(c.title)} {status_badge(c.status)}</h3>')
        if not c.evaluations:
            out.append(f'<p class="notrun">not run: {esc(c.not_run_reason())}</p>')
            continue
        out.append("<table><thead><tr><th>where</th><th>value</th><th>CI</th><th>status</th>"
                   "<th>interval method · notes</th><th>conditions</th></tr></thead><tbody>")
        for e in c.evaluations:
            tag = "" if e.deciding else " (shown, not deciding)"
            cov = "".join(f"<br>{esc(a.name)}: {esc(c.fmt(a.value))} {esc(_ci(c, a.ci_low, a.ci_high))} "
                          f"{status_badge(a.status)}" for a in e.coverdicts)
            out.append(
                f"<tr><td>{esc(e.where + tag)}</td><td class=\"num\">{esc(c.fmt(e.value))}</td>"
                f'<td class="num">{esc(_ci(c, e.ci_low, e.ci_high))}</td><td>{status_badge(e.status)}{cov}</td>'
                f'<td class="note">{esc(e.method)}{"<br>" if e.method and e.note else ""}{esc(e.note)}</td>'
                f'<td class="note">{esc(conditions_text(e.conditions))}</td></tr>'
            )
        out.append("</tbody></table>")
        if c.previous:
            out.append(f'<p class="note"><b>Under plan {esc(PREVIOUS_VERSION)}</b> ({esc(c.previous_rule)}): '
                       + "; ".join(f"{esc(p.where)}: {esc(c.fmt(p.value))} {status_badge(p.status)}"
                                   for p in c.previous) + "</p>")
        for n in c.notes:
            out.append(f'<p class="note">{esc(n)}</p>')
    return "\n".join(out)


def robustness_panel(claims: list[Claim]) -> str:
    """Per claim: the verdict under its primary estimand and under each alternative (plan 6.0: named by the
    estimand it holds fixed; one the run did not measure reads 'not run')."""
    out = []
    for c in claims:
        panel = c.panel()
        if not panel:
            continue
        held = c.held_fixed()
        out.append(f'<h3 id="robustness-{esc(c.id)}">{esc(c.id)}. {esc(c.agreement_text())} '
                   f"({status_badge(c.status)})" + (f" · <b>{esc(held)}</b>" if held else "") + "</h3>")
        out.append('<table class="robustness"><thead><tr><th>estimand</th><th>analysis</th><th>value</th><th>CI</th>'
                   "<th>status</th><th>same direction</th><th>method · notes</th></tr></thead><tbody>")
        for est, a in panel:
            agrees = ("—" if a.status == NOT_RUN else "not counted" if not a.valid else
                      "yes" if direction(a.status) == direction(c.status) else "no")
            name = c.label(a) if a.name != est else "" if a.valid else "(invalid: shown, not counted)"
            out.append(f"<tr><td>{esc(est)}</td><td>{esc(name)}</td>"
                       f"<td class=\"num\">{esc(c.fmt(a.value))}</td>"
                       f'<td class="num">{esc(_ci(c, a.ci_low, a.ci_high))}</td><td>{status_badge(a.status)}</td>'
                       f'<td>{agrees}</td>'
                       f'<td class="note">{esc("; ".join(x for x in (a.method, a.note) if x))}</td></tr>')
        out.append("</tbody></table>")
    return "\n".join(out) or '<p class="notrun">no claim was measured</p>'


def plan_block(sha: str | None = None) -> str:
    """The declared analysis plan: per claim its metric, statistic, unit, interval, thresholds, paper's number
    (``sha``: its hash, as the run's plan check computed it; default: hashed now)."""
    out = [f'<p class="caption">Plan version <b>{esc(PLAN_VERSION)}</b> (sha256 <code>{esc(sha or plan_sha256())}</code>; '
           "bnmem.analysis_plan; docs/analysis-plan.md; <code>bnmem plan</code> prints it). Statuses are decided "
           "on the interval: <i>reproduced</i> = above the null on the paper's side and, where the paper states a "
           "minimum, at or above it; <i>direction only</i> = above the null but reaching below the stated minimum "
           "(or failing another stated condition); where the paper states a range (3a/3b), <i>larger than the "
           "paper</i> = wholly above the range, <i>smaller than the paper</i> = above the null but wholly below "
           "the minimum; <i>inconclusive</i> = includes the null or no valid interval; "
           "<i>contradicted</i> = below the null. <i>vs paper</i> (below / within / above the paper's range) is a "
           "description, not a verdict.</p>",
           '<table class="plan"><thead><tr><th>#</th><th>paper</th><th>metric · checkpoints · statistic</th>'
           "<th>unit · interval</th><th>thresholds · rule · why</th></tr></thead><tbody>"]
    for p in PLAN.values():
        out.append(f"<tr><td><b>{esc(p.id)}</b><div class=\"note\">{esc(p.kind)}</div></td><td>{esc(p.paper)}</td>"
                   f'<td class="note">{esc(p.metric)}<br>{esc(p.checkpoints)}<br>{esc(p.statistic)}</td>'
                   f'<td class="note">{esc(p.unit)}<br>{esc(p.interval)}</td>'
                   f'<td class="note">{esc(p.thresholds)}<br>{esc(p.rule)}<br><i>why:</i> {esc(p.why)}'
                   + (f"<br><b>not measured yet:</b> {esc(p.measurable)}" if p.measurable else "") + "</td></tr>")
    out.append("</tbody></table><h3>Changelog</h3><ul class=\"note\">")
    for ch in CHANGELOG:
        flag = f" <b>Adopted after seeing results</b> ({esc(ch.seen)})." if ch.after_seeing_data else ""
        out.append(f"<li><b>{esc(ch.version)}</b> (claims {esc(', '.join(ch.claims))}): {esc(ch.what)} "
                   f"Why: {esc(ch.why)}.{flag}</li>")
    out.append("</ul>")
    return "\n".join(out)


def conditions_block(run: RunData) -> str:
    """Cells, versions and the measurement definitions every number depends on."""
    out = []
    if run.cells:
        out.append('<table class="cond"><thead><tr><th>cell</th><th>dataset</th><th>architecture</th>'
                   "<th>norms</th><th>seeds</th><th>label noise</th><th>OOD</th><th>lenses run</th></tr></thead><tbody>")
        for cell in run.cells:
            c = cell.conditions
            ood = "—" if not c.get("ood") else f"{c['ood']:g} ({c.get('ood_source') or 'noise'})"
            out.append(
                f"<tr><td>{esc(cell.id)}</td><td>{esc(c.get('dataset', '?'))}</td><td>{esc(c.get('arch', '?'))}</td>"
                f"<td>{esc(_join(c.get('norms')))}</td><td>{esc(_join(c.get('seeds')))}</td>"
                f"<td>{esc(c.get('label_noise', '—'))}</td><td>{esc(ood)}</td>"
                f"<td>{esc(', '.join(sorted(cell.lenses)) or 'none')}</td></tr>")
        out.append("</tbody></table>")
    out.append(recipes_table(run))
    defs = measurement_definitions(run)
    if defs:
        out.append('<ul class="cond">' + "".join(f"<li><b>{esc(k)}:</b> {esc(v)}</li>" for k, v in defs) + "</ul>")
    env = run.environment or {}
    if env:
        out.append('<p class="cond"><b>versions:</b> ' + esc(", ".join(f"{k} {v}" for k, v in env.items())) + "</p>")
    else:
        out.append('<p class="cond"><b>versions:</b> no environment.json in the run directory</p>')
    return "\n".join(out)


def recipe_rows(run: RunData) -> list[list[str]]:
    """Per cell and norm: the recipe (fair arms or the paper's protocol), learning rate and epochs, train-IN,
    validation and test accuracy at the last epoch, mean over seeds (from the memorize lens, which records them)."""
    rows = []
    for cell, lens in run.lenses(MEMORIZE):
        for norm in lens.conditions.get("norms") or []:
            rec = lens.data.get(norm) if isinstance(lens.data.get(norm), dict) else None
            if rec is None:
                continue
            final, recipe = rec.get("final") or {}, rec.get("recipe") or {}
            train = (lens.config or {}).get("train", {})
            lr, epochs = recipe.get("lr", train.get("lr")), recipe.get("epochs", train.get("epochs"))
            mode = str(recipe.get("mode", lens.conditions.get("recipe", PAPER_PROTOCOL)))
            rows.append([cell.id, norm, RECIPE_SHORT.get(mode, mode), "—" if lr is None else f"{lr:g}",
                         _join(epochs), fmt(final.get("train_acc")), fmt(final.get("val_acc")),
                         fmt(final.get("test_acc"))])
    return rows


# Short names of the recipes in tables (bnmem.names.RECIPE_LABELS has the long ones).
RECIPE_SHORT = {FAIR_ARMS: "fair arms", PAPER_PROTOCOL: "paper's protocol"}


def selection_rows(run: RunData) -> list[list[str]]:
    """Per recipe selection (one per setting in a study) and norm: the selected learning rate and epochs, why
    training stopped, and every candidate's score / stopping epoch; the cells that trained with it."""
    found: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for kind in (MEMORIZE, LIRA):
        for cell, lens in run.lenses(kind):
            sel = lens.conditions.get("recipe_selection") or {}
            if sel.get("mode") != FAIR_ARMS or not isinstance(sel.get("per_norm"), dict):
                continue
            key = json.dumps(sel["per_norm"], sort_keys=True)
            entry = found.setdefault(key, (sel, []))
            if cell.id not in entry[1]:
                entry[1].append(cell.id)
    rows = []
    for sel, cells in found.values():
        where = cells[0] if len(cells) == 1 else f"{cells[0]} (+{len(cells) - 1} cells)"
        for norm, s in sel["per_norm"].items():
            grid = " · ".join(f"{c['lr']:g}: {fmt(c.get('score', c.get('val_acc')))} @ {c.get('epochs', '?')}"
                              + (" (diverged)" if c.get("diverged") else "")
                              for c in s.get("candidates") or [])
            rows.append([where, norm, f"{s['lr']:g}", str(s.get("epochs", "—")), str(s.get("stop", "—")),
                         fmt(s.get("score", s.get("val_acc"))), grid])
    return rows


def recipes_table(run: RunData) -> str:
    """The training recipe each norm ran with and how well it trained (the fairness check of the comparison),
    and how each fair-arms recipe was selected."""
    rows, selected = recipe_rows(run), selection_rows(run)
    out = []
    if selected:
        head = "".join(f"<th>{h}</th>" for h in ("selected in", "norm", "lr", "epochs", "stopped", "score",
                                                 "grid: lr: score @ stopping epoch"))
        body = "".join("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in selected)
        out.append('<h3>Selected recipes (fair arms)</h3><p class="caption">Each norm\'s learning rate and epochs, '
                   "selected on the clean validation split (bnmem.train.recipe): every candidate learning rate "
                   "trains until its validation accuracy plateaus (no gain of one validation example for "
                   "PLATEAU_PATIENCE epochs, at least PLATEAU_MIN_EPOCHS, at most the cap: 'plateau' or 'cap'); "
                   "its score is the mean validation accuracy over its last epochs up to the stop; the best "
                   "score's rate and stopping epoch are the norm's recipe, and the model used is the last "
                   "epoch's. In a study one selection (replicate 0's data) serves every replicate of the setting."
                   f'</p><table class="cond"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')
    if rows:
        head = "".join(f"<th>{h}</th>" for h in ("cell", "norm", "recipe", "lr", "epochs", "train-IN acc",
                                                 "validation acc", "test acc"))
        body = "".join("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in rows)
        out.append('<h3>Recipes and how well each norm trained</h3><p class="caption">Per cell and norm (memorize '
                   "lens, last epoch, mean over seeds): the recipe (fair arms: each norm's selected learning rate "
                   "and epochs, above; paper's protocol: the paper's one recipe and epochs for every norm), "
                   "train-IN accuracy (every training example against its training label), validation and clean "
                   f'test accuracy.</p><table class="cond"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')
    return "".join(out)


def _join(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    return "—" if v is None else str(v)


def measurement_definitions(run: RunData) -> list[tuple[str, str]]:
    """The definitions that condition the numbers: BN query mode, shadow models, gradient definition..."""
    out: list[tuple[str, str]] = []
    mem = run.lenses(MEMORIZE)
    if mem:
        modes = sorted({str(lens.conditions.get("bn_mode_at_query", "eval")) for _, lens in mem})
        epochs = sorted({epochs_text(lens.conditions.get("epochs")) for _, lens in mem})
        out.append(("memorization", f"accuracies measured with BN in {'/'.join(modes)} mode (running statistics) "
                                    f"after every epoch; {'/'.join(epochs)} epochs"))
    gn = run.lenses(GRADNORMS)
    if gn:
        c = gn[0][1].conditions
        modes = c.get("bn_mode") or {}
        out.append(("gradient norms", "; ".join(f"{d}: {modes.get(d, d)}" for d in c.get("definitions", [])) +
                    f"; {c.get('norm_of', 'L2 norm over all parameters')}; {c.get('loss', '')}; checkpoints "
                    f"{_join(c.get('checkpoints'))}"))
    li = run.lenses(LIRA)
    if li:
        c = li[0][1].conditions
        out.append(("membership inference",
                    f"{c.get('shadow_models', '?')} shadow models per norm, keep matrix seed {c.get('keep_seed', '?')} "
                    f"(every example IN for half of them), same model seeds for every norm; BN queried in "
                    f"{c.get('bn_mode_at_query', '?')} mode; query views {_join(c.get('views'))}; "
                    f"{c.get('protocol', 'leave-one-out over the shadow models')}"))
    if run.theory is not None:
        out.append(("theory", str(run.theory.data.get("model", "toy model"))))
    return out


# A figure wider than this (pixels, as written at the figures' dpi) spans the page instead of half of it:
# the multi-panel figures (gradient norms, ROC panels, the toy model).
WIDE_FIGURE_PX = 1400

class Embedder:
    """Embeds each distinct figure once: a figure whose bytes were already embedded is a link to the first."""

    def __init__(self) -> None:
        self.seen: dict[bytes, str] = {}

    def figure(self, path: Path, anchor: str, alt: str, name: str) -> tuple[str, bool] | None:
        """(the ``<figure>`` HTML, whether it is wide); None when ``path`` is not a readable PNG."""
        import hashlib

        data = png_bytes(path)
        if data is None:
            return None
        digest = hashlib.sha256(data).digest()
        if digest in self.seen:
            return (f'<p class="note"><b>{esc(name)}</b> · {esc(path.parent)}: the same figure as '
                    f'<a href="#{esc(self.seen[digest])}">above</a></p>', False)
        self.seen[digest] = anchor
        w, h = png_size(data)
        return (f'<figure id="{esc(anchor)}"><img src="{data_uri(data)}" width="{w}" height="{h}" '
                f'loading="lazy" decoding="async" alt="{esc(alt)}"><figcaption><b>{esc(name)}</b> · {esc(path.parent)}</figcaption></figure>',
                w > WIDE_FIGURE_PX)


def figure_section(run: RunData, kind: str, view: LensView, embed: Embedder | None = None,
                   shown_replicates: int = SHOWN_REPLICATES) -> str:
    """A lens's figure section (``view``: its report view): the figures of each cell of a setting's first
    ``shown_replicates`` replicates for this lens (the later ones named), or 'not run'. Figures of one cell sit
    two per row; wide multi-panel figures span the row."""
    embed = embed or Embedder()
    sid = view.section
    out = [f'<section id="{esc(sid)}"><h2>{esc(view.heading)}</h2>']
    pairs: list[tuple[str, LensOutput]] = [("" if cell is None else f"{cell.describe()} · {cell.id}", lens)
                                           for cell, lens in outputs(run, kind)]
    if not pairs:
        out.append(f'<p class="notrun">not run: no {esc(kind)} results in this run directory</p></section>')
        return "\n".join(out)
    out.append(f'<p class="caption">{esc(view.caption)}</p>')
    # A setting's first replicates only (bnmem.report.results.shown); the later ones are named below.
    cells = [cell for cell, _ in outputs(run, kind)]
    later = [lens for cell, (_, lens) in zip(cells, pairs) if not shown(cell, shown_replicates)]
    pairs = [p for cell, p in zip(cells, pairs) if shown(cell, shown_replicates)]
    for i, (label, lens) in enumerate(pairs):
        figs = [f for k, n in enumerate(_figures_for(lens)) if (f := embed.figure(
            lens.figures[n], f"fig-{sid}-{i}-{k}", f"{kind}: {n}", n)) is not None]
        wide = len(pairs) == 1 or any(w for _, w in figs)
        out.append(f'<div class="figcell{" wide" if wide else ""}">')
        if label:
            out.append(f"<h3>{esc(label)}</h3>")
        if not figs:
            out.append(f'<p class="notrun">not run: {esc(lens_figures().get(kind, "its figure"))} is missing from '
                       f'{esc(lens.path)}</p>')
        out += [html_ for html_, _ in figs]
        out.append("</div>")
    if later:
        out.append(f'<p class="note">Figures of replicates {shown_replicates} and later are not '
                   f"embedded (the claims use every replicate); they are in their cell folders: "
                   + ", ".join(esc(lens.path) for lens in later) + "</p>")
    out.append("</section>")
    return "\n".join(out)


def _figures_for(lens: LensOutput) -> list[str]:
    """The names of the lens's figures: its main figure first, then PNGs no other lens claims as its own."""
    figures = lens_figures()
    main = figures.get(lens.kind)
    others_main = set(figures.values()) - {main}
    names = [main] if main in lens.figures else []
    return names + [n for n in lens.figures if n != main and n not in others_main]


def headline_block(claims: list[Claim], plan_state: str = "", label: str = "") -> str:
    """The run's label (:func:`bnmem.report.preregistration.run_label`) in full, then one row per claim: status
    pill, claim, effect [CI], the paper's value and the claim's rule history, the run's record of the plan
    (``plan_state``: :func:`bnmem.report.preregistration.check_plan`'s state) heading the rule column; under a
    row, on one line across the table, the design's power and, when the claim's settings disagree, each
    setting's verdict (a column of them was mostly empty, and their text is too long for a cell of one).
    A rule history every claim shares is said once, beside the run's label, instead of in a column."""
    from bnmem.report.headline import headline_rows, plan_header

    heads = headline_rows(claims, plan_state)
    histories = {h["rule"] for h in heads}
    shared_rule = histories.pop() if len(histories) == 1 else ""
    rows = []
    for h in heads:
        rows.append(
            f'<tr class="headline" data-claim="{esc(h["id"])}" data-status="{esc(h["status"])}">'
            f'<td>{status_badge(h["status"])}</td><td><b>{esc(h["id"])}</b></td>'
            f'<td><a href="#details-{esc(h["id"])}">{esc(h["title"])}</a></td>'
            f'<td class="num" data-label="effect [CI]">{esc(h["effect"])}</td>'
            f'<td class="note" data-label="the paper">{esc(h["paper"])}</td>'
            + ("" if shared_rule else f'<td class="note" data-label="{esc(plan_header(plan_state))}">'
                                      f'{esc(h["rule"])}</td>') + "</tr>")
        more = []
        if h["power_short"] not in ("", "—"):
            more.append(f'power at this design · for {POWER_TARGET:.0%}: {esc(h["power_short"])}'
                        + (" · <b>underpowered</b>" if h["underpowered"] else ""))
        if h.get("split"):
            more.append(f'<span class="split">{esc(h["split"])}</span>')
        if more:
            rows.append(f'<tr class="headline-more" data-claim="{esc(h["id"])}"><td colspan="2"></td>'
                        f'<td class="note" colspan="{3 if shared_rule else 4}">{" — ".join(more)}</td></tr>')
    history = (f' <span class="note" id="rule-history">· {esc(plan_header(plan_state))}: every claim\'s '
               f"{esc(shared_rule)}</span>") if shared_rule else ""
    banner = (f'<p class="run-label" id="run-label"><b>{esc(label)}</b>{history}</p>' if label
              else f'<p class="run-label">{history}</p>' if history else "")
    return (banner + '<table class="headline"><thead><tr><th>status</th><th>#</th><th>claim</th><th>effect [CI]</th>'
            "<th>the paper</th>" + ("" if shared_rule else f"<th>{esc(plan_header(plan_state))}</th>")
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def forest_block(claims: list[Claim]) -> str:
    """The forest plot, embedded."""
    from bnmem.report.headline import forest_png

    data = forest_png(claims)
    w, h = png_size(data)
    return (f'<figure class="forest"><img id="forest-plot" src="{data_uri(data)}" width="{w}" height="{h}" '
            'alt="forest plot: every claim\'s effect and interval per setting">'
            "<figcaption>One panel per claim on its own axis, a row per setting (3: per attack, in AUC points); 95% "
            "intervals over replicates (1 − 0.05/k where tested for 'contradicted'); nulls: 4 half the layers, 5a the "
            "10% tolerance; 5b's range: slope 1 ± 10%.</figcaption></figure>")


def _fold(sid: str, summary: str, body: str, open_: bool = False) -> str:
    return (f'<details id="{esc(sid)}"{" open" if open_ else ""}><summary>{esc(summary)}</summary>'
            f"{body}</details>")


def render_html(run: RunData, claims: list[Claim], tables: dict[str, list[Table]],
                shown_replicates: int = SHOWN_REPLICATES) -> str:
    """The whole report page: run line, headline, forest plot, lens figures, then the details folded.

    Args:
        run: the loaded run directory.
        claims: evaluated claims.
        tables: section id -> key tables shown under that section's figures (:func:`bnmem.report.views.key_tables`
            with the same ``shown_replicates``).
        shown_replicates: per-cell figures, tables and conditions are shown for each setting's first this many
            replicates (the notes under them say so); the claims use every replicate.

    Returns:
        The HTML document as a string.
    """
    from bnmem.report.summary import disclosure_of

    counts = {s: sum(c.status == s for c in claims) for s in (*STATUSES, CHECK_PASSED, CHECK_FAILED)}
    counts = {s: n for s, n in counts.items() if n}
    title = f"bnmem report — {run.study}" if run.study else f"bnmem report — {run.root.name}"
    plan = run.plan
    page = sections(run)
    nav = "".join(f'<a href="#{sid}">{esc(word)}</a>' for sid, word in
                  [("forest", "Forest plot")] + [(v.section, v.nav or v.heading) for _, v in page]
                  + [("details", "Details")])
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>",
        f"<header><h1>{esc(title)}</h1><nav>{nav}</nav>",
        '<p class="sub">Reproduction of “Batch Normalization Amplifies Memorization and Privacy Risks” '
        f"(Doan, Gu, Alouani) · <code>{esc(run.root)}</code> ({esc(run.layout)} layout, {len(run.cells)} cells) · "
        f"bnmem {esc(__version__)} · analysis plan version {esc(PLAN_VERSION)}. "
        f'<span id="plan-line">{esc(plan.headline(short=True))}</span>'
        + (f' <span id="provenance-line">{esc(plan.provenance)}</span>' if plan.provenance else "")
        + "".join(f' <span class="attempts-line">{esc(line)}</span>' for line in disclosure_of(run, claims)) + "</p>",
        status_legend(counts, shown_statuses(claims)),
        "</header>",
        '<section id="headline"><h2>Headline</h2>', headline_block(claims, plan.state, plan.label),
        "</section>",
    ]
    if run.problems:  # folded to one line: the first screen stays the headline and the forest plot
        parts.append(f'<details class="problems" id="problems"><summary>Incomplete or unreadable results: '
                     f'{len(run.problems)}</summary><ul>' + "".join(f"<li>{esc(p)}</li>" for p in run.problems)
                     + "</ul></details>")
    parts += ['<section id="forest"><h2>Forest plot</h2>', forest_block(claims), "</section>"]
    embed = Embedder()
    for kind, view in page:
        parts.append(figure_section(run, kind, view, embed, shown_replicates))
        sid = view.section
        if tables.get(sid):  # the key tables of the section, folded under its figures
            later = sum(1 for cell, _ in outputs(run, kind) if not shown(cell, shown_replicates))
            note = (f'<p class="note">Tables of replicates {shown_replicates} and later ({later} '
                    "cells) are not shown (the claims use every replicate): summary.csv and each cell folder hold "
                    "them.</p>"
                    if later else "")
            parts.append(_fold(f"tables-{sid}", f"{view.heading}: tables ({len(tables[sid])})",
                               "\n".join(render_table(t) for t in tables[sid]) + note))
    checklist_body = (
        '<p class="caption">Each claim of the paper, the number measured here, its 95% confidence interval and '
        f"its status under analysis plan {PLAN_VERSION}, how many alternative analyses agree, and the verdict under "
        f"the previous plan ({PREVIOUS_VERSION}). With several settings, a claim's row shows the least supportive "
        "one (details below). Replicate cells of one setting are grouped; intervals are over replicates. "
        "Differences are BN − no normalization, paired (same data, corruption, keep matrix and seeds).</p>"
        + checklist(claims))
    robustness_body = ('<p class="caption">The verdict of each claim under every alternative analysis choice the '
                       "plan lists (attack, gradient definition, checkpoints, σ, layer type, interval method, λ); "
                       "the plan's own verdict first.</p>" + robustness_panel(claims))
    parts += [
        '<section id="details"><h2>Details</h2>',
        _fold("conditions", "Conditions: cells, recipes, measurement definitions, versions", conditions_block(run)),
        _fold("checklist", "Claims checklist (rules, intervals, previous plan)", checklist_body),
        _fold("robustness", "Robustness panel", robustness_body),
        _fold("claim-details", "Claim details: every evaluation", claim_details(claims)),
        _fold("plan", "Analysis plan", plan_block(plan.sha256)),
        _fold("method", "Method", method_text()),
        full_conditions(run, shown_replicates),
        "</section>",
        f"<footer>Generated by <code>bnmem report</code> {esc(__version__)} from {esc(run.root)}. "
        "Self-contained: figures are embedded; no external resources.</footer>",
        "</main></body></html>"]
    return "\n".join(parts) + "\n"


def method_text() -> str:
    from bnmem.stats import LEVEL, N_RESAMPLES, SEED

    return (
        "<ul>"
        "<li><b>Pairing.</b> BN and the other norm share the data, the corruption, the initial-weight seeds, the "
        "batch order and (for LiRA) the keep matrix; every comparison is built from per-pair differences "
        "BN − other (pairs: seeds, or LiRA target models paired by model index).</li>"
        "<li><b>Unit of replication.</b> A replicate repeats the experiment with its own corruption, keep-matrix "
        "and model seeds; cells of one setting that differ only in the replicate are grouped. The interval is "
        "over the replicate means. With one replicate, the interval is over its seeds (independent models given "
        "the data; conditional on one corruption draw); LiRA targets of one replicate share reference models and "
        "are never treated as independent (a delete-one-model jackknife when the lens wrote one, else no "
        "interval).</li>"
        f"<li><b>Intervals.</b> {LEVEL:.0%} Student t-interval at every n (claim 4: one-sided t-tests per BN layer "
        f"combined by a partial-conjunction test); the percentile bootstrap ({N_RESAMPLES} resamples, seed {SEED}) is shown next to "
        "it, never deciding. A claim measured in k settings reads reproduced only if every setting does (an "
        "intersection–union test: 95% each, no adjustment) and contradicted if any one does, tested at "
        "1 − 0.05/k (Bonferroni) so a false 'contradicted' keeps a family-wise 2.5% level.</li>"
        "<li><b>Statuses</b> are tested against the interval, never the mean alone; see the analysis plan "
        "section. A claim measured in several settings shows the least supportive one.</li>"
        "</ul>"
    )


def full_conditions(run: RunData, shown_replicates: int = SHOWN_REPLICATES) -> str:
    """Each lens's complete conditions block, folded, for the reader who needs every setting (the cells of each
    setting's first ``shown_replicates`` replicates; the later ones differ only in their seeds)."""
    out = ['<details id="all-conditions"><summary>All conditions: every lens\'s complete conditions</summary>']
    lenses: Iterable[tuple[str, LensOutput]] = [(f"{cell.id} / {kind}", lens) for cell in run.cells
                                                if shown(cell, shown_replicates)
                                                for kind, lens in cell.lenses.items()]
    later = [cell.id for cell in run.cells if not shown(cell, shown_replicates)]
    if later:  # the same conditions but their seeds (study.json lists every replicate's seeds)
        out.append(f'<p class="note">Conditions of replicates {shown_replicates} and later '
                   f"({len(later)} cells) are not repeated here: they differ from their setting's first replicates "
                   "only in their seeds (study.json lists every replicate's), and each cell folder holds its own "
                   "config.json.</p>")
    if run.theory is not None:
        lenses = [*lenses, (run.theory.kind, run.theory)]
    for label, lens in lenses:
        block = lens.conditions or lens.data.get("config") or lens.config or {}
        out.append(f"<details><summary>{esc(label)} ({esc(lens.path)})</summary>"
                   f"<pre>{esc(json.dumps(block, indent=1, default=str)[:20000])}</pre></details>")
    out.append("</details>")
    return "\n".join(out)
