"""The layers of docs/architecture.md hold: no import cycle in src/, lint-imports passes, doc = contracts.

The import graph is built statically (ast), from every ``import`` statement of every module,
including those inside functions and under ``if TYPE_CHECKING:``: a function-level import
still ties the two modules together (it runs on the first call), and a cycle that only
exists through one is still a knot in the design.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from waiting import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# Cycles another change removes (its branch merges later); each entry must still be a cycle,
# so the entry goes as soon as the cycle does. None at present.
PENDING_CYCLES: set[frozenset[str]] = set()


def modules_of(src: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of ``package`` under ``src``: dotted name -> (file, is a package __init__)."""
    found = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return found


def _absolute(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative levels resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports anywhere in its body.

    ``from a import b`` imports module ``a.b`` when it exists, else (a name defined in ``a``) ``a``;
    an import of something below a module (``a.b.name``) counts as an import of ``a.b``.
    """
    mods = modules_of(src, package)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_pkg, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------- the checker itself


def test_cycle_finder_finds_a_planted_cycle(tmp_path):
    """A cycle through a function-level relative import, and a longer one through absolute imports."""
    _write(tmp_path, {
        "toy/__init__.py": "",
        "toy/a.py": "def f():\n    from . import b\n",
        "toy/b.py": "from toy.a import f\n",
        "toy/sub/__init__.py": "from toy.sub.c import X\n",
        "toy/sub/c.py": "from ..d import Y\nX = 1\n",
        "toy/d.py": "import toy.sub\nY = 2\n",
        "toy/leaf.py": "import os\nfrom toy import d\n",
    })
    graph = import_graph(tmp_path, "toy")
    assert graph["toy.a"] == {"toy.b"} and graph["toy.sub.c"] == {"toy.d"} and graph["toy.leaf"] == {"toy.d"}
    found = sorted(cycles(graph), key=len)
    assert found == [{"toy.a", "toy.b"}, {"toy.sub", "toy.sub.c", "toy.d"}]


def test_cycle_finder_accepts_a_layered_package(tmp_path):
    _write(tmp_path, {
        "toy/__init__.py": "",
        "toy/low.py": "X = 1\n",
        "toy/mid.py": "from toy.low import X\n",
        "toy/top/__init__.py": "from toy import mid\n",
        "toy/top/cmd.py": "def main():\n    from toy.top import mid\n    from . import __name__ as n\n",
    })
    assert cycles(import_graph(tmp_path, "toy")) == []


# ---------------------------------------------------------------- bnmem


@functools.lru_cache(maxsize=None)
def src_graph() -> dict[str, set[str]]:
    """bnmem's import graph, parsed once for the tests that read it (none changes it)."""
    return import_graph(SRC, "bnmem")


def test_no_import_cycle_in_src():
    found = {frozenset(c) for c in cycles(src_graph())}
    new = found - PENDING_CYCLES
    assert not new, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in new)
    gone = PENDING_CYCLES - found
    assert not gone, f"no longer cycles, remove them from PENDING_CYCLES: {[sorted(c) for c in gone]}"


def _lint_imports() -> str | None:
    here = Path(sys.executable).parent / "lint-imports"
    return str(here) if here.exists() else shutil.which("lint-imports")


def test_lint_imports_passes():
    exe = _lint_imports()
    if exe is None:
        pytest.skip("lint-imports is not installed (pip install import-linter; `make test` installs it)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _contract_layers() -> list[list[str]]:
    """The layers contract of pyproject.toml, top layer first, each as its module names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    assert layers["containers"] == ["bnmem"] and layers["exhaustive"] is True
    return [[name.strip().strip("()") for name in re.split(r"[|:]", layer)] for layer in layers["layers"]]


def _doc_section(title: str) -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_doc_diagram_is_the_contract():
    """The diagram of docs/architecture.md lists the contract's layers, in its order, with its siblings."""
    section = _doc_section("Layers and data flow")
    diagram = section.split("```")[1].strip("\n").splitlines()
    rows = [line.split("#")[0].strip() for line in diagram if line.strip() and not set(line.strip()) <= set("│▲▼ ")]
    doc_layers = [sorted(n.strip() for n in row.split("·")) for row in rows]
    assert doc_layers == [sorted(layer) for layer in _contract_layers()]


def test_doc_table_covers_every_layer_module():
    """Every module of the contract has a row in the doc's table, and every row is in the contract."""
    section = _doc_section("Layers and data flow")
    cells = re.findall(r"^\| ([^|]+) \|", section, flags=re.M)
    named = {re.sub(r"\.py$", "", n.strip().strip("`/")) for cell in cells[1:] for n in cell.split(",")}
    assert named == {name for layer in _contract_layers() for name in layer}


def test_every_top_level_module_is_in_the_contract():
    """exhaustive = true in pyproject.toml makes lint-imports check this too; this says it without the tool."""
    top = {p.stem if p.is_file() else p.name for p in (SRC / "bnmem").iterdir()
           if (p.suffix == ".py" and p.stem not in ("__init__", "__main__")) or (p / "__init__.py").exists()}
    declared = {name for layer in _contract_layers() for name in layer}
    assert top - declared == set()
    assert declared - top == set()


def test_light_modules_run_without_torch():
    """The configuration, the pure modules and the report import no torch when imported (a fresh process)."""
    code = ("import sys\n"
            "import bnmem.config, bnmem.names, bnmem.frontier, bnmem.attacks, bnmem.stats, bnmem.report.build\n"
            "heavy = sorted(m for m in ('torch', 'torchvision', 'opacus') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _top_level_imports() -> dict[str, set[str]]:
    """Top-level package or module -> the other top-level ones its modules import (measured, ast)."""
    out: dict[str, set[str]] = {}
    for module, deps in src_graph().items():
        parts = module.split(".")
        if len(parts) < 2 or parts[1] == "__main__":
            continue  # the root bnmem/__init__.py and `python -m bnmem` (__main__.py) sit above everything
        out.setdefault(parts[1], set()).update(d.split(".")[1] for d in deps
                                               if len(d.split(".")) > 1 and d.split(".")[1] != parts[1])
    return out


def test_architecture_imports_column_is_the_measured_import_graph():
    """docs/architecture.md's table says, per package or module, exactly which others it imports
    (parenthesised notes aside); an import added or removed in src/ must be written there too."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## Layers and data flow"):text.index("## The lens registry")]
    rows = re.findall(r"^\| `([a-z_]+)(?:\.py|/)` \|.*\| ([^|]*) \|$", section, flags=re.M)
    measured = _top_level_imports()
    assert {name for name, _ in rows} == set(measured)
    for name, column in rows:
        column = re.sub(r"\([^)]*\)", "", column).strip()
        written = set() if column == "—" else {w.strip() for w in column.split(",") if w.strip()}
        assert written == measured[name], (f"{name}: the doc names {sorted(written - measured[name])} it does "
                                           f"not import and misses {sorted(measured[name] - written)}")
