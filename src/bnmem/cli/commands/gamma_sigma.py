"""``bnmem gamma-sigma``: BN scale statistics |γ|/σ per layer and channel, tracked over training."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from bnmem.cli.app import Out, Quiet, app, experiment_options


@app.command("gamma-sigma")
@experiment_options(norms="batch")
def gamma_sigma(
    exp: dict[str, Any],
    every: Annotated[int, typer.Option(help="measure every N epochs (the last epoch always)")] = 1,
    out: Out = "runs/gamma_sigma",
    quiet: Quiet = False,
) -> None:
    """Train BN models and track γ, σ and |γ|/σ of every BN channel over epochs."""
    from bnmem.lenses.gamma_sigma import GammaSigmaConfig, run_gamma_sigma, summary_table

    cfg = GammaSigmaConfig.model_validate({**exp, "every": every})
    result = run_gamma_sigma(cfg, out, progress=not quiet)
    typer.echo(summary_table(result))
    typer.echo(f"results in {out}/ (gamma_sigma.json, gamma_sigma.png)")
