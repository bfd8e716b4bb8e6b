"""Find and read what a run directory holds, for the report.

Three layouts are accepted:

* a study directory (``bnmem run``): ``index.json`` lists the cells, each with
  its lens folders, and the theory folder;
* a single lens's run directory (``bnmem memorize --out X``, ``bnmem lira``...):
  the directory is one cell with one lens;
* a plain folder whose immediate subfolders are lens run directories.

A lens folder is recognised by its results file: every lens writes one (the
spec's ``LensSpec.results``, e.g. ``metrics.json``) that starts with
``"lens": NAME`` and ``"schema_version": N``; the report dispatches on that
name, never on folder names or on the shape of the numbers. Results written
before those keys existed are read when a study index names their lens.
Lenses are known by their static specs (:mod:`bnmem.lenses.spec`): reading a
run imports no lens module, hence no torch.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from bnmem.errors import BnmemError
from bnmem.lenses import spec as specs
from bnmem.lenses.spec import LENS_KEY
from bnmem.report.preregistration import PlanCheck, check_plan
from bnmem.names import CONFIG_FILE, ENVIRONMENT_FILE, ERROR_FILE, INDEX_FILE, METRICS_FILE, THEORY


def lens_figures() -> dict[str, str]:
    """Lens name -> the figure its runner writes (the report embeds it or says "not run")."""
    return {s.name: s.figure for s in specs.all_specs() if s.figure}


def results_files() -> list[str]:
    """Every results-file name a registered lens writes, most specific first."""
    names = dict.fromkeys(s.results for s in specs.all_specs() if s.results != METRICS_FILE)
    return [*names, METRICS_FILE]

# Keys of a cell's conditions, in display order.
CONDITION_KEYS = ("dataset", "arch", "norms", "seeds", "label_noise", "ood", "ood_source", "replicate", "recipe")
# The keys that define a cell (norms and seeds are compared inside one).
CELL_KEYS = ("dataset", "arch", "label_noise", "ood", "ood_source")


@dataclass
class LensOutput:
    """What one lens wrote in its output folder (not its :class:`bnmem.lenses.spec.LensSpec`).

    Attributes:
        kind: the registered lens name (its results file's ``"lens"``).
        path: the folder.
        data: its main results file (metrics.json, gamma_sigma.json or theory.json).
        config: its config.json, if any.
        environment: its environment.json, if any.
        figures: file name -> path of every PNG in the folder.
    """

    kind: str
    path: Path
    data: dict[str, Any]
    config: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    figures: dict[str, Path] = field(default_factory=dict)

    @property
    def conditions(self) -> dict[str, Any]:
        """The lens's own ``conditions`` block (empty when it has none)."""
        c = self.data.get("conditions")
        return c if isinstance(c, dict) else {}

    @property
    def main_figure(self) -> Path | None:
        name = lens_figures().get(self.kind)
        return self.figures.get(name) if name else None


@dataclass
class CellOutput:
    """One (dataset, architecture, corruption) setting and what the lenses run on it wrote
    (not the study's job cell, :class:`bnmem.study.run.Cell`)."""

    id: str
    conditions: dict[str, Any]
    lenses: dict[str, LensOutput] = field(default_factory=dict)

    @property
    def corrupted(self) -> bool | None:
        """True when the training set has injected outliers; None if unknown."""
        noise, ood = self.conditions.get("label_noise"), self.conditions.get("ood")
        if noise is None and ood is None:
            return None
        return bool((noise or 0) > 0 or (ood or 0) > 0)

    def describe(self) -> str:
        """Short human label: 'digits · lenet · label noise 0.05'."""
        c = self.conditions
        parts = [str(c.get("dataset", "?")), str(c.get("arch", "?"))]
        if c.get("label_noise"):
            parts.append(f"label noise {c['label_noise']:g}")
        if c.get("ood"):
            parts.append(f"OOD {c['ood']:g} ({c.get('ood_source') or 'noise'})")
        if self.corrupted is False:
            parts.append("clean data")
        return " · ".join(parts)


@dataclass
class RunData:
    """Everything the report reads from a run directory."""

    root: Path
    layout: str  # "study", "lens" or "folder"
    study: str | None
    cells: list[CellOutput]
    theory: LensOutput | None
    environment: dict[str, Any] | None
    problems: list[str] = field(default_factory=list)
    studywide: dict[str, LensOutput] = field(default_factory=dict)  # once-per-study lenses other than theory

    def lenses(self, kind: str) -> list[tuple[CellOutput, LensOutput]]:
        """Every (cell, lens) of one kind, in cell order."""
        return [(c, c.lenses[kind]) for c in self.cells if kind in c.lenses]

    @cached_property
    def plan(self) -> PlanCheck:
        """The run's plan check and label (study.json against the deciding plan), made once per loaded run:
        every part of the report reads it here."""
        return check_plan(self.root, self.study)


def _read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """A run's JSON document (every one bnmem writes is an object); None, with a problem noted, when it is
    unreadable or something else (a damaged or foreign file)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        problems.append(f"{path}: unreadable ({e.__class__.__name__}: {e})")
        return None
    if not isinstance(doc, dict):
        problems.append(f"{path}: not a JSON object (a {type(doc).__name__}): damaged or not written by bnmem")
        return None
    return doc


def _lens_of(doc: Any) -> str | None:
    """The registered lens name a results document declares, if any."""
    if not isinstance(doc, dict) or not isinstance(doc.get(LENS_KEY), str):
        return None
    try:
        return specs.canonical(doc[LENS_KEY])
    except BnmemError:
        return doc[LENS_KEY]  # a lens this installation does not know: shown generically


def load_lenses(path: Path, problems: list[str], hint: str | None = None) -> list[LensOutput]:
    """Read every lens's results in one folder (a study may put a gamma-sigma results file next to
    another lens's). Empty (with a problem noted when something was expected) if there are none."""
    if not path.is_dir():
        problems.append(f"{path}: listed but missing (not started yet?)")
        return []
    if (path / ERROR_FILE).is_file():
        first = (path / ERROR_FILE).read_text(encoding="utf-8", errors="replace").strip().splitlines()[:1]
        problems.append(f"{path}: the job failed" + (f": {first[0]}" if first else ""))
    found: dict[str, dict[str, Any]] = {}
    legacy: dict[str, Any] | None = None
    owners: dict[str, list[str]] = {}
    for spec in specs.all_specs():
        owners.setdefault(spec.results, []).append(spec.name)
    for name in results_files():
        if not (path / name).is_file():
            continue
        doc = _read_json(path / name, problems)
        kind = _lens_of(doc)
        if kind is None and isinstance(doc, dict) and len(owners.get(name, [])) == 1:
            kind = owners[name][0]  # older results without the key, in a file only one lens writes
        if kind is not None:
            found.setdefault(kind, doc)
        elif isinstance(doc, dict) and legacy is None:
            legacy = doc
    if not found and legacy is not None and hint is not None:
        # Written before results files carried their lens: the study index says which lens it is.
        found[_lens_of({LENS_KEY: hint}) or hint] = legacy
    elif not found and legacy is not None:
        problems.append(f"{path}: results without a \"lens\" key (written by an older bnmem); rerun that lens "
                        f"or report the study directory that lists it")
    if not found:
        if hint:
            problems.append(f"{path}: no results yet ({', '.join(results_files())} missing)")
        return []
    config = _read_json(path / CONFIG_FILE, problems) if (path / CONFIG_FILE).is_file() else None
    env = _read_json(path / ENVIRONMENT_FILE, problems) if (path / ENVIRONMENT_FILE).is_file() else None
    figures = {p.name: p for p in sorted(path.glob("*.png"))}
    return [LensOutput(kind=kind, path=path, data=doc, config=config, environment=env, figures=figures)
            for kind, doc in found.items()]


def _conditions_from(lens: LensOutput) -> dict[str, Any]:
    """A cell's conditions from a lens's own conditions or config."""
    c = dict(lens.conditions)
    cfg = lens.config or {}
    data_cfg = cfg.get("data", {}) if isinstance(cfg.get("data"), dict) else {}
    for key in CONDITION_KEYS:
        if key not in c:
            if key in cfg:
                c[key] = cfg[key]
            elif key in data_cfg:
                c[key] = data_cfg[key]
    return {k: c.get(k) for k in CONDITION_KEYS if k in c}


def _first_env(*lenses: LensOutput | None) -> dict[str, Any] | None:
    for lens in lenses:
        if lens is not None and lens.environment:
            return lens.environment
    return None


def load_run(root: str | Path, progress: bool = False) -> RunData:
    """Read a study, lens or folder-of-lenses run directory (``progress``: a bar over a study's cells, on stderr).

    Raises:
        BnmemError: ``root`` is not a directory or holds no results the report knows.
    """
    root = Path(root)
    if not root.is_dir():
        raise BnmemError(f"{root} is not a directory")
    problems: list[str] = []
    env = _read_json(root / ENVIRONMENT_FILE, problems) if (root / ENVIRONMENT_FILE).is_file() else None
    if (root / INDEX_FILE).is_file():
        run = _load_study(root, problems, progress)
    else:
        run = _load_loose(root, problems)
    if not run.cells and run.theory is None and not run.studywide:
        raise BnmemError(f"{root} holds no bnmem results (no {INDEX_FILE} and no {', '.join(results_files())})")
    all_lenses = [lens for c in run.cells for lens in c.lenses.values()] + [run.theory]
    run.environment = env or _first_env(*all_lenses)
    return run


def _load_study(root: Path, problems: list[str], progress: bool = False) -> RunData:
    index = _read_json(root / INDEX_FILE, problems)
    if not isinstance(index, dict):
        raise BnmemError(f"{root / INDEX_FILE} is not a readable study index")
    cells = []
    from tqdm import tqdm

    entries = index.get("cells") or []
    for i, entry in enumerate(tqdm(entries, desc="reading cells", unit="cell", disable=not progress,
                                   file=sys.stderr, leave=False)):
        cid = str(entry.get("id", f"cell{i}"))
        cond = {k: entry.get(k) for k in CONDITION_KEYS if k in entry}
        # The study index names a cell's recipe only when it is not the shared one (Cell.index_entry): the
        # recipe belongs to the cell, so cells of one setting pool whichever of their lenses name it.
        cond.setdefault("recipe", "shared")
        cell = CellOutput(cid, cond)
        seen: set[str] = set()
        for name, rel in (entry.get("lenses") or {}).items():
            if rel is None or rel in seen:  # an alias (rmia) points at its lens's folder
                continue
            seen.add(rel)
            for lens in load_lenses(root / rel, problems, hint=name):
                cell.lenses.setdefault(lens.kind, lens)
        for lens in cell.lenses.values():  # fill what the index left out
            for k, v in _conditions_from(lens).items():
                cell.conditions.setdefault(k, v)
        cells.append(cell)
    studywide: dict[str, LensOutput] = {}
    folders = dict(index.get("lenses") or {})
    if index.get("theory"):
        folders.setdefault(THEORY, index["theory"])  # index.json names the theory folder under its own key too
    for name, rel in folders.items():
        for lens in load_lenses(root / rel, problems, hint=name):
            studywide.setdefault(lens.kind, lens)
    theory = studywide.pop(THEORY, None)
    return RunData(root, "study", index.get("study"), cells, theory, None, problems, studywide)


def _load_loose(root: Path, problems: list[str]) -> RunData:
    """A single lens folder, or a folder of lens folders (one cell per folder)."""
    own = load_lenses(root, problems)
    folders = list(own)
    if not own:
        for sub in sorted(p for p in root.iterdir() if p.is_dir()):
            folders += load_lenses(sub, problems)
    studywide = {lens.kind: lens for lens in folders if _studywide(lens.kind)}
    theory = studywide.pop(THEORY, None)
    cells: list[CellOutput] = []
    for lens in folders:
        if _studywide(lens.kind):
            continue
        cond = _conditions_from(lens)
        # Lenses of one setting (what defines a study cell: data, architecture,
        # corruption) share a cell, so memorize and lira of the same data end up
        # side by side; a different setting starts a new cell.
        same = lambda c: all(c.conditions.get(k) == cond.get(k) for k in CELL_KEYS)  # noqa: E731
        cell = next((c for c in cells if same(c) and (lens.kind not in c.lenses or c.lenses[lens.kind] is lens)),
                    None)
        if cell is None:
            cell = CellOutput(lens.path.name if lens.path != root else root.name, cond)
            cells.append(cell)
        cell.lenses.setdefault(lens.kind, lens)
    layout = "lens" if own else "folder"
    return RunData(root, layout, None, cells, theory, None, problems, studywide)


def _studywide(kind: str) -> bool:
    """A lens that runs once per study (theory), not per cell."""
    spec = specs.find(kind)
    return spec is not None and not spec.per_cell
