"""docs/architecture.md's recipes ("Where each kind of change goes") list exactly the files an addition touches.

Each of the rows for a lens, an attack, a dataset and a claim rule ends with its file list ("Files (variant):
`a`, `b`; optional: `c`."). The lists are checked against the code, not against a second copy of them:

* every file named (placeholders aside: ``NAME``, ``claimN``) exists;
* every file holding a *name table* of that kind (a dict literal, or a run of ``LensSpec``/``AttackSpec``
  declarations, whose keys cover every built-in name of the kind: what a new name must be added to) is listed,
  so a new name table anywhere fails here until the recipe names it;
* every other file listed holds what the recipe says it does (the registry, the loader, the rule list);
* a plugin lens or attack touches only its own module and test: the toy lens and view of
  tests/test_report_views.py and the toy attack of tests/test_attack_spec.py are declared in those test
  modules alone.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from bnmem import names
from bnmem.analysis_plan import PLAN
from bnmem.attacks import spec as attack_spec

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "bnmem"
PLACEHOLDER = re.compile(r"NAME|claimN")

# What a listed file that is not a name table must define (a module-level name), i.e. why it is touched.
HOLDS = {
    "data/sources.py": "load_source",  # the dataset's loader goes in its dispatch
    "report/views.py": "LensView",  # a built-in lens's dedicated view
}
# A listed test module: where the tests of that kind of addition live (it exercises this entry point).
TESTS_OF = {"tests/test_data.py": "load_source"}
GENERATED = {"docs/analysis-plan.md"}  # `bnmem plan` writes it; tests/test_preregistration.py checks its hash


def recipes() -> dict[str, dict[str, tuple[list[str], list[str]]]]:
    """Row ('a new lens', ...) -> variant ('' / 'plugin' / 'built-in') -> (files, optional files)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("## Where each kind of change goes"):]
    out: dict[str, dict[str, tuple[list[str], list[str]]]] = {}
    for row in re.findall(r"^\| (a [^|]+?) \| (.+) \|$", table, re.M):
        for variant, files, optional in re.findall(r"Files(?: \(([^)]+)\))?: (.*?)(?:; optional: (.*?))?\.(?: |$)",
                                                   row[1]):
            out.setdefault(row[0], {})[variant] = (re.findall(r"`([^`]+)`", files),
                                                   re.findall(r"`([^`]+)`", optional))
    return out


def path_of(name: str) -> Path:
    return ROOT / name if name.split("/")[0] in ("tests", "docs") else SRC / name


def _key(node: ast.AST) -> str | None:
    """A dict key or first argument as a name: a string literal, or a constant of bnmem.names."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    value = getattr(names, ident, None) if ident else None
    return value if isinstance(value, str) else None


@functools.lru_cache(maxsize=None)
def _key_groups() -> tuple[tuple[str, tuple[frozenset[str], ...]], ...]:
    """Per source and test file (as the recipes write them): the key sets of its dict literals and the names
    its ``LensSpec``/``AttackSpec`` calls declare. Parsed once: every recipe row reads the same files."""
    out = []
    for path in sorted([*SRC.rglob("*.py"), *(ROOT / "tests").glob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        groups = [{k for k in map(_key, n.keys) if k} for n in ast.walk(tree) if isinstance(n, ast.Dict)]
        declared: set[str] = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and n.args and getattr(n.func, "id", None) in ("LensSpec", "AttackSpec"):
                declared.add(_key(n.args[0]) or "")
        rel = path.relative_to(SRC if SRC in path.parents else ROOT).as_posix()
        out.append((rel, tuple(frozenset(g) for g in [*groups, declared])))
    return tuple(out)


def name_tables(kind_names: set[str]) -> set[str]:
    """Files (as the recipes write them) holding a table keyed by every name in ``kind_names``."""
    return {rel for rel, groups in _key_groups() if any(kind_names <= g for g in groups)}


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name:
            return True
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


KINDS = {"a new lens": set(names.BUILTIN_LENSES), "a new attack": set(attack_spec.available()),
         "a new dataset": set(names.DATASETS), "a claim rule": set(PLAN)}
# Kinds declared in one module each and found by a registry: no name table of them may exist anywhere.
REGISTRY_ONLY = {"a claim rule"}


def test_the_four_recipes_have_file_lists():
    got = recipes()
    assert set(KINDS) <= set(got), sorted(got)
    assert set(got["a new lens"]) == set(got["a new attack"]) == {"plugin", "built-in"}
    assert set(got["a new dataset"]) == set(got["a claim rule"]) == {""}


@pytest.mark.parametrize("row", sorted(KINDS))
def test_a_recipe_lists_every_name_table_of_its_kind_and_only_files_with_a_reason(row):
    variants = recipes()[row]
    files, optional = variants.get("built-in", variants.get(""))
    listed = [*files, *optional]
    tables = name_tables(KINDS[row])
    if row in REGISTRY_ONLY:
        assert not tables, f"{row}: a name table keyed by every id is back: {sorted(tables)}"
        assert all(PLACEHOLDER.search(n) or n in GENERATED for n in listed), listed
        assert len(listed) <= 3, f"{row}: more than its module, its test and the generated docs: {listed}"
        return
    assert tables, f"no name table of {row!r} found: the detector is broken"
    assert tables <= set(listed), f"{row}: name tables not in its recipe: {sorted(tables - set(listed))}"
    for name in listed:
        if PLACEHOLDER.search(name):
            continue  # the new module or test itself
        assert path_of(name).is_file(), f"{row}: {name} does not exist"
        if name in tables or name in GENERATED:
            continue
        if name in TESTS_OF:
            assert TESTS_OF[name] in path_of(name).read_text(encoding="utf-8"), f"{row}: {name} tests something else"
            continue
        assert name in HOLDS and _defines(path_of(name), HOLDS[name]), f"{row}: why is {name} touched?"


@pytest.mark.parametrize("row, toy_test, registers", [
    ("a new lens", "tests/test_report_views.py", ("registry.register(", "LensView(", "LensSpec(")),
    ("a new attack", "tests/test_attack_spec.py", ("attack_spec.register(", "AttackSpec(")),
])
def test_a_plugin_touches_only_its_module_and_test(row, toy_test, registers):
    """The plugin recipe lists placeholders only; its toy test declares everything in its own module."""
    files, optional = recipes()[row]["plugin"]
    assert files == ["NAME.py", "tests/test_NAME.py"] and optional == []
    text = path_of(toy_test).read_text(encoding="utf-8")
    assert all(r in text for r in registers)
