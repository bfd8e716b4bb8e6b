"""``bnmem report AUDIT_DIR``: an audit as one self-contained HTML page.

The page holds the answer first (risk level, the plain paragraph, the warnings, findings with
their levels, cautions, recommendations), then the ROC of each group under the attack that sets
its level (log-log, pooled over targets), then every section of ``audit.md`` after its answer,
rendered from the same lines (:func:`bnmem.auditing.markdown.detail_lines`), so the page carries
everything the markdown does: the shadow copies and their recipe, the attacks per group, ε, the
per-target means, the memorization scores, the regularizer comparison, γ/σ, gradient norms and
accuracy. The most exposed files (the first rows of ``exposure.csv``) link to their images in the
audited folder by relative links from the page's folder (no absolute ``file://`` paths: the audit folder
and the data can move together, and the page names no machine's paths). CSS is inline and the figure a
base64 PNG: no scripts, fonts or other links, so the file opens offline and can be mailed as is.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
from pathlib import Path
from urllib.parse import quote
from typing import Any

from bnmem import io
from bnmem.auditing.report import ATTACK_NAMES
from bnmem.formatting import count_text, fmt
from bnmem.errors import BnmemError

HTML_FILE, ROC_FILE = "audit.html", "audit_roc.png"
LEVEL_COLORS = {"low": "#2e7d32", "moderate": "#ef6c00", "elevated": "#c62828", "not measured": "#616161",
                "not assessed": "#616161"}
# Explaining signals are not risk levels: their badges are neutral, so they never contradict the level's colour.
SIGNAL_COLOR = "#78909c"
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:24px auto;
padding:0 16px;color:#1a1a1a;line-height:1.45}
h1{font-size:1.5em;margin-bottom:4px} h2{font-size:1.2em;margin-top:28px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:.9em} .badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;
font-weight:600;font-size:.85em} .risk{font-size:1.3em;margin:16px 0 8px}
.headline{font-size:1.05em;background:#f6f6f6;border-left:4px solid #888;padding:10px 14px}
.warning{background:#fff3e0;border-left:4px solid #ef6c00;padding:8px 14px;margin:10px 0}
table{border-collapse:collapse;margin:8px 0;font-size:.9em} th,td{border:1px solid #ddd;padding:4px 8px;
text-align:left;vertical-align:top} th{background:#f0f0f0} img{max-width:560px} .note{color:#666;font-size:.85em}
code{background:#f2f2f2;padding:0 3px;border-radius:3px}
"""


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def with_code(text: str) -> str:
    """Escaped text with its `backticked` spans as <code>."""
    parts = esc(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def badge(level: str, signal: bool = False) -> str:
    """A coloured level; a range ('low to elevated') takes its upper end's colour; signals are grey."""
    color = SIGNAL_COLOR if signal else LEVEL_COLORS.get(level, LEVEL_COLORS.get(level.split(" to ")[-1], "#616161"))
    return f'<span class="badge" style="background:{color}">{esc(("signal: " if signal else "") + level)}</span>'


def table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """A table of already-escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def roc_figure(result: dict[str, Any], path: Path) -> str | None:
    """Draw each group's pooled ROC under the attack that sets its level into ``path``; its data URI (None
    without shadow copies)."""
    from bnmem.figures.roc import plot_roc

    import numpy as np

    mem = result.get("membership") or {}
    roc, leak = mem.get("roc") or {}, mem.get("leakage") or {}
    chosen = {}
    for g in result["risk"].get("groups") or []:
        curve = (roc.get(g["attack"]) or {}).get(g["group"])
        if not curve:
            continue
        entry = leak[g["attack"]][g["group"]]
        # The curve only down to the lowest FPR its pooled non-member scores can resolve (1/N): below that the
        # text calls a TPR not estimable, and a log axis would otherwise stretch the last step to its edge.
        fpr, tpr = np.asarray(curve["fpr"], float), np.asarray(curve["tpr"], float)
        n_out = entry.get("nonmember_scores") or 0
        keep = fpr >= 1.0 / n_out - 1e-12 if n_out else np.ones_like(fpr, bool)
        if keep.sum() < 2:
            continue
        name = g["name"].removeprefix("the ")  # the group as the text names it ('30 files listed as mislabeled')
        label = f"{name.split(' (')[0]}, {ATTACK_NAMES[g['attack']]} (AUC {entry['auc']:.2f})"
        chosen[label] = (fpr[keep], tpr[keep])
    if not chosen:
        return None
    plot_roc(chosen, path, title=f"each group's level-setting attack over {mem['shadow_models']} shadow copies "
                                 "(pooled; FPR from 1/non-member scores)")
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def answer_html(result: dict[str, Any]) -> str:
    """Risk level, the paragraph, the warnings, findings, cautions, recommendations."""
    risk = result["risk"]
    cal = risk.get("calibration") or {}
    parts = [f'<p class="risk" id="risk">Risk: {badge(risk["level"])}{esc(risk["title"][len(risk["level"]):])}</p>',
             f'<p class="meta">Basis: {esc(risk["basis"])}.</p>',
             f'<p class="headline" id="headline">{with_code(risk["headline"])}</p>']
    if not (risk.get("target") or {"measured": True})["measured"]:  # what cannot be measured, and how to
        parts.append(f'<p class="meta" id="target-not-measured">{with_code(risk["target"]["text"])}</p>')
    if risk.get("terms"):  # the jargon above, explained where it is shown
        parts.append('<p class="meta" id="terms">Terms: ' + "; ".join(
            f"<b>{esc(k)}</b>: {esc(v)}" for k, v in risk["terms"].items()) + ".</p>")
    warnings = ([cal["warning"]] if cal.get("warning") and cal["warning"] != risk.get("blocker") else [])
    warnings += [w["text"] for w in result.get("warnings") or []]
    parts += [f'<p class="warning" id="calibration-warning">{with_code(w)}</p>' for w in warnings]
    rows = [[badge(lvl, signal=kind == "explains"), esc(kind), with_code(text)]
            for lvl, kind, text in zip(risk["finding_levels"], risk["finding_kinds"], risk["findings"])]
    parts += ["<h2>Findings</h2>", table(["level", "kind", "finding"], rows, "findings")]
    if risk["cautions"]:
        parts += ["<h2>Cautions</h2><ul>"] + [f"<li>{esc(c)}</li>" for c in risk["cautions"]] + ["</ul>"]
    parts += ['<h2>Recommendations</h2><ul id="recommendations">']
    parts += [f"<li>{with_code(r)}</li>" for r in risk["recommendations"]] + ["</ul>"]
    return "\n".join(parts + [f'<p class="note">{esc(risk["note"])}</p>'])


def inline(text: str) -> str:
    """Escaped markdown text with its `code` and **bold** spans."""
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", with_code(text))


def markdown_html(lines: list[str]) -> str:
    """The audit's own markdown (headings, pipe tables, bullets, paragraphs) as HTML; the leakage table keeps
    its class for the page's readers."""
    out, rows = [], []

    def flush() -> None:
        if rows:
            header, body = rows[0], [r for r in rows[2:]]
            cls = "leakage" if header[:3] == ["group", "examples", "attack"] else ""
            out.append(table([inline(h) for h in header], [[inline(c) for c in r] for r in body], cls))
            rows.clear()

    for line in lines:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
            continue
        flush()
        if line.startswith("## "):
            out.append(f"<h2>{inline(line[3:])}</h2>")
        elif line.startswith("- "):
            out.append(f"<ul><li>{inline(line[2:])}</li></ul>")
        elif line.strip():
            out.append(f"<p>{inline(line.strip('_') if line.startswith('_') else line)}</p>")
    flush()
    return "\n".join(out)


