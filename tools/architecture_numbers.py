"""The architecture's size at a git ref: rooms, arrows, wide functions, long modules, source lines.

The numbers issue 50 reports before and after a restructuring, measured one way:

* **rooms**: the top-level modules and packages of ``src/bnmem`` (``__main__`` included, ``__init__`` not), with
  each nested package (``report/claims``, ``cli/commands``, ``lenses/lira``) its own room;
* **arrows**: distinct room → room imports (absolute and relative, a function-level import counted like a
  module-level one), leaving out a nested package's imports of its parent and back;
* **functions with more than 6 parameters** (``self``/``cls`` not counted; ``*args``/``**kwargs`` count one each);
* **modules over 600 lines**, and **source lines** (newlines in every ``.py`` file under ``src/bnmem``).

Run from the repository root (standard library only)::

    python tools/architecture_numbers.py [REF ...]          # default HEAD
    python tools/architecture_numbers.py --wide [REF ...]   # also list the wide functions, one per line

It reads each ref with ``git archive``, so the working tree is not needed. (The issue's own table came from an
unpublished walk; on its refs this gives the same rooms, wide functions, long modules and lines, and 1–3 more
arrows: 0fa4bfb 160 against 159, e949aa7 176 against 173.)
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tarfile
from dataclasses import dataclass

LONG, WIDE = 600, 6


@dataclass
class Numbers:
    rooms: int
    arrows: int
    wide_list: list[tuple[str, str, int]]  # (path, function, parameters) of each function with more than WIDE
    long_modules: list[tuple[str, int]]
    lines: int

    @property
    def wide_functions(self) -> int:
        return len(self.wide_list)

    def text(self, ref: str) -> str:
        longs = ", ".join(f"{p} {n}" for p, n in self.long_modules)
        return (f"{ref}: rooms {self.rooms}, arrows {self.arrows}, functions with more than {WIDE} parameters "
                f"{self.wide_functions}, modules over {LONG} lines {len(self.long_modules)} ({longs}), "
                f"source lines {self.lines:,}")


def sources(ref: str) -> dict[str, str]:
    """Every .py file under src/bnmem at ``ref``, by its path below src/bnmem (SystemExit with one line when
    ``ref`` is not a commit of this repository)."""
    done = subprocess.run(["git", "archive", ref, "src/bnmem"], capture_output=True)
    if done.returncode:
        why = (done.stderr.decode(errors="replace").strip().splitlines() or ["git archive failed"])[-1]
        raise SystemExit(f"architecture_numbers: cannot read src/bnmem at {ref!r}: {why}")
    blob = done.stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
        return {m.name.split("src/bnmem/", 1)[1]: tf.extractfile(m).read().decode("utf-8")
                for m in tf.getmembers() if m.isfile() and m.name.endswith(".py")}


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    first = (a.posonlyargs + a.args)[:1]
    return n - (1 if first and first[0].arg in ("self", "cls") else 0)


def measure(files: dict[str, str]) -> Numbers:
    """The numbers of one tree of sources (path below src/bnmem -> text)."""
    packages = {p.rsplit("/", 1)[0] for p in files if p.endswith("/__init__.py")}

    def room_of(dotted: str) -> str:
        parts = dotted.split(".")
        for k in range(len(parts), 0, -1):
            if "/".join(parts[:k]) in packages:
                return "/".join(parts[:k])
        return parts[0]

    def room(path: str) -> str:
        dotted = path[:-3].replace("/", ".")
        return room_of(dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted)

    rooms = {room(p) for p in files} - {"__init__"}
    arrows: set[tuple[str, str]] = set()
    wide: list[tuple[str, str, int]] = []
    long_modules, lines = [], 0
    for path, text in files.items():
        n = text.count("\n")
        lines += n
        if n > LONG:
            long_modules.append((path, n))
        here = room(path)
        package = path.rsplit("/", 1)[0].split("/") if "/" in path else []
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (k := _params(node)) > WIDE:
                wide.append((path, node.name, k))
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name[len("bnmem."):] for a in node.names if a.name.startswith("bnmem.")]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "bnmem":
                    targets = [a.name for a in node.names]
                elif node.module.startswith("bnmem."):
                    targets = [f"{node.module[len('bnmem.'):]}.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - (node.level - 1)] + ([node.module] if node.module else [])
                targets = [".".join(base + [a.name]) for a in node.names]
            for t in map(room_of, targets):
                nested = t.startswith(here + "/") or here.startswith(t + "/")
                if t in rooms and here in rooms and t != here and not nested:
                    arrows.add((here, t))
    return Numbers(len(rooms), len(arrows), sorted(wide), sorted(long_modules, key=lambda x: -x[1]), lines)


def main(argv: list[str]) -> None:
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return
    listing = "--wide" in argv
    for ref in [a for a in argv if a != "--wide"] or ["HEAD"]:
        numbers = measure(sources(ref))
        print(numbers.text(ref))
        if listing:
            for path, name, n in numbers.wide_list:
                print(f"  {path} {name} {n}")


if __name__ == "__main__":
    main(sys.argv[1:])
