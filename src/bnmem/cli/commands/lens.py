"""A ``bnmem NAME`` command for any registered lens that has no hand-written command.

It takes the shared experiment flags (with the lens's own defaults), a flag for
each simple field of the lens's config (the rest through ``--set``), ``--out``
and ``--quiet``; validates the lens's config before anything is written; runs
the lens; prints its summary. ``bnmem --help`` lists such a command without
importing its lens; the full command is built when it is invoked.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Iterable

import typer

from bnmem.cli.app import EXPERIMENT_OPTIONS, Out, Quiet, app, config_defaults, experiment_options
from bnmem.cli.fields import FieldFlag, validated
from bnmem.lenses.registry import Lens
from bnmem.rundir import default_out, removed_if_unstarted

# Parameters of every lens command besides the shared flags (a config field of these names stays --set only).
COMMAND_PARAMS = {"exp", "out", "quiet", "set", "seed", "n_seeds", "seeds"}
PLACEHOLDER = "_bnmem_lens_placeholder"


def run_and_report(lens: Lens, config: dict[str, Any], out: Path | None, quiet: bool,
                   flags: Iterable[FieldFlag] = (), **run_kwargs: Any) -> dict[str, Any]:
    """Validate ``config`` with the lens's model (nothing is written on failure), run it, print its summary.

    A bad value is one line naming its flag (the command's own ``flags``, the shared ones) or its ``--set`` path.

    ``out`` None: ``runs/<lens>-<config hash>`` (:func:`bnmem.rundir.default_out`). A run that fails
    before writing any result leaves no folder behind (:func:`bnmem.rundir.removed_if_unstarted`).
    """
    cfg = validated(lens.config, config, flags)
    train = getattr(cfg, "train", None)
    if train is not None:
        from bnmem.train.device import check_device_here  # torch: imported by the command that runs, not by --help

        check_device_here(train.device)
    out = Path(out) if out is not None else default_out(lens.name, cfg.model_dump(mode="json"))
    with removed_if_unstarted(out):
        result = lens.run(cfg, out, progress=not quiet, **run_kwargs)
    if lens.summary is not None:
        typer.echo(lens.summary(result))
    files = ", ".join(f for f in (lens.results, lens.figure) if f)
    typer.echo(f"results in {out}/ ({files})")
    return result


def add_lens_command(name: str, title: str = "") -> None:
    """Register ``bnmem NAME`` for ``bnmem --help`` without importing the lens (see :func:`build_lens_command`)."""

    @experiment_options()
    def command(exp: dict[str, Any], out: Out = None, quiet: Quiet = False) -> None:
        from bnmem.lenses import registry

        run_and_report(registry.get(name), exp, out, quiet)

    command.__doc__ = f"{title or 'The ' + name + ' lens'} (its options: bnmem {name} --help)."
    setattr(command, PLACEHOLDER, True)
    app.command(name)(command)


def build_lens_command(name: str) -> None:
    """Replace the placeholder of ``bnmem NAME`` by the full command: the lens's defaults and own flags.

    Imports the lens; called when ``NAME`` is the command being run (or asked for its help).
    """
    from bnmem.cli.fields import field_flags
    from bnmem.lenses import registry

    info = next((c for c in app.registered_commands if c.name == name), None)
    if info is None or not getattr(info.callback, PLACEHOLDER, False):
        return
    lens = registry.get(name)
    own = field_flags(lens.config, skip=set(EXPERIMENT_OPTIONS) | COMMAND_PARAMS |
                      set(lens.config.model_fields).intersection({"data", "train", "seeds", "arch", "norms"}))
    defaults = config_defaults(lens.config)

    def command(exp: dict[str, Any], out: Out = None, quiet: Quiet = False, **options: Any) -> None:
        given = {f.name: f.value(options[f.name]) for f in own}
        # --set overrides (already in exp) win over the flags; the lens is looked up again (a replaced one runs).
        run_and_report(registry.get(name), {**given, **exp}, out, quiet, own)

    # typer reads the signature: the lens's own flags take the place of **options.
    sig = inspect.signature(command)
    fixed = [p for p in sig.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = sig.replace(parameters=fixed + [f.parameter() for f in own])  # type: ignore[attr-defined]
    command.__doc__ = (f"{lens.title or 'The ' + name + ' lens'}: the flags below, with the lens's own defaults; "
                       "any other config field via --set KEY=VALUE.")
    app.registered_commands.remove(info)
    # A one-seed lens (defenses) has no --n-seeds: its seed flags' help says what the one seed is.
    one_seed_helps = {"seed": "one base seed (replicates and shadow models derive theirs from it) (default: {})",
                      "seeds": "a one-item list: the base seed, as --seed gives it"}
    app.command(name)(experiment_options(omit=("n_seeds",) if lens.one_seed else (),
                                         helps=one_seed_helps if lens.one_seed else None, **defaults)(command))