def measured_html(result: dict[str, Any], roc_uri: str | None, page_dir: Path | None = None) -> str:
    """The ROC, then every section of audit.md after its answer."""
    from bnmem.auditing.markdown import detail_lines

    parts = []
    if not result.get("membership"):
        parts.append("<h2>Membership inference</h2><p>Not measured: rerun this audit with "
                     "<code>--shadow-models 16</code> added.</p>")
    elif roc_uri:
        parts += ["<h2>Membership inference: each group under its level-setting attack</h2>",
                  f'<figure><img src="{roc_uri}" alt="ROC of each group under the attack that sets its level">'
                  "<figcaption>Log-log ROC, pooled over the target copies; dashed diagonal = guessing."
                  "</figcaption></figure>"]
    return "\n".join(parts + [exposure_html((result.get("membership") or {}).get("exposure"), page_dir),
                             markdown_html(detail_lines(result, exposure=False))])


def relative_link(target: Path, page_dir: Path) -> str:
    """``target`` as a link relative to the page's folder (forward slashes, URL-quoted)."""
    return quote(Path(os.path.relpath(target.resolve(), page_dir.resolve())).as_posix())


def exposure_html(section: dict[str, Any] | None, page_dir: Path | None = None) -> str:
    """The most exposed files, each linked to its image (relative to ``page_dir``, the folder the page is written
    to; no link without it)."""
    from bnmem.auditing.markdown import exposure_ci

    if not section:
        return ""
    rows = []
    for r in section["top"]:
        name = esc(r["path"] or r["index"])
        if r["path"] and section.get("root") and page_dir is not None:
            name = f'<a href="{esc(relative_link(Path(section["root"], r["path"]), page_dir))}">{name}</a>'
        rows.append([str(r["rank"]), name, esc(r["group"]), esc(exposure_ci(r)), str(r["copies_in"]),
                     esc(fmt(r["gradient_norm"]))])
    return (f"<h2>Most exposed training files ({esc(section['file'])}: all {section['n']}, ranked)</h2>"
            f"<p>{esc(section['definition'])}.</p>"
            + table(["rank", "file", "group", "log-LR [95%]", "copies IN", "gradient norm"], rows))


