"""``bnmem memorize``: lens 1, forced memorization."""

from __future__ import annotations

from typing import Any


from bnmem.cli.app import Out, Quiet, app, experiment_options


@app.command()
@experiment_options()
def memorize(exp: dict[str, Any], out: Out = None, quiet: Quiet = False) -> None:
    """Train BN and other-norm models on data with corrupted samples; track how fast each fits them."""
    from bnmem.cli.commands.lens import run_and_report
    from bnmem.lenses import registry

    run_and_report(registry.get("memorize"), exp, out, quiet)
