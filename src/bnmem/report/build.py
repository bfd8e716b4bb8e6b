"""Build the report of a run directory: report.html, summary.md, summary.csv.

Reads only what the lenses wrote (data flows one way: results on disk → report),
so a report can be rebuilt at any time, also while a study is still running.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bnmem import io
from bnmem.names import GAMMA_SIGMA, GRADNORMS, LIRA, MEMORIZE, MITIGATE, REPORT_HTML, SUMMARY_CSV, SUMMARY_MD
from bnmem.report.claims import Claim, evaluate_claims
from bnmem.report.claims.claim7 import push_tables
from bnmem.report.html import render_html
from bnmem.report.memeps import epsilon_tables, memorization_score_tables
from bnmem.report.rundata import RunData, load_run
from bnmem.report.preregistration import run_label
from bnmem.report.summary import render_csv, render_markdown
from bnmem.report.tables import (
    Table, gamma_sigma_table, gradnorms_table, lens_summary_table, lira_tables, memorization_table, mitigation_table,
    theory_table,
)


@dataclass
class Report:
    """What :func:`build_report` wrote."""

    run: RunData
    claims: list[Claim]
    html: Path
    markdown: Path
    csv: Path


def key_tables(run: RunData) -> dict[str, list[Table]]:
    """Section id -> tables shown under that section's figures."""
    out: dict[str, list[Table]] = {
        "memorization": [memorization_table(c, lens) for c, lens in run.lenses(MEMORIZE)],
        "gradnorms": [gradnorms_table(c, lens) for c, lens in run.lenses(GRADNORMS)],
        "lira": [t for c, lens in run.lenses(LIRA) for t in lira_tables(c, lens)]
        + memorization_score_tables(run) + epsilon_tables(run),
        "gamma_sigma": [gamma_sigma_table(c, lens) for c, lens in run.lenses(GAMMA_SIGMA)] + push_tables(run),
        "theory": [theory_table(run.theory)] if run.theory is not None else [],
        "mitigate": [mitigation_table(c, lens) for c, lens in run.lenses(MITIGATE)],
    }
    # Lenses without a dedicated section: the table their own command prints.
    from bnmem.report.html import sections

    for sid, _, kind, _ in sections(run):
        if sid.startswith("lens-"):
            pairs = ([("", run.studywide[kind])] if kind in run.studywide
                     else [(c.describe(), lens) for c, lens in run.lenses(kind)])
            out[sid] = [t for label, lens in pairs if (t := lens_summary_table(label, lens)) is not None]
    return {k: v for k, v in out.items() if v}


def build_report(run_dir: str | Path, out_dir: str | Path | None = None) -> Report:
    """Evaluate every claim and write the three report files (atomically).

    Args:
        run_dir: a study, lens, or folder-of-lenses run directory.
        out_dir: where to write (default: ``run_dir``).

    Returns:
        The :class:`Report` with the claims and the written paths.

    Raises:
        BnmemError: ``run_dir`` holds no results, or ``out_dir`` is not writable.
    """
    run = load_run(run_dir)
    claims = evaluate_claims(run)
    tables = key_tables(run)
    out = io.ensure_dir(out_dir or run_dir)
    paths = out / REPORT_HTML, out / SUMMARY_MD, out / SUMMARY_CSV
    io.write_text(paths[0], render_html(run, claims, tables))
    io.write_text(paths[1], render_markdown(run, claims, tables))
    io.write_text(paths[2], render_csv(claims, run_label(run.root, run.study)))
    return Report(run, claims, *paths)
