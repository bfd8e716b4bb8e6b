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

# Modules under bnmem.commands that register a command each.
COMMANDS = ["memorize", "gradnorms", "lira", "run", "report", "gamma_sigma", "theory", "mitigate", "audit"]

for _name in COMMANDS:
    importlib.import_module(f"bnmem.cli.commands.{_name}")


def _validation_line(err) -> str:
    """One line from a pydantic ValidationError: 'path: message; ...'."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "config"
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}")
    return "invalid configuration: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns (and exits with) the status code."""
    from pydantic import ValidationError

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
        print(f"bnmem: error: {_validation_line(e)}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("bnmem: interrupted; rerun the same command to resume", file=sys.stderr)
        code = 130
    except PermissionError as e:
        print(f"bnmem: error: permission denied: {e.filename or e}", file=sys.stderr)
        code = 2
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
