"""The tutorial notebook (docs/tutorial.ipynb, built from docs/tutorial.py by tools/tutorial_notebook.py):
its cells are the source's, and it runs end to end in a fresh kernel without an error (nbclient; the docs
extra). Its last cell prints its run time. The saved outputs are what the code prints today: a fresh execution's
outputs are compared with them (numbers to one unit of their last printed digit, the rest of the text exactly)."""

from __future__ import annotations

import copy
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


def _with_output(nb, cell: int, old: str, new: str):
    """A copy of ``nb`` whose code cell ``cell`` prints ``new`` where it printed ``old``."""
    planted = copy.deepcopy(nb)
    for out in planted.cells[cell].outputs:
        if out.get("output_type") == "stream" and old in out["text"]:
            out["text"] = out["text"].replace(old, new, 1)
            return planted
    raise AssertionError(f"cell {cell} does not print {old!r}")


def test_stale_outputs_are_found_and_run_to_run_noise_is_not():
    """The freshness check on the saved notebook against planted executions: a moved number, a new sentence."""
    tool = _tool()
    saved = nbformat.read(tool.NOTEBOOK, as_version=4)
    assert tool.stale_outputs(saved, saved) == []
    cell, line = next((i, o["text"]) for i, c in enumerate(saved.cells) if c.cell_type == "code"
                      for o in c.outputs if o.get("output_type") == "stream" and "AUC" in o.get("text", ""))
    number = tool.skeleton(line)[1][-1]
    moved = f"{float(number) + 0.02:.{len(number.split('.')[1])}f}"
    diffs = tool.stale_outputs(saved, _with_output(saved, cell, number, moved))
    assert len(diffs) == 1 and diffs[0].startswith(f"cell {cell}: numbers differ") and f"{number} vs {moved}" in diffs[0]
    last_digit = f"{float(number) + 10.0 ** -len(number.split('.')[1]):.{len(number.split('.')[1])}f}"
    assert tool.stale_outputs(saved, _with_output(saved, cell, number, last_digit)) == []  # rounding either way
    sentence = tool.stale_outputs(saved, _with_output(saved, cell, "AUC", "a new sentence. AUC"))
    assert len(sentence) == 1 and "printed text differs" in sentence[0]
    last = len(saved.cells) - 1
    took = tool._DURATION.search(tool.output_text(saved.cells[last])).group()
    assert tool.stale_outputs(saved, _with_output(saved, last, f"{took} s", f"{took}3 s")) == []  # a run time


@pytest.mark.slow
def test_the_notebook_runs_end_to_end(monkeypatch):
    """Every cell executes (a raising cell fails the test with its traceback); the run is timed by its last cell."""
    tool = _tool()
    nb = nbformat.read(tool.NOTEBOOK, as_version=4)
    saved = nbformat.read(tool.NOTEBOOK, as_version=4)
    # The kernel imports this checkout's bnmem, one torch thread (the tutorial's sizes are for one core).
    src = str(ROOT / "src")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    tool.execute(nb, ROOT)
    last = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "tutorial ran in" in last, last
    claim = next(c for c in nb.cells if c.cell_type == "code" and "recomputed" in c.source)
    assert "recomputed:" in "".join(o.get("text", "") for o in claim.outputs)
    stale = tool.stale_outputs(saved, nb)
    assert stale == [], ("docs/tutorial.ipynb's saved outputs are stale (python tools/tutorial_notebook.py --execute):\n"
                         + "\n".join(stale))
    print(last.strip(), file=sys.stderr)
