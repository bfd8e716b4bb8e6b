"""``bnmem gradnorms``: lens 2, per-sample gradient norms of clean vs corrupted examples."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from bnmem.cli.app import Out, Quiet, app, experiment_options, parse_flag_list
from bnmem.config import parse_list


@app.command()
@experiment_options()
def gradnorms(
    exp: dict[str, Any],
    at: Annotated[Optional[str], typer.Option(
        help="comma-separated epochs after which the norms are measured (default: 1, 2, 3, epochs/6, epochs/3 "
             "and the last epoch; 1,2,3,5,10,30 for 30 epochs)")] = None,
    definition: Annotated[str, typer.Option(
        help="per-sample gradient of a BN model: eval (running statistics), batch (own loss term in a "
             "training-mode batch), or eval,batch")] = "eval",
    method: Annotated[str, typer.Option(help="auto (ghost norms, else vmap), ghost, vmap, loop (slow oracle)")] = "auto",
    batch_subset: Annotated[Optional[int], typer.Option(
        help="batch definition: measure only N examples (seeded subset; default all)")] = None,
    out: Out = None,
    quiet: Quiet = False,
) -> None:
    """Train models and measure each training example's float64 loss-gradient norm at chosen epochs."""
    from bnmem.cli.commands.lens import run_and_report
    from bnmem.lenses import registry

    epochs = None if at is None else parse_flag_list(at, int, "--at", "epochs")
    run_and_report(registry.get("gradnorms"), {**exp, "at": epochs, "definitions": parse_list(definition),
                                                "method": method, "batch_subset": batch_subset}, out, quiet)
