"""``bnmem mitigate``: BN vs BN + γ/σ regularizer vs other norms — memorization, accuracy, γ/σ."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from bnmem.cli.app import Out, Quiet, app, experiment_options, parse_flag_list


@app.command()
@experiment_options()
def mitigate(
    exp: dict[str, Any],
    lambdas: Annotated[str, typer.Option(help="comma-separated λ of the γ/σ regularizer (τ: --gs-tau)")] = "0.1,1,10",
    fixed_epoch: Annotated[int, typer.Option(help="epoch at which memorization is compared (besides the last)")] = 10,
    lira_models: Annotated[int, typer.Option(
        help="shadow models per variant for LiRA AUC (0: off; even, >= 4)")] = 0,
    selection_seeds: Annotated[int, typer.Option(
        help="extra model seeds that only select λ, never evaluated (0: select on the evaluated seeds, in-sample)")] = 1,
    out: Out = None,
    quiet: Quiet = False,
) -> None:
    """Compare plain BN, BN with the γ/σ regularizer (each λ) and no-norm: memorization vs test accuracy."""
    from bnmem.cli.commands.lens import run_and_report
    from bnmem.lenses import registry

    lams = parse_flag_list(lambdas, float, "--lambdas", "numbers")
    run_and_report(registry.get("mitigate"), {**exp, "lambdas": lams, "fixed_epoch": fixed_epoch,
                                               "lira_models": lira_models, "selection_seeds": selection_seeds},
                   out, quiet)
