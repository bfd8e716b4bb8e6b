"""The deciding table: every number the claim rules read, per claim, setting, replicate, arm and definition.

``bnmem report`` evaluates the claims on a run whose results files are *traced*: each lens's results, config and
environment is handed to the rule modules (:data:`bnmem.report.claims.RULES`) as a dict that notes every key it
is asked for, iterated over or tested for. A number or a string is noted when it is read; a list (a curve, an
array, a table of layers) is noted whole the first time anything looks at it (an item, its length, numpy's
conversion), so a list handed on and never looked at is not. What was noted is written as ``deciding.csv.gz``
(:data:`DECIDING_CSV`), one row per number (:data:`COLUMNS`, described in docs/verify.md). Nothing the rules did not read is
written, and everything they read is: :func:`rebuild` turns the table back into a run (:class:`RunData`) whose
results hold exactly those numbers, and the same rule modules, given it, read the same numbers in the same order
and so reach the same verdicts (the rules are pure functions of what they read). A key that was only iterated
over or tested for, never read, is written with an empty ``value`` and ``text`` ``null``: present, its value
never looked at.

The cell's conditions (what groups replicates into settings) are written whole, as rows of file
``conditions``; every lens a cell holds has a row (path ``[]``), so the rebuilt run has the same cells, lenses
and settings in the same order.

The table is tidy: ``claim`` (the ids of the claims that read the number, space-separated: a number read by
claims 4 and 7 is one row, ``4 7``; a rule module deciding two rows, 3a and 3b, is traced as one),
``setting`` and ``replicate`` (the report's setting label and replicate index), ``cell``, ``lens``, ``file``
(``data``: the lens's results file; ``config``; ``environment``; ``conditions``: the cell's), ``arm`` (the norm a
number belongs to, the first norm name on its path), ``definition`` (the first path key after it naming a gradient
definition, an attack, a BN mode or a subset), ``estimand`` (the last named key of the path: the statistic),
``path`` (the JSON list of keys from the file's top to the number) and the number itself: ``value`` (a JSON
number, exactly as read: ``NaN`` and ``Infinity`` included) or ``text`` (any other JSON value; a list of numbers,
a curve or an array read whole, is one row).
"""

from __future__ import annotations

import csv
import gzip
import io as _io
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Iterator

from bnmem.errors import BnmemError
from bnmem.names import NORMS
from bnmem.report.results import replicate_of
from bnmem.report.rundata import CellOutput, LensOutput, RunData

# The deciding table as plain CSV (what DecidingTable.write writes to a name without .gz; verify reads either).
DECIDING_TABLE = "deciding.csv"
DECIDING_CSV = DECIDING_TABLE + ".gz"
"""The deciding table's file in a run directory: CSV, gzip-compressed (a decisive-sized study's table is a few MB
of text, most of it full-precision per-step arrays; compressed it stays under 2 MB). ``pandas.read_csv`` reads it
as it is; the bytes are reproducible (no time stamp in the gzip header)."""
COLUMNS = ("claim", "setting", "replicate", "cell", "lens", "file", "arm", "definition", "estimand", "path",
           "value", "text")
"""The deciding table's columns, in order (docs/verify.md describes each)."""
# The cell of a once-per-study lens (theory and the other study-wide lenses).
STUDYWIDE = "-"
CONDITIONS = "conditions"
FILES = ("data", "config", "environment")
# Path keys that name a definition of the measured number (the `definition` column): gradient definitions, BN
# modes at query, the attacks and the subsets a number is measured on.
DEFINITION_KEYS = frozenset({
    "eval", "batch", "train", "running", "batch_mode", "lira", "rmia", "loss", "offline", "online", "global",
    "noisy", "ood", "clean", "corrupted", "all", "outliers", "flipped",
})

Path_ = tuple[Any, ...]


class _Notes:
    """What the rules read from one file: per path, the claims that noted it whole, listed its keys, or touched it."""

    def __init__(self) -> None:
        self.whole: dict[Path_, set[str]] = {}
        self.keys: dict[Path_, set[str]] = {}
        self.touched: dict[Path_, set[str]] = {}


class _Tracer:
    """The notes of every traced file and the claims being evaluated now."""

    def __init__(self) -> None:
        self.claims: tuple[str, ...] = ()
        self.files: dict[tuple[str, str, str], _Notes] = {}

    def notes(self, source: tuple[str, str, str]) -> _Notes:
        return self.files.setdefault(source, _Notes())

    def mark(self, table: dict[Path_, set[str]], path: Path_) -> None:
        table.setdefault(path, set()).update(self.claims)


