"""The tutorial notebook (docs/tutorial.ipynb, built from docs/tutorial.py by tools/tutorial_notebook.py):
its cells are the source's, and it runs end to end in a fresh kernel without an error (nbclient; the docs
extra). Its last cell prints its run time."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("nbclient", reason="the docs extra: pip install -e '.[docs]'")
nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("tutorial_notebook", ROOT / "tools" / "tutorial_notebook.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_notebook_is_built_from_its_source():
    tool = _tool()
    built = tool.build(tool.SOURCE.read_text(encoding="utf-8"))
    assert tool.same_cells(built, nbformat.read(tool.NOTEBOOK, as_version=4)), \
        "docs/tutorial.ipynb differs from docs/tutorial.py: run python tools/tutorial_notebook.py"
    headings = [c.source.splitlines()[0] for c in built.cells if c.cell_type == "markdown"]
    steps = [h for h in headings if h.startswith("## ")]
    assert len(steps) == 6 and sum("**Your question.**" in c.source for c in built.cells) == len(steps)


@pytest.mark.slow
def test_the_notebook_runs_end_to_end(monkeypatch):
    """Every cell executes (a raising cell fails the test with its traceback); the run is timed by its last cell."""
    tool = _tool()
    nb = nbformat.read(tool.NOTEBOOK, as_version=4)
    # The kernel imports this checkout's bnmem, one torch thread (the tutorial's sizes are for one core).
    src = str(ROOT / "src")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    tool.execute(nb, ROOT)
    last = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "tutorial ran in" in last, last
    claim = next(c for c in nb.cells if c.cell_type == "code" and "recomputed" in c.source)
    assert "recomputed:" in "".join(o.get("text", "") for o in claim.outputs)
    print(last.strip(), file=sys.stderr)
