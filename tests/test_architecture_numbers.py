"""tools/architecture_numbers.py counts rooms, arrows, wide functions and long modules as its docstring says."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("architecture_numbers", ROOT / "tools" / "architecture_numbers.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


def test_rooms_arrows_wide_functions_and_long_modules_of_a_small_tree():
    tool = _tool()
    files = {
        "__init__.py": "",
        "__main__.py": "from bnmem.cli import main\n",
        "io.py": "import os\n",
        "cli/__init__.py": "from bnmem.report import build\nfrom . import commands\n",
        "cli/commands/__init__.py": "from ..helpers import x\nfrom bnmem import io\n",
        "cli/helpers.py": "def f(self, a, b, c, d, e, g):\n    pass\n\ndef h(a, b, c, d, e, f, *rest):\n    import bnmem.io\n",
        "report/__init__.py": "class C:\n    def m(self, a, b, c, d, e, f):\n        pass\n" + "\n" * 601,
    }
    got = tool.measure(files)
    # rooms: __main__, io, cli, cli/commands (a nested package), report
    assert got.rooms == 5
    # __main__ -> cli, cli -> report, cli/commands -> io, cli -> io; cli -> cli/commands and
    # cli/commands -> cli (relative, nested) are left out
    assert got.arrows == 4
    # h has 7 (its *rest counts); f and C.m have 6 once self is left out
    assert got.wide_functions == 1
    assert [p for p, _ in got.long_modules] == ["report/__init__.py"]
    assert got.lines == sum(t.count("\n") for t in files.values())


def test_no_module_of_the_package_is_over_700_lines():
    """Issue 50's bound: a module past 700 lines holds more than one idea; split it by what it holds."""
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "src" / "bnmem").rglob("*.py")
            if (n := p.read_text(encoding="utf-8").count("\n")) > 700}
    assert not long, f"modules over 700 lines: {long}"


def test_wide_functions_are_listed_with_their_parameter_count():
    got = _tool().measure({"a.py": "def f(a, b, c, d, e, g, h):\n    pass\n\ndef g(self, a):\n    pass\n"})
    assert got.wide_list == [("a.py", "f", 7)]


def test_a_ref_that_is_not_a_commit_is_one_line_and_a_non_zero_exit():
    import subprocess

    done = subprocess.run([sys.executable, str(ROOT / "tools" / "architecture_numbers.py"), "no-such-ref-here"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "cannot read src/bnmem at 'no-such-ref-here'" in done.stderr