class _Traced(dict):
    """A results dict that notes what is read from it (see the module docstring); otherwise a plain dict."""

    def __init__(self, src: dict, tracer: _Tracer, notes: _Notes, path: Path_) -> None:
        super().__init__(src)
        self._tracer, self._notes, self._path, self._kids = tracer, notes, path, {}

    def _child(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        path = self._path + (key,)
        if isinstance(value, dict):
            self._tracer.mark(self._notes.touched, path)
            if key not in self._kids:
                self._kids[key] = _Traced(value, self._tracer, self._notes, path)
            return self._kids[key]
        if isinstance(value, list):
            if key not in self._kids:
                self._kids[key] = _TracedList(value, self._tracer, self._notes, path)
            return self._kids[key]
        self._tracer.mark(self._notes.whole, path)
        return value

    def _listed(self) -> None:
        self._tracer.mark(self._notes.keys, self._path)

    def __getitem__(self, key: Any) -> Any:
        return self._child(key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self._child(key) if dict.__contains__(self, key) else default

    def __contains__(self, key: Any) -> bool:
        found = dict.__contains__(self, key)
        if found:
            self._tracer.mark(self._notes.touched, self._path + (key,))
        return found

    def __iter__(self) -> Iterator[Any]:
        self._listed()
        return iter(list(dict.keys(self)))

    def keys(self):  # type: ignore[override]
        self._listed()
        return dict.keys(self)

    def __len__(self) -> int:
        self._listed()
        return dict.__len__(self)

    def values(self):  # type: ignore[override]
        self._listed()
        return [self._child(k) for k in dict.keys(self)]

    def items(self):  # type: ignore[override]
        self._listed()
        return [(k, self._child(k)) for k in dict.keys(self)]

    def copy(self) -> dict:
        return dict(self)


def _noting(name: str):
    def method(self, *args, **kwargs):
        self._tracer.mark(self._notes.whole, self._path)
        return getattr(list, name)(self, *args, **kwargs)
    method.__name__ = name
    return method


class _TracedList(list):
    """A list in a results dict (a curve, an array, a table of rows): noted whole the first time anything looks at
    it (an item, its length, iteration, numpy's conversion, a comparison); a list handed on unread is not noted."""

    def __init__(self, src: list, tracer: _Tracer, notes: _Notes, path: Path_) -> None:
        super().__init__(src)
        self._tracer, self._notes, self._path = tracer, notes, path

    for _name in ("__getitem__", "__iter__", "__len__", "__contains__", "__reversed__", "__eq__", "__ne__",
                  "__lt__", "__le__", "__gt__", "__ge__", "__add__", "__mul__", "__rmul__", "__repr__", "index",
                  "count", "copy"):
        locals()[_name] = _noting(_name)
    del _name

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        import numpy as np

        self._tracer.mark(self._notes.whole, self._path)
        return np.array(list(list.__iter__(self)), dtype=dtype)

    __hash__ = None  # type: ignore[assignment]


# ----------------------------------------------------------------- tracing the rules


def _source(cell: CellOutput | None, lens: LensOutput) -> tuple[str, str]:
    return (STUDYWIDE if cell is None else cell.id, lens.kind)


def _traced_run(run: RunData, tracer: _Tracer) -> RunData:
    """A copy of ``run`` whose lenses' files note what the rules read."""

    def lens_copy(cell: CellOutput | None, lens: LensOutput) -> LensOutput:
        cid, kind = _source(cell, lens)
        files = {}
        for name in FILES:
            doc = getattr(lens, name)
            files[name] = None if doc is None else _Traced(doc, tracer, tracer.notes((cid, kind, name)), ())
        return LensOutput(lens.kind, lens.path, files["data"], files["config"], files["environment"], lens.figures)

    cells = []
    for c in run.cells:
        copy = CellOutput(c.id, c.conditions)
        copy.lenses = {k: lens_copy(c, v) for k, v in c.lenses.items()}
        cells.append(copy)
    theory = None if run.theory is None else lens_copy(None, run.theory)
    studywide = {k: lens_copy(None, v) for k, v in run.studywide.items()}
    return RunData(run.root, run.layout, run.study, cells, theory, run.environment, run.problems, studywide)


def evaluate_traced(run: RunData, rules: Iterable[ModuleType] | None = None) -> tuple[list[Any], "DecidingTable"]:
    """Every claim, decided exactly as :func:`bnmem.report.claims.evaluate_claims` decides it, and the deciding
    table of the numbers the rules read to decide it."""
    from bnmem.report.claims import RULES, evaluate_rule
    from bnmem.report.summary import claim_rows

    tracer = _Tracer()
    traced = _traced_run(run, tracer)
    claims = []
    for module in (RULES if rules is None else rules):
        tracer.claims = tuple(p.id for p in module.CLAIMS)
        decided = evaluate_rule(module, traced)
        claim_rows(decided, "", "-")  # what a row shows (its conditions, say) may be read only when it is written
        claims += decided
    tracer.claims = ()
    return claims, DecidingTable(_rows(run, tracer))


# ----------------------------------------------------------------- the rows


def _encode(v: Any) -> tuple[str, str]:
    """(value, text) of one JSON leaf: numbers in ``value``, anything else as JSON in ``text``."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return json.dumps(v), ""
    return "", json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def _numbers(v: Any) -> bool:
    """Whether ``v`` is a list (of lists) of numbers or nulls only: one row holds it, as a JSON array."""
    return isinstance(v, list) and all(
        _numbers(x) if isinstance(x, list) else x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))
        for x in v)


def _flat(v: Any, path: Path_) -> Iterator[tuple[Path_, Any]]:
    """Every leaf of ``v``: a number, a string, a null, an empty dict, or a list of numbers (a curve, an array)."""
    if isinstance(v, dict) and v:
        for k, x in v.items():
            yield from _flat(x, path + (k,))
    elif isinstance(v, list) and v and not _numbers(v):
        for i, x in enumerate(v):
            yield from _flat(x, path + (i,))
    else:
        yield path, v


def _below(table: dict[Path_, set[str]], path: Path_) -> set[str]:
    """The claims of every note at or below ``path``."""
    n = len(path)
    return set().union(*(c for p, c in table.items() if p[:n] == path)) if table else set()


def _prefixes(notes: _Notes) -> set[Path_]:
    """Every path at or above a note: the dicts something below was read from."""
    out: set[Path_] = set()
    for table in (notes.whole, notes.keys, notes.touched):
        for p in table:
            out.update(p[:i] for i in range(len(p) + 1))
    return out


def _walk(doc: Any, notes: _Notes, above: set[Path_], path: Path_ = ()) -> Iterator[tuple[Path_, Any, set[str]]]:
    """(path, leaf, claims) of what the notes say was read of ``doc``, in the file's own order: a value read whole
    is every leaf of it; a dict whose keys were listed has every key (unread ones as None); a dict nothing was
    read from is an empty dict."""
    whole = notes.whole.get(path)
    if whole is not None or not isinstance(doc, dict):
        for p, v in _flat(doc, path):
            yield p, v, whole or set()
        return
    listed = notes.keys.get(path)
    keys = list(doc) if listed is not None else [k for k in doc if path + (k,) in above]
    if not keys:
        yield path, {}, (listed or set()) | notes.touched.get(path, set())
        return
    for k in keys:
        p = path + (k,)
        if p in above:
            yield from _walk(doc[k], notes, above, p)
        else:  # listed, never read: present, with any value
            yield p, None, listed or set()


@dataclass
class DecidingTable:
    """The deciding table's rows (dicts keyed by :data:`COLUMNS`, every value text)."""

    rows: list[dict[str, str]] = field(default_factory=list)

    def csv_text(self) -> str:
        buf = _io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
        w.writeheader()
        w.writerows(self.rows)
        return buf.getvalue()

    def write(self, path: str | Path) -> Path:
        """Write the table atomically: gzip-compressed CSV when ``path`` ends in ``.gz``, else plain CSV."""
        from bnmem import io

        path = Path(path)
        data = self.csv_text().encode("utf-8")
        io.write_bytes(path, gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
        return path


def _labels(run: RunData) -> dict[str, str]:
    """Cell id -> its setting's label (the tidy export's labels)."""
    from bnmem.report.tidy import setting_labels

    return setting_labels(run)


def _columns(path: Path_) -> tuple[str, str, str]:
    """(arm, definition, estimand) of a path: the first key naming a norm (or a variant of one, ``batch+gs1``); the
    first key after it (before the last) naming a definition; the last named key."""
    named = [k for k in path if isinstance(k, str)]
    at = next((i for i, k in enumerate(named) if k.split("+")[0] in NORMS), None)
    arm = "" if at is None else named[at]
    inner = named[(0 if at is None else at + 1):-1]
    definition = next((k for k in inner if k in DEFINITION_KEYS), "")
    return arm, definition, (named[-1] if named else "")


def _claim_order(cid: str) -> tuple[int, str]:
    digits = "".join(ch for ch in cid if ch.isdigit())
    return (int(digits) if digits else 0, cid)


def _rows(run: RunData, tracer: _Tracer) -> list[dict[str, str]]:
    labels = _labels(run)
    rows: list[dict[str, str]] = []

    def add(claim: str, cell: CellOutput | None, kind: str, file: str, path: Path_, leaf: Any) -> None:
        value, text = _encode(leaf)
        arm, definition, estimand = _columns(path)
        if file == CONDITIONS:
            arm, definition = "", ""  # a condition is the cell's, not one arm's
        rows.append({"claim": claim, "setting": "" if cell is None else labels.get(cell.id, ""),
                     "replicate": "" if cell is None else str(replicate_of(cell)),
                     "cell": STUDYWIDE if cell is None else cell.id, "lens": kind, "file": file, "arm": arm,
                     "definition": definition, "estimand": estimand, "path": json.dumps(list(path)),
                     "value": value, "text": text})

    lensed: list[tuple[CellOutput | None, LensOutput]] = [(c, lens) for c in run.cells for lens in c.lenses.values()]
    lensed += [(None, lens) for lens in ([run.theory] if run.theory else []) + list(run.studywide.values())]
    for cell in run.cells:
        for p, v in _flat(dict(cell.conditions), ()):
            add("", cell, "", CONDITIONS, p, v)
    for cell, lens in lensed:
        cid, kind = _source(cell, lens)
        add("", cell, kind, "data", (), {})  # the lens is there, whatever the rules read of it
        for name in FILES:
            doc = getattr(lens, name)
            notes = tracer.files.get((cid, kind, name))
            if doc is None or notes is None:
                continue
            for p, v, claims in _walk(doc, notes, _prefixes(notes)):
                if not p and v == {}:
                    continue  # the lens's own row says it is there
                add(" ".join(sorted(claims, key=_claim_order)), cell, kind, name, p, v)
    return rows


# ----------------------------------------------------------------- back to a run


def read_table(path: str | Path) -> list[dict[str, str]]:
    """The rows of a deciding.csv.

    Raises:
        BnmemError: unreadable, or not a deciding table (its header is not :data:`COLUMNS`).
    """
    opener: Any = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            if tuple(reader.fieldnames or ()) != COLUMNS:
                raise BnmemError(f"{path}: not a deciding table (its columns are not {', '.join(COLUMNS)})")
            return list(reader)
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as e:
        raise BnmemError(f"{path}: unreadable ({e.__class__.__name__}: {e})") from e


def _leaf(row: dict[str, str]) -> Any:
    try:
        return json.loads(row["value"]) if row["value"] != "" else json.loads(row["text"] or "null")
    except ValueError as e:
        raise BnmemError(f"deciding table: {row['cell']}/{row['lens']} {row['path']}: not a JSON value "
                         f"({row['value'] or row['text']!r})") from e


def _put(doc: dict, path: list[Any], leaf: Any) -> None:
    node: Any = doc
    for i, k in enumerate(path):
        last = i == len(path) - 1
        nxt = leaf if last else ({} if isinstance(path[i + 1], str) else [])
        if isinstance(node, list):
            while len(node) <= k:
                node.append(None)
            if last or node[k] is None:
                node[k] = nxt
            node = node[k]
        else:
            if last or k not in node:
                node[k] = nxt
            node = node[k]


def rebuild(rows: list[dict[str, str]], root: Path) -> RunData:
    """The run the deciding table describes: its cells (conditions, lenses) and what the rules read of each lens.

    Raises:
        BnmemError: a row's path or value is not JSON.
    """
    cells: dict[str, CellOutput] = {}
    docs: dict[tuple[str, str], dict[str, dict | None]] = {}
    seen: set[tuple[str, str, str, str]] = set()
    for row in rows:
        key = (row["cell"], row["lens"], row["file"], row["path"])
        if key in seen:
            continue  # the same number read by another claim
        seen.add(key)
        try:
            path = json.loads(row["path"])
        except ValueError as e:
            raise BnmemError(f"deciding table: {row['cell']}/{row['lens']}: path {row['path']!r} is not JSON") from e
        if row["file"] == CONDITIONS:
            cell = cells.setdefault(row["cell"], CellOutput(row["cell"], {}))
            _put(cell.conditions, path, _leaf(row))
            continue
        src = (row["cell"], row["lens"])
        if src not in docs:
            docs[src] = {name: None for name in FILES}
            if row["cell"] != STUDYWIDE:
                cells.setdefault(row["cell"], CellOutput(row["cell"], {}))
        if docs[src].get(row["file"]) is None:
            docs[src][row["file"]] = {}
        if path:
            _put(docs[src][row["file"]], path, _leaf(row))  # type: ignore[arg-type]
    theory, studywide = None, {}
    from bnmem.names import THEORY

    for (cid, kind), files in docs.items():
        lens = LensOutput(kind, root, files["data"] or {}, files["config"], files["environment"])
        if cid == STUDYWIDE:
            if kind == THEORY:
                theory = lens
            else:
                studywide[kind] = lens
        else:
            cells[cid].lenses[kind] = lens
    return RunData(root, "study", None, list(cells.values()), theory, None, [], studywide)


__all__ = ["COLUMNS", "DECIDING_CSV", "DecidingTable", "evaluate_traced", "read_table", "rebuild"]
