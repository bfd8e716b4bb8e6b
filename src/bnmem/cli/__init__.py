"""The ``bnmem`` command-line program.

User errors (bad flags, missing data, unwritable directories, invalid configs)
end in one line on stderr and exit status 2; an interrupt exits 130 and the
same command resumes the run.
"""

from __future__ import annotations

import importlib
import sys

from bnmem.cli.app import app
from bnmem.errors import BnmemError

# Modules under bnmem.cli.commands that register a hand-written command each (the built-in
# lenses' commands spell out their own flags; run, report and audit are not lenses).
COMMANDS = ["memorize", "gradnorms", "lira", "run", "report", "export", "compare", "gamma_sigma", "theory", "mitigate",
            "audit", "plan", "design"]

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


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns (and exits with) the status code."""
    from pydantic import ValidationError

    from bnmem.config import validation_line

    _add_lens_commands()  # lenses registered since import (plugins, tests) get their command too
    try:
        # Standalone mode: typer reports usage errors itself (exit 2) and raises SystemExit.
        app(args=argv, prog_name="bnmem")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BnmemError as e:
        print(f"bnmem: error: {e}", file=sys.stderr)
        code = 2
    except ValidationError as e:
        print(f"bnmem: error: invalid configuration: {validation_line(e)}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("bnmem: interrupted; rerun the same command to resume", file=sys.stderr)
        code = 130
    except PermissionError as e:
        print(f"bnmem: error: permission denied: {e.filename or e}", file=sys.stderr)
        code = 2
    except OSError as e:
        from bnmem.io import DISK_FULL_ERRNOS, disk_full

        if e.errno not in DISK_FULL_ERRNOS:
            raise
        print(f"bnmem: error: {disk_full(e.filename or '.')}", file=sys.stderr)  # a write outside bnmem.io
        code = 2
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
