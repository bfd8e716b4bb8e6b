"""The API reference site: every public name has a docstring and is rendered, and ``mkdocs build --strict`` passes.

Public names: ``bnmem.__all__``, and the ``__all__`` of ``bnmem.results``, ``bnmem.power`` and ``bnmem.attacks``.
Docstrings are read as the site reads them (griffe, from the source: an attribute's docstring is the string
literal after its assignment); "rendered" means the built ``api/index.html`` holds the name's anchor. A planted
removal of one docstring fails both checks. Needs the docs extra (``pip install -e '.[docs]'``; ``make test``
installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
griffe = pytest.importorskip("griffe")

ROOT = Path(__file__).resolve().parents[1]


def reference_paths() -> dict[str, str]:
    """Public name (as imported) -> the dotted path the reference renders it under."""
    import bnmem
    import bnmem.attacks
    import bnmem.power
    import bnmem.results

    out = {}
    for name in bnmem.__all__:
        if name == "__version__":
            continue  # a string: api.md names it in its text (checked below)
        obj = getattr(bnmem, name)
        out[f"bnmem.{name}"] = "bnmem.audit" if name == "audit" else f"{obj.__module__}.{obj.__qualname__}"
    out.update({f"bnmem.results.{n}": f"bnmem.results.{n}" for n in bnmem.results.__all__})
    out.update({f"bnmem.power.{n}": f"bnmem.power.{n}" for n in bnmem.power.__all__})
    out.update({f"bnmem.attacks.{n}": f"bnmem.attacks.{mod}.{attr}"
                for n, (mod, attr) in bnmem.attacks._WHERE.items()})
    return out


def undocumented(paths: dict[str, str], src: Path = ROOT / "src") -> list[str]:
    """The public names whose object (read by griffe from ``src``) has no docstring."""
    package = griffe.load("bnmem", search_paths=[str(src)], resolve_aliases=True, resolve_external=False)
    bad = []
    for public, path in paths.items():
        obj = package[path.removeprefix("bnmem.")]
        obj = obj.final_target if getattr(obj, "is_alias", False) else obj
        if obj.docstring is None or not obj.docstring.value.strip():
            bad.append(public)
    return bad


def build_site(out: Path, src: Path = ROOT / "src", docs: Path = ROOT / "docs") -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of this repository's mkdocs.yml into ``out``, the API read from ``src``."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = config.replace("paths: [src]", f"paths: [{src}]").replace("docs_dir: docs", f"docs_dir: {docs}")
    config = config.replace("  - tools/mkdocs_hooks.py", f"  - {ROOT / 'tools' / 'mkdocs_hooks.py'}")
    cfg = out.parent / "mkdocs.yml"
    cfg.write_text(config, encoding="utf-8")
    # No -q: it drops the warnings before strict mode counts them, so a warning would not fail the build.
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(cfg), "-d", str(out)],
                          capture_output=True, text=True, timeout=600, env={"NO_MKDOCS_2_WARNING": "1",
                                                                           "PATH": "/usr/bin:/bin"})


def unrendered(paths: dict[str, str], site: Path) -> list[str]:
    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    return [public for public, path in paths.items() if f'id="{path}"' not in page]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    proc = build_site(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_every_public_name_has_a_docstring():
    paths = reference_paths()
    assert len(paths) >= 60 and undocumented(paths) == []


@pytest.mark.slow
def test_the_site_builds_strictly_and_renders_every_public_name(site):
    assert unrendered(reference_paths(), site) == []
    assert "bnmem.__version__" in (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    pages = sorted(p.parent.name for p in site.glob("*/index.html"))
    # a folder's README.md is its page (gpu/README.md -> gpu/index.html)
    nav = re.findall(r"^  - [^:]+: ([\w-]+)(?:/README)?\.md$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"),
                     flags=re.M)
    assert set(pages) == {n for n in nav if n != "index"}  # every page of docs/ in the navigation, and only those
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "Audit your own model in five minutes" in home and 'href="attacks/' in home  # the README, links fixed


@pytest.mark.slow
def test_a_removed_docstring_fails_both_checks(tmp_path):
    """bnmem.power.units_needed without its docstring: reported undocumented, and missing from the site."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "bnmem", src / "bnmem", ignore=shutil.ignore_patterns("__pycache__"))
    power = src / "bnmem" / "power.py"
    text = power.read_text(encoding="utf-8")
    head, body = text.split("def units_needed(", 1)
    sig, rest = body.split('    """', 1)
    power.write_text(head + "def units_needed(" + sig + rest.split('"""', 1)[1].lstrip("\n"), encoding="utf-8")
    paths = reference_paths()
    assert undocumented(paths, src) == ["bnmem.power.units_needed"]
    proc = build_site(tmp_path / "site", src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert unrendered(paths, tmp_path / "site") == ["bnmem.power.units_needed"]


@pytest.mark.slow
def test_a_warning_fails_the_build(tmp_path):
    """A dead link planted in a copy of docs/ is a warning, and the strict build exits non-zero on it."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "theory.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [the missing page](no-such-page.md).\n", encoding="utf-8")
    proc = build_site(tmp_path / "site", docs=docs)
    assert proc.returncode != 0 and "no-such-page.md" in proc.stdout + proc.stderr
