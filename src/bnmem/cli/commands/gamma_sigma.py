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
    out: Out = None,
    quiet: Quiet = False,
) -> None:
    """Train BN models and track γ, σ and |γ|/σ of every BN channel over epochs."""
    from bnmem.cli.commands.lens import run_and_report
    from bnmem.lenses import registry

    run_and_report(registry.get("gamma-sigma"), {**exp, "every": every}, out, quiet)
