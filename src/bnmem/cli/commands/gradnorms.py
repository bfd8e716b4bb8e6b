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
    at: Annotated[str, typer.Option(help="comma-separated epochs after which the norms are measured")] = "1,5,10,30",
    definition: Annotated[str, typer.Option(
        help="per-sample gradient of a BN model: eval (running statistics), batch (own loss term in a "
             "training-mode batch), or eval,batch")] = "eval",
    method: Annotated[str, typer.Option(help="auto (ghost norms, else vmap), ghost, vmap, loop (slow oracle)")] = "auto",
    batch_subset: Annotated[Optional[int], typer.Option(
        help="batch definition: measure only N examples (seeded subset; default all)")] = None,
    out: Out = "runs/gradnorms",
    quiet: Quiet = False,
) -> None:
    """Train models and measure each training example's float64 loss-gradient norm at chosen epochs."""
    from bnmem.lenses.gradnorms import GradNormsConfig, run_gradnorms, summary_table

    epochs = parse_flag_list(at, int, "--at", "epochs")
    cfg = GradNormsConfig.model_validate({**exp, "at": epochs, "definitions": parse_list(definition),
                                          "method": method, "batch_subset": batch_subset})
    result = run_gradnorms(cfg, out, progress=not quiet)
    typer.echo(summary_table(result))
    typer.echo(f"results in {out}/ (metrics.json, gradnorms.npz, gradnorms.png)")
