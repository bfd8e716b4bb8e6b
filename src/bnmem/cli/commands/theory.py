"""``bnmem theory``: simulate the one-channel toy model and check the (γ/σ)² amplification."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bnmem.cli.app import Out, Quiet, app
from bnmem.theory.config import (
    TheoryConfig,  # pydantic only: `bnmem --help` stays free of torch
)

_F = TheoryConfig.model_fields


def _opt(name: str, flag: str | None = None) -> Any:
    """A typer option whose help is the config field's description (the default is set below)."""
    return typer.Option(*([flag] if flag else []), help=_F[name].description)


@app.command()
def theory(
    out: Out = None,
    steps: Annotated[int, _opt("steps")] = _F["steps"].default,
    lr: Annotated[float, _opt("lr")] = _F["lr"].default,
    n_outliers: Annotated[int, _opt("n_outliers")] = _F["n_outliers"].default,
    seed: Annotated[int, _opt("seed")] = _F["seed"].default,
    n_per_class: Annotated[int, _opt("n_per_class")] = _F["n_per_class"].default,
    noise: Annotated[float, _opt("noise")] = _F["noise"].default,
    kernel_size: Annotated[int, _opt("kernel_size")] = _F["kernel_size"].default,
    outlier_kind: Annotated[str, _opt("outlier_kind")] = _F["outlier_kind"].default,
    counterfactual_seeds: Annotated[int, _opt("counterfactual_seeds")] = _F["counterfactual_seeds"].default,
    plot: Annotated[bool, _opt("plot", "--plot/--no-plot")] = _F["plot"].default,
    quiet: Quiet = False,
) -> None:
    """Toy model (one conv channel + linear classifier, with and without BN): measured vs predicted
    outlier-margin amplification (γ/σ)², the fair counterfactual of claim 5b over seeds, and how
    outliers push γ up. Writes theory.json (+ theory.png); a rerun with the same settings is skipped."""
    from bnmem.lenses.theory import summary as theory_summary
    from bnmem.rundir import default_out
    from bnmem.theory import finished_summary, run_theory

    cfg = TheoryConfig.from_options(
        steps=steps, lr=lr, n_outliers=n_outliers, seed=seed, n_per_class=n_per_class, noise=noise,
        kernel_size=kernel_size, outlier_kind=outlier_kind, counterfactual_seeds=counterfactual_seeds, plot=plot)
    out = Path(out) if out is not None else default_out("theory", cfg.model_dump(mode="json"))
    if finished_summary(cfg, out) is not None:
        typer.echo(f"{out}/theory.json already holds this simulation; not rerun")
    summary = run_theory(cfg, out, progress=not quiet)
    typer.echo(theory_summary(summary))
    typer.echo(f"results in {out}/ (theory.json{', theory.png' if plot else ''})")
