"""Build docs/tutorial.ipynb from its source, docs/tutorial.py (percent format: ``# %%`` code cells,
``# %% [markdown]`` markdown cells whose lines start with ``# ``; the format jupytext reads too).

    python tools/tutorial_notebook.py            # write docs/tutorial.ipynb (no outputs)
    python tools/tutorial_notebook.py --execute  # and run it, keeping the outputs (figures, numbers)
    python tools/tutorial_notebook.py --check    # exit 1 if the notebook's cells differ from the source

The saved outputs must be what the code prints today: ``tests/test_tutorial.py`` executes the notebook and
compares its outputs with the saved ones (``stale_outputs``): the text with its numbers masked must be identical,
and each number must agree to within one unit of its last printed digit. Run times and temporary paths are
masked, since they change from run to run. After a change that moves a printed number, re-run with --execute.

Needs nbformat (and nbclient to execute): ``pip install -e '.[docs]'``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE, NOTEBOOK = ROOT / "docs" / "tutorial.py", ROOT / "docs" / "tutorial.ipynb"


def cells_of(text: str) -> list[tuple[str, str]]:
    """(kind, source) per cell of a percent-format script: kind is "code" or "markdown"."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# %%"):
            cells.append(("markdown" if "[markdown]" in line else "code", []))
        elif cells:
            kind, lines = cells[-1]
            lines.append((line[2:] if line.startswith("# ") else line[1:] if line.startswith("#") else line)
                         if kind == "markdown" else line)
    return [(kind, "\n".join(lines).strip("\n")) for kind, lines in cells]


def build(text: str):
    """The notebook (nbformat v4, no outputs) of a percent-format script."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
                for kind, src in cells_of(text)]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"  # stable ids: a rebuild changes nothing it need not
    return nb


def execute(nb, cwd: Path, timeout: int = 900):
    """Run every cell in a fresh python3 kernel (raises nbclient's CellExecutionError on the first error)."""
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


_TEMP_PATH = re.compile(r"/tmp/[\w./-]+")
# A number that is a duration ("71 s", "~0.008 s per step", "about 5 s") varies with the machine's load.
_DURATION = re.compile(r"~?\d+(?:\.\d+)?(?= ?(?:s|min)\b)")
_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def output_text(cell) -> str:
    """A code cell's printed outputs as one text: streams and the plain-text form of results and displays."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(parts)


def skeleton(text: str) -> tuple[str, list[str]]:
    """The text with durations and temporary paths masked and every other number replaced by '#', and the numbers."""
    text = _DURATION.sub("<duration>", _TEMP_PATH.sub("<tmp>", text))
    numbers = _NUMBER.findall(text)
    return _NUMBER.sub("#", text), numbers


def _agree(saved: str, fresh: str) -> bool:
    """Two printed numbers agree to within one unit of the coarser one's last printed digit."""
    def value(s: str) -> float:
        return float(s.replace("−", "-"))

    def unit(s: str) -> float:
        mantissa = s.lower().split("e")[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        scale = 10.0 ** int(s.lower().split("e")[1]) if "e" in s.lower() else 1.0
        return 10.0 ** -decimals * scale

    return abs(value(saved) - value(fresh)) <= max(unit(saved), unit(fresh)) * (1 + 1e-9)


def stale_outputs(saved, fresh) -> list[str]:
    """How the saved notebook's outputs differ from a fresh execution's (empty when they agree): one line per cell.

    The text with numbers masked must be identical (a sentence the code now prints and the saved outputs lack is
    a difference), and each number must agree to within one unit of its last printed digit (0.97 against 0.99
    differs; 0.604 against 0.605 agrees: the last digit can round either way between machines).
    """
    diffs = []
    code = [(i, a, b) for i, (a, b) in enumerate(zip(saved.cells, fresh.cells)) if a.cell_type == "code"]
    for i, a, b in code:
        (text_a, nums_a), (text_b, nums_b) = skeleton(output_text(a)), skeleton(output_text(b))
        if text_a != text_b:
            diffs.append(f"cell {i}: the printed text differs (saved {text_a[:200]!r}, fresh {text_b[:200]!r})")
            continue
        bad = [(x, y) for x, y in zip(nums_a, nums_b) if not _agree(x, y)]
        if bad:
            diffs.append(f"cell {i}: numbers differ (saved vs fresh): " + ", ".join(f"{x} vs {y}" for x, y in bad[:8]))
    return diffs


def same_cells(a, b) -> bool:
    return [(c.cell_type, c.source) for c in a.cells] == [(c.cell_type, c.source) for c in b.cells]


def main(argv: list[str] | None = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--execute", action="store_true", help="run the notebook and keep its outputs")
    parser.add_argument("--check", action="store_true", help="only check the notebook's cells match the source")
    args = parser.parse_args(argv)
    nb = build(SOURCE.read_text(encoding="utf-8"))
    if args.check:
        ok = NOTEBOOK.exists() and same_cells(nb, nbformat.read(NOTEBOOK, as_version=4))
        print("docs/tutorial.ipynb matches docs/tutorial.py" if ok else
              "docs/tutorial.ipynb differs from docs/tutorial.py: run python tools/tutorial_notebook.py")
        return 0 if ok else 1
    if args.execute:
        execute(nb, ROOT)
    nbformat.write(nb, NOTEBOOK)
    print(f"wrote {NOTEBOOK.relative_to(ROOT)} ({len(nb.cells)} cells{', executed' if args.execute else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
