"""``bnmem report``: the claims checklist and figures of a run directory, as one HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bnmem.cli.app import app

RunDir = Annotated[Path, typer.Argument(help="a study run directory (with index.json), one lens's run directory, "
                                              "or a bnmem audit folder (writes audit.html)")]
ReportOut = Annotated[Optional[Path], typer.Option("--out", help="write the report here (default: RUN_DIR)")]
Shown = Annotated[Optional[int], typer.Option(
    "--shown-replicates", metavar="N",
    help="embed per-cell figures, key tables and conditions for each setting's first N replicates (default 3; "
         "the claims use every replicate): a smaller N keeps a many-replicate study's page under its budget")]


@app.command()
def report(run_dir: RunDir, out: ReportOut = None, shown_replicates: Shown = None) -> None:
    """Check the paper's claims against a run's results; write report.html, summary.md and summary.csv.

    For a ``bnmem audit`` folder, write its audit as one HTML page (audit.html).
    """
    from bnmem.auditing.html import is_audit_dir, write_audit_report
    from bnmem.errors import BnmemError
    from bnmem.report.build import build_report
    from bnmem.report.results import SHOWN_REPLICATES

    if shown_replicates is not None and shown_replicates < 0:
        raise BnmemError(f"--shown-replicates must be 0 or more, got {shown_replicates}")

    if is_audit_dir(run_dir):
        typer.echo(f"audit report: {write_audit_report(run_dir, out)}")
        return

    rep = build_report(run_dir, out, SHOWN_REPLICATES if shown_replicates is None else shown_replicates)
    typer.echo(rep.run.plan.headline())  # the plan check the report was built with (made once per run)
    width = max(len(c.id) for c in rep.claims)
    for c in rep.claims:
        d = c.decisive
        value = "" if d is None else f"  {c.fmt(d.value)}" + (
            "" if d.ci_low is None else f" [{c.fmt(d.ci_low)}, {c.fmt(d.ci_high)}]")
        typer.echo(f"{c.id.rjust(width)}  {c.status:<15}{value}  {c.title}")
    for p in rep.run.problems:
        typer.echo(f"note: {p}", err=True)
    typer.echo(f"report: {rep.html}  (also {rep.markdown.name}, {rep.csv.name}, {rep.deciding.name})")
