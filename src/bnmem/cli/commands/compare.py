"""``bnmem compare RUN_A RUN_B``: two runs' claims checklists side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bnmem.cli.app import Quiet, app

RunArg = Annotated[Path, typer.Argument(help="a run directory (its summary.csv, else its claims) or a summary.csv")]


@app.command()
def compare(
    run_a: RunArg,
    run_b: RunArg,
    markdown: Annotated[bool, typer.Option("--markdown", help="print a markdown table")] = False,
    recompute: Annotated[bool, typer.Option("--recompute", help="evaluate both runs' claims now under the "
                                                                "installed plan, ignoring their summary.csv")] = False,
    quiet: Quiet = False,
) -> None:
    """Status and effect of every claim in two runs, and what changed between them."""
    from bnmem.report.compare import load_checklist, render

    a, b = (load_checklist(run, recompute, progress=not quiet) for run in (run_a, run_b))
    typer.echo(render(a, b, markdown), nl=False)
