"""The ``bnmem`` command-line program.

User errors (bad flags, usage errors, missing data, unwritable directories, invalid configs)
end in one line on stderr and exit status 2; an interrupt exits 130 and the
same command resumes the run.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any, Callable

import typer

from bnmem.cli.app import app
from bnmem.errors import BnmemError

# Modules under bnmem.cli.commands that register a hand-written command each (the built-in
# lenses' commands spell out their own flags; run, report and audit are not lenses).
COMMANDS = ["memorize", "gradnorms", "lira", "run", "report", "export", "compare", "gamma_sigma", "theory",
            "audit", "plan", "design", "verify"]

for _name in COMMANDS:
    importlib.import_module(f"bnmem.cli.commands.{_name}")


def _add_lens_commands() -> None:
    """A generic ``bnmem NAME`` for every lens without a hand-written command: built-in ones (their module
    is imported only when the command runs) and those registered outside bnmem (entry points ``bnmem.lenses``)."""
    from bnmem.cli.commands.lens import add_lens_command
    from bnmem.lenses import registry

    # A command registered without a name takes its function's (typer turns _ into -).
    taken = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
    for name in registry.BUILTIN:
        if name not in taken:
            add_lens_command(name)
            taken.add(name)
    for lens in registry.plugin_lenses():
        if lens.name not in taken:
            add_lens_command(lens.name, lens.title)


_add_lens_commands()


def _build_invoked_lens_command(argv: list[str]) -> None:
    """The full command (own flags, the lens's defaults) of a generic lens command about to run."""
    from bnmem.cli.commands.lens import build_lens_command

    name = next((a for a in argv if not a.startswith("-")), None)  # the root options take no value
    if name is not None:
        build_lens_command(name)


class Interrupted(Exception):
    """Ctrl-C inside a command (typer would turn the KeyboardInterrupt into a silent exit 130)."""


def _interruptible(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with KeyboardInterrupt re-raised as :class:`Interrupted`, which typer lets through to :func:`main`."""

    @functools.wraps(fn)  # typer reads the signature through __wrapped__
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt as e:
            raise Interrupted from e

    wrapper._bnmem_interruptible = True  # type: ignore[attr-defined]
    return wrapper


def _guard_interrupts() -> None:
    for info in app.registered_commands:
        if info.callback is not None and not getattr(info.callback, "_bnmem_interruptible", False):
            info.callback = _interruptible(info.callback)


# click's base class of usage errors: recent typer vendors click (typer._click), older typer uses click's own.
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def usage_line(e: Exception) -> str:
    """A click usage error as bnmem's one error line, naming the command's help."""
    message = " ".join(e.format_message().split())
    ctx = getattr(e, "ctx", None)
    hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
    return f"bnmem: error: {message}{hint}"


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns (and exits with) the status code."""
    _add_lens_commands()  # lenses registered since import (plugins, tests) get their command too
    _build_invoked_lens_command(sys.argv[1:] if argv is None else argv)
    _guard_interrupts()
    code = _run(argv)
    if argv is None:
        sys.exit(code)
    return code


def _run(argv: list[str] | None) -> int:
    """Run the app; every failure becomes one line on stderr and a status (2: user error, 130: interrupt)."""
    from pydantic import ValidationError

    from bnmem.config import validation_line

    try:
        # Not standalone: click's usage errors come here (one line below, not rich's boxes).
        rv = app(args=argv, prog_name="bnmem", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except _CLICK_ERROR as e:
        print(usage_line(e), file=sys.stderr)
        return e.exit_code
    except typer.Abort:
        print("bnmem: aborted", file=sys.stderr)
        return 1
    except BnmemError as e:
        print(f"bnmem: error: {e}", file=sys.stderr)
    except ValidationError as e:
        print(f"bnmem: error: invalid configuration: {validation_line(e)}", file=sys.stderr)
    except (KeyboardInterrupt, Interrupted):
        print("bnmem: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except PermissionError as e:
        print(f"bnmem: error: permission denied: {e.filename or e}", file=sys.stderr)
    except OSError as e:
        from bnmem.io import DISK_FULL_ERRNOS, disk_full

        if e.errno not in DISK_FULL_ERRNOS:
            raise
        print(f"bnmem: error: {disk_full(e.filename or '.')}", file=sys.stderr)  # a write outside bnmem.io
    return 2


if __name__ == "__main__":
    main()
