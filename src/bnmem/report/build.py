"""Build the report of a run directory: report.html, summary.md, summary.csv and the deciding table.

Reads only what the lenses wrote (data flows one way: results on disk → report),
so a report can be rebuilt at any time, also while a study is still running.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bnmem import io
from bnmem.names import REPORT_HTML, SUMMARY_CSV, SUMMARY_MD
from bnmem.report.claims import Claim
from bnmem.report.deciding import DECIDING_CSV, evaluate_traced
from bnmem.report.html import render_html
from bnmem.report.results import SHOWN_REPLICATES
from bnmem.report.rundata import RunData, load_run
from bnmem.report.summary import render_csv, render_markdown
from bnmem.report.views import key_tables

__all__ = ["Report", "build_report", "key_tables"]


@dataclass
class Report:
    """What :func:`build_report` wrote."""

    run: RunData
    claims: list[Claim]
    html: Path
    markdown: Path
    csv: Path
    deciding: Path | None = None


def build_report(run_dir: str | Path, out_dir: str | Path | None = None,
                 shown_replicates: int = SHOWN_REPLICATES) -> Report:
    """Evaluate every claim and write the three report files and the deciding table (atomically).

    Args:
        run_dir: a study, lens, or folder-of-lenses run directory.
        out_dir: where to write (default: ``run_dir``).
        shown_replicates: the page and summary.md show per-cell figures, key tables and conditions for each
            setting's first this many replicates (``bnmem report --shown-replicates``); the claims, summary.csv
            and the deciding table use every replicate.

    Returns:
        The :class:`Report` with the claims and the written paths.

    Raises:
        BnmemError: ``run_dir`` holds no results, or ``out_dir`` is not writable.
    """
    run = load_run(run_dir)
    # The claims, decided as evaluate_claims decides them, and every number they read (bnmem verify's input).
    claims, deciding = evaluate_traced(run)
    tables = key_tables(run, shown_replicates)
    out = io.ensure_dir(out_dir or run_dir)
    paths = out / REPORT_HTML, out / SUMMARY_MD, out / SUMMARY_CSV
    io.write_text(paths[0], render_html(run, claims, tables, shown_replicates))
    io.write_text(paths[1], render_markdown(run, claims, tables))
    io.write_text(paths[2], render_csv(claims, run.plan.label, run.plan.sha256))
    return Report(run, claims, *paths, deciding=deciding.write(out / DECIDING_CSV))
