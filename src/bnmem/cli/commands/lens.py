"""A ``bnmem NAME`` command for any registered lens that has no hand-written command.

It takes the shared experiment flags, ``--set`` for the lens's own options,
``--out`` and ``--quiet``; validates the lens's config before anything is
written; runs the lens; prints its summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from bnmem.cli.app import Out, Quiet, app, experiment_options
from bnmem.lenses.registry import Lens


def run_and_report(lens: Lens, config: dict[str, Any], out: Path, quiet: bool, **run_kwargs: Any) -> dict[str, Any]:
    """Validate ``config`` with the lens's model (nothing is written on failure), run it, print its summary."""
    cfg = lens.validate(config)
    result = lens.run(cfg, out, progress=not quiet, **run_kwargs)
    if lens.summary is not None:
        typer.echo(lens.summary(result))
    files = ", ".join(f for f in (lens.results, lens.figure) if f)
    typer.echo(f"results in {out}/ ({files})")
    return result


def add_lens_command(name: str, title: str = "") -> None:
    """Register ``bnmem NAME`` with the generic flags (the lens is looked up when the command runs)."""

    @experiment_options(seeds=None, helps={"seeds": "number of seeds (3 → 0,1,2) or a comma list; default: the "
                                                    "lens's own (one base seed for lenses that derive the rest)"})
    def command(exp: dict[str, Any], out: Out = Path(f"runs/{name}"), quiet: Quiet = False) -> None:
        from bnmem.lenses import registry

        run_and_report(registry.get(name), exp, out, quiet)

    command.__doc__ = f"{title or 'The ' + name + ' lens'} (its own options via --set KEY=VALUE; see the README)."
    app.command(name)(command)
