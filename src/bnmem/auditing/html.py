"""``bnmem report AUDIT_DIR``: an audit as one self-contained HTML page.

The page holds the answer first (risk level, the plain paragraph, the calibration warning,
findings with their levels, cautions, recommendations), then the ROC of the whole training set
against the known outliers and the most-exposed examples (log-log, pooled over targets), the
shadow copies beside the model, the attacks per group with intervals and the regularizer
comparison. CSS is inline and the figure a base64 PNG: no scripts, fonts or links, so the file
opens offline and can be mailed as is.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.auditing.findings import ci_text as _ci, pct
from bnmem.auditing.report import ATTACK_NAMES
from bnmem.formatting import count_text
from bnmem.errors import BnmemError

HTML_FILE, ROC_FILE = "audit.html", "audit_roc.png"
LEVEL_COLORS = {"low": "#2e7d32", "moderate": "#ef6c00", "elevated": "#c62828", "not measured": "#616161"}
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


def badge(level: str) -> str:
    return f'<span class="badge" style="background:{LEVEL_COLORS.get(level, "#616161")}">{esc(level)}</span>'


def table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """A table of already-escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def roc_figure(result: dict[str, Any], path: Path) -> str | None:
    """Draw online LiRA's pooled ROC per group into ``path``; its data URI (None without shadow copies)."""
    from bnmem.figures.roc import plot_roc

    mem = result.get("membership") or {}
    curves, leak = mem.get("roc") or {}, (mem.get("leakage") or {}).get("online", {})
    labels = {"all": "whole training set", "outliers": "known outliers", "most_exposed": "most-exposed examples"}
    chosen = {f"{labels[g]} (AUC {leak[g]['auc']:.2f})" if g in leak else labels[g]: (c["fpr"], c["tpr"])
              for g, c in curves.items() if g in labels}
    if not chosen:
        return None
    plot_roc(chosen, path, title=f"online LiRA over {mem['shadow_models']} shadow copies (pooled)")
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def answer_html(result: dict[str, Any]) -> str:
    """Risk level, the paragraph, the warning, findings, cautions, recommendations."""
    risk = result["risk"]
    cal = risk.get("calibration") or {}
    parts = [f'<p class="risk" id="risk">Risk: {badge(risk["level"])}</p>',
             f'<p class="meta">Basis: {esc(risk["basis"])}.</p>',
             f'<p class="headline" id="headline">{with_code(risk["headline"])}</p>']
    if cal.get("warning"):
        parts.append(f'<p class="warning" id="calibration-warning">{with_code(cal["warning"])}</p>')
    rows = [[badge(lvl), esc(kind), with_code(text)]
            for lvl, kind, text in zip(risk["finding_levels"], risk["finding_kinds"], risk["findings"])]
    parts += ["<h2>Findings</h2>", table(["level", "kind", "finding"], rows, "findings")]
    if risk["cautions"]:
        parts += ["<h2>Cautions</h2><ul>"] + [f"<li>{esc(c)}</li>" for c in risk["cautions"]] + ["</ul>"]
    parts += ['<h2>Recommendations</h2><ul id="recommendations">']
    parts += [f"<li>{with_code(r)}</li>" for r in risk["recommendations"]] + ["</ul>"]
    return "\n".join(parts + [f'<p class="note">{esc(risk["note"])}</p>'])


def measured_html(result: dict[str, Any], roc_uri: str | None) -> str:
    """The ROC, the shadow copies beside the model with their recipe, the attacks per group, the comparison."""
    mem = result.get("membership")
    if not mem:
        return "<h2>Membership inference</h2><p>Not measured: rerun with <code>--shadow-models 16</code>.</p>"
    parts = ["<h2>Membership inference: whole set vs outliers</h2>"]
    if roc_uri:
        parts.append(f'<figure><img src="{roc_uri}" alt="ROC of the whole training set and the outliers">'
                     "<figcaption>Log-log ROC, pooled over the target copies; dashed diagonal = guessing."
                     "</figcaption></figure>")
    rows = [[esc(g), str(v["n_examples"]), esc(ATTACK_NAMES.get(a, a)), _ci(v["auc"], v["ci"]["auc"]),
             _ci(v["tpr_at_1pct_fpr"], v["ci"]["tpr_at_1pct_fpr"], True),
             _ci(v["tpr_at_0.1pct_fpr"], v["ci"]["tpr_at_0.1pct_fpr"], True)]
            for a, groups in mem.get("leakage", {}).items() for g, v in groups.items()]
    parts.append(table(["group", "examples", "attack", "AUC [95%]", "TPR at 1% FPR", "TPR at 0.1% FPR"], rows,
                       "leakage"))
    acc, sh = result["accuracy"], mem["shadow_accuracy"]
    recipe = ", ".join(f"{k} {mem['train'][k]}" for k in ("epochs", "lr", "batch_size", "optimizer", "gs_reg"))
    parts += ["<h2>Shadow copies and their recipe</h2>",
              table(["", "train accuracy", "test accuracy"],
                    [["your model", pct(acc["train_acc"]), pct(acc["test_acc"])],
                     [f"shadow copies (mean of {mem['shadow_models']})", pct(sh["train_in"]), pct(sh.get("test"))]]),
              f"<p>Recipe used: {esc(recipe)}"
              + (f" — {esc(mem['matched']['text'])}" if mem.get("matched") else "") + "</p>"]
    cmp = result.get("gs_reg_comparison")
    if cmp:
        a, b = cmp["without"], cmp["with"]
        rows = [[f"{esc(ATTACK_NAMES.get(k, k))} AUC, {esc(g)}",
                 _ci(a["auc"][k][g]["auc"], a["auc"][k][g]["ci"]) if g in a["auc"].get(k, {}) else "-",
                 _ci(v["auc"], v["ci"])] for k, groups in b["auc"].items() for g, v in groups.items()]
        rows += [["shadow test accuracy", pct(a["shadow_accuracy"]["test"]), pct(b["shadow_accuracy"]["test"])]]
        parts += [f"<h2>γ/σ regularizer on your data (λ = {cmp['lambda']:g})</h2>",
                  table(["", f"without (λ = {a['gs_reg']:g})", f"with (λ = {b['gs_reg']:g})"], rows, "comparison")]
    return "\n".join(parts)


def render_audit_html(result: dict[str, Any], roc_uri: str | None) -> str:
    m, d = result["model"], result["data"]
    title = f"bnmem audit: {m['class']} ({m['format']}, {count_text(m['parameters'])} parameters)"
    meta = (f"Data: {d['dataset']}, {d['n_train']} training / {d['n_test']} test examples"
            + (f"; model file {m['file']} (sha256 {m.get('sha256', '')[:12]}…)" if m.get("file") else ""))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1><p class=\"meta\">{esc(meta)}</p>"
            f"{answer_html(result)}{measured_html(result, roc_uri)}</body></html>")


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
    io.write_text(dest / HTML_FILE, render_audit_html(result, uri))
    return dest / HTML_FILE


def is_audit_dir(path: str | Path) -> bool:
    return (Path(path) / "audit.json").is_file()
