"""What the docs say a run writes, checked against what the code declares: file names and table columns.

* **File names.** Every file name with a run-output extension that README.md or docs/*.md names in a code span
  or a code block must be one the code names: a string literal of the package (module constants such as
  ``bnmem.names.SUMMARY_CSV``, the lens specs' ``results=``/``figure=``, the ``out / "keep.npy"`` of a writer;
  docstrings excluded) or a name derived from one by the code's own function (``bnmem.attacks.phi.lo_path``).
  The few names that are not a run's (a user's ``model.pt``, the README's toy lens) are listed with a reason.
* **Columns.** summary.csv's columns are ``bnmem.report.summary.CSV_COLUMNS``, the tidy table's
  ``bnmem.report.tidy.COLUMNS``; each place the docs list them (the README's summary.csv item, docs/results.md's
  tables) and each ``df.X`` / ``df["X"]`` a doc's Python reads must agree.

A problem is reported as ``DOC:LINE: what``, so a renamed file or column names the line to fix.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterable, Iterator

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "bnmem"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

OUTPUT_EXT = ("json", "npy", "npz", "png", "csv", "html", "md", "txt", "parquet", "pt")
FILE_NAME = re.compile(r"(?<![\w.-])([A-Za-z_][\w-]*\.(?:%s))(?![\w-])" % "|".join(OUTPUT_EXT))

# Names the docs use that no run writes, with why.
NOT_RUN_FILES = {
    "model.pt": "the user's model (torch.save)",
    "MODEL.pt": "the user's model, as a placeholder",
    "known_bad.csv": "the user's list of mislabeled files",
    "label_count.json": "the README's toy lens (tests/test_extending.py runs it)",
}


def doc_lines(paths: Iterable[Path] = DOCS) -> Iterator[tuple[str, str, bool]]:
    """(``doc:line``, line, in a code block) for every line of the docs."""
    for path in paths:
        fenced = False
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip().startswith("```"):
                fenced = not fenced
                continue
            yield f"{path.relative_to(ROOT)}:{no}", line, fenced or line.startswith("    ")


def code_text(line: str, in_block: bool) -> list[str]:
    """The code of a doc line: the whole line in a code block, else its code spans."""
    return [line] if in_block else re.findall(r"`([^`]+)`", line)


# A name given to an option (`--out r.parquet`, `--json rb.json`) is the user's choice, not the code's.
CHOSEN = re.compile(r"--[a-z][\w-]*[ =]\S*?([\w-]+\.\w+)\b")


def mentioned_files(paths: Iterable[Path] = DOCS) -> list[tuple[str, str]]:
    """(``doc:line``, file name) for each run-output-like file name in the docs' code (not one chosen with an
    option)."""
    out = []
    for where, line, block in doc_lines(paths):
        for code in code_text(line, block):
            chosen = set(CHOSEN.findall(code))
            out += [(where, name) for name in FILE_NAME.findall(code) if name not in chosen]
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def declared_files(sources: dict[str, str] | None = None) -> dict[str, str]:
    """File name -> where the package names it (``module:line``): every string literal of the source that is a
    file name with a run-output extension, docstrings excluded; plus ``lo_path`` of the φ files.

    ``sources``: path -> text (default: every .py under src/bnmem), so a test can plant a rename.
    """
    if sources is None:
        sources = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(SRC.rglob("*.py"))}
    whole = re.compile(r"[\w-]+\.(?:%s)" % "|".join(OUTPUT_EXT))
    found: dict[str, str] = {}
    for path, text in sources.items():
        tree = ast.parse(text)
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                if whole.fullmatch(node.value):
                    found.setdefault(node.value, f"{path}:{node.lineno}")
    from bnmem.attacks.phi import lo_path

    for name in ("phi.npy", "population_phi.npy"):  # their float32 residuals, named by the code's function
        if name in found:
            found.setdefault(lo_path(name).name, f"{found[name]} (bnmem.attacks.phi.lo_path)")
    return found


def undeclared_file_mentions(declared: dict[str, str], paths: Iterable[Path] = DOCS) -> list[str]:
    """``doc:line: NAME`` for each file name the docs give that the code does not (nor a repository file)."""
    bad = []
    for where, name in mentioned_files(paths):
        if name in declared or name in NOT_RUN_FILES:
            continue
        if any(p.name == name for p in (ROOT / "docs").rglob("*")) or any((ROOT / "tests" / "data").glob(name)):
            continue  # a file of the repository (docs/analysis-plan.md, tests/data/...)
        if name.endswith((".md", ".txt")) and any(ROOT.glob(f"*/{name}")) or (ROOT / name).exists():
            continue
        bad.append(f"{where}: {name} is not a file name the code writes or reads")
    return bad


# --- columns ----------------------------------------------------------------------------------------------------

def _listed_names(text: str) -> list[str]:
    """Column-like names in the code spans of ``text`` (comma lists split)."""
    return [n.strip() for span in re.findall(r"`([^`]*)`", text) for n in span.split(",")
            if re.fullmatch(r"[a-z_0-9]+", n.strip())]


def summary_csv_item(readme: Path = ROOT / "README.md") -> list[tuple[str, str]]:
    """(``README.md:line``, name) for each column the README's ``summary.csv`` list item names (its code spans
    may run over several lines)."""
    item: list[tuple[str, str]] = []
    for where, line, _ in doc_lines([readme]):
        if line.startswith("- `summary.csv`:"):
            item.append((where, line.split(":", 1)[1]))
        elif item and (line.startswith("- ") or not line.strip()):
            break
        elif item:
            item.append((where, line))
    text = "\n".join(line for _, line in item)
    out = []
    for span in re.finditer(r"`([^`]*)`", text):
        for m in re.finditer(r"[^,]+", span.group(1)):
            name = m.group(0).strip()
            if re.fullmatch(r"[a-z_0-9]+", name):
                out.append((item[text.count("\n", 0, span.start(1) + m.start())][0], name))
    return out


def column_table(doc: Path, heading: str) -> list[tuple[str, str]]:
    """(``doc:line``, column) for each row of the first markdown table after ``heading`` whose first cell is
    a code span."""
    out, seen, started = [], False, False
    for where, line, _ in doc_lines([doc]):
        if line.startswith("#"):
            if seen and started:
                break
            seen = seen or heading in line
            continue
        if seen:
            m = re.match(r"^\| `([a-z_0-9.]+)` \|", line)
            if m:
                out.append((where, m.group(1)))
                started = True
            elif started and not line.startswith("|"):
                break
    return out


def column_problems(listed: list[tuple[str, str]], declared: Iterable[str], what: str,
                    complete: bool = True) -> list[str]:
    """``doc:line: ...`` for each listed column the code does not declare, and (``complete``) each declared
    column the list lacks (reported at the list's first line)."""
    declared = list(declared)
    bad = [f"{where}: {name} is not a column of {what}" for where, name in listed if name not in declared]
    if complete and listed:
        names = {n for _, n in listed}
        bad += [f"{listed[0][0]}: {what}'s column {c} is not listed" for c in declared if c not in names]
    return bad


def dataframe_columns_read(paths: Iterable[Path] = DOCS) -> list[tuple[str, str]]:
    """(``doc:line``, column) for each ``df.X`` / ``df["X"]`` / ``groupby([...])`` name in the docs' code,
    where ``df`` is the tidy table (a doc's ``df = bnmem.results.load(...)`` or the like)."""
    methods = {"groupby", "unstack", "mean", "loc", "iloc", "query", "columns", "shape", "head", "pivot_table",
               "to_csv", "merge", "value_counts", "sum", "std", "dropna", "reset_index", "sort_values", "apply",
               "copy", "assign", "plot", "describe", "nunique", "unique", "isin", "agg", "size"}
    out = []
    for where, line, block in doc_lines(paths):
        if not block:
            continue
        for m in re.finditer(r"\b(?:df|mem|lira|rows)\.([a-z_]+)\b", line):
            if m.group(1) not in methods:
                out.append((where, m.group(1)))
        for m in re.finditer(r"\b(?:df|mem|lira|rows)\[\"([a-z_]+)\"\]", line):
            out.append((where, m.group(1)))
        for m in re.finditer(r"groupby\(\[([^\]]*)\]", line):
            out += [(where, n) for n in re.findall(r"\"([a-z_]+)\"", m.group(1))]
    return out
