"""``bnmem verify DIR``: recompute every verdict of a run or published folder and check what it rests on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bnmem.cli.app import app


@app.command()
def verify(
    run_dir: Annotated[Path, typer.Argument(help="a run directory or a published folder (its deciding.csv.gz, "
                                                 "summary.csv, study.json, attempts.jsonl)")],
    repo: Annotated[Optional[Path], typer.Option("--repo", help="the git checkout to read the run's recorded commit "
                                                                "in (default: the one holding this bnmem)")] = None,
) -> None:
    """Recompute every claim's verdict from the folder's deciding table and the installed plan, and check the plan
    text at the recorded commit, the source hash, every seed's derivation and the attempts log.

    One line per claim (recomputed vs published) and per check; exit 1 on any mismatch, 3 when the folder has no
    deciding table (its verdicts cannot be recomputed), 0 when everything matches.
    """
    from bnmem.report.verify import verify as run_verify

    result = run_verify(run_dir, repo)
    typer.echo(result.text(), nl=False)
    raise typer.Exit(result.exit_code)
