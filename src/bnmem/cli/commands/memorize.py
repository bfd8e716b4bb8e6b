"""``bnmem memorize``: lens 1, forced memorization."""

from __future__ import annotations

from typing import Any

import typer

from bnmem.cli.app import Out, Quiet, app, experiment_options


@app.command()
@experiment_options()
def memorize(exp: dict[str, Any], out: Out = "runs/memorize", quiet: Quiet = False) -> None:
    """Train BN and other-norm models on data with corrupted samples; track how fast each fits them."""
    from bnmem.lenses.memorize import MemorizeConfig, run_memorize, summary_table

    cfg = MemorizeConfig.model_validate(exp)
    result = run_memorize(cfg, out, progress=not quiet)
    typer.echo(summary_table(result))
    typer.echo(f"results in {out}/ (metrics.json, memorization.png)")