def render_audit_html(result: dict[str, Any], roc_uri: str | None, page_dir: Path | None = None) -> str:
    """The page; ``page_dir``: the folder it is written to (the image links are relative to it)."""
    m, d = result["model"], result["data"]
    title = f"bnmem audit: {m['class']} ({m['format']}, {count_text(m['parameters'])} parameters)"
    meta = (f"Data: {d['dataset']}, {d['n_train']} training / {d['n_test']} test examples"
            + (f"; model file {m['file']} (sha256 {m.get('sha256', '')[:12]}…)" if m.get("file") else ""))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1><p class=\"meta\">{esc(meta)}</p>"
            f"{answer_html(result)}{measured_html(result, roc_uri, page_dir)}</body></html>")


def write_audit_report(audit_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write ``audit.html`` (and the ROC PNG it embeds) for a finished audit folder.

    Raises:
        BnmemError: ``audit_dir`` holds no finished audit (``audit.json``).
    """
    src = Path(audit_dir)
    try:
        result = json.loads((src / "audit.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise BnmemError(f"{src} holds no finished audit (audit.json); run bnmem audit --out {src} first") from None
    if "risk" not in result or "headline" not in result["risk"]:
        raise BnmemError(f"{src}/audit.json was written by an older bnmem; rerun bnmem audit into a new --out")
    dest = io.ensure_dir(out or src)
    uri = roc_figure(result, dest / ROC_FILE)
    io.write_text(dest / HTML_FILE, render_audit_html(result, uri, dest))
    return dest / HTML_FILE


def is_audit_dir(path: str | Path) -> bool:
    return (Path(path) / "audit.json").is_file()
