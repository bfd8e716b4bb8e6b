"""Build docs/tutorial.ipynb from its source, docs/tutorial.py (percent format: ``# %%`` code cells,
``# %% [markdown]`` markdown cells whose lines start with ``# ``; the format jupytext reads too).

    python tools/tutorial_notebook.py            # write docs/tutorial.ipynb (no outputs)
    python tools/tutorial_notebook.py --execute  # and run it, keeping the outputs (figures, numbers)
    python tools/tutorial_notebook.py --check    # exit 1 if the notebook's cells differ from the source

Needs nbformat (and nbclient to execute): ``pip install -e '.[docs]'``.
"""

from __future__ import annotations

import argparse
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
