"""Find and read what a run directory holds, for the report.

Three layouts are accepted:

* a study directory (``bnmem run``): ``index.json`` lists the cells, each with
  its lens folders, and the theory folder;
* a single lens's run directory (``bnmem memorize --out X``, ``bnmem lira``...):
  the directory is one cell with one lens;
* a plain folder whose immediate subfolders are lens run directories.

Lens kinds are recognised by the files their runners write (``theory.json``,
``gamma_sigma.json``, ``roc.png``...) and by the shape of ``metrics.json``, not
by folder names alone, so a renamed folder still reports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnmem.errors import BnmemError

LENS_KINDS = ("memorize", "gradnorms", "lira", "gamma_sigma", "mitigate", "theory")
# The figure each lens runner writes; the report embeds it or says "not run".
LENS_FIGURES = {
    "memorize": "memorization.png",
    "gradnorms": "gradnorms.png",
    "lira": "roc.png",
    "gamma_sigma": "gamma_sigma.png",
    "theory": "theory.png",
    "mitigate": "privacy_utility.png",
}
# Keys of a cell's conditions, in display order.
CONDITION_KEYS = ("dataset", "arch", "norms", "seeds", "label_noise", "ood", "ood_source")
# The keys that define a cell (norms and seeds are compared inside one).
CELL_KEYS = ("dataset", "arch", "label_noise", "ood", "ood_source")


@dataclass
class Lens:
    """One lens's output folder.

    Attributes:
        kind: one of :data:`LENS_KINDS`.
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
        return self.figures.get(LENS_FIGURES[self.kind])


@dataclass
class Cell:
    """One (dataset, architecture, corruption) setting and the lenses run on it."""

    id: str
    conditions: dict[str, Any]
    lenses: dict[str, Lens] = field(default_factory=dict)

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
    cells: list[Cell]
    theory: Lens | None
    environment: dict[str, Any] | None
    problems: list[str] = field(default_factory=list)

    def lenses(self, kind: str) -> list[tuple[Cell, Lens]]:
        """Every (cell, lens) of one kind, in cell order."""
        return [(c, c.lenses[kind]) for c in self.cells if kind in c.lenses]


def _read_json(path: Path, problems: list[str]) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        problems.append(f"{path}: unreadable ({e.__class__.__name__}: {e})")
        return None


def _is_memorize(m: dict[str, Any]) -> bool:
    return any(isinstance(v, dict) and "epochs_to_fit_noisy" in v for v in m.values())


def _is_gradnorms(m: dict[str, Any]) -> bool:
    # norm -> definition -> "epoch_<e>" -> checkpoint summary
    return any(isinstance(v, dict) and any(isinstance(d, dict) and any(str(k).startswith("epoch_") for k in d)
                                           for d in v.values()) for v in m.values())


def _is_lira(m: dict[str, Any]) -> bool:
    # norm -> attack -> subset -> {"auc": ...}
    return "paired" in m or any(
        isinstance(v, dict) and any(isinstance(a, dict) and any(isinstance(s, dict) and "auc" in s
                                                                for s in a.values()) for a in v.values())
        for v in m.values())


# Lens names a study index may use for a kind (``rmia`` is reported by the lira lens).
HINTS = {"memorize": "memorize", "gradnorms": "gradnorms", "lira": "lira", "rmia": "lira",
         "gamma-sigma": "gamma_sigma", "gamma_sigma": "gamma_sigma", "mitigate": "mitigate", "theory": "theory"}


def detect_kind(path: Path, data: dict[str, Any] | None, hint: str | None = None) -> str | None:
    """The lens kind of a folder, from its results files; None if not a lens folder.

    The shape of the results decides; the study's lens name (``hint``) and the
    figure names only break ties.
    """
    names = {p.name for p in path.iterdir() if p.is_file()}
    if "theory.json" in names:
        return "theory"
    if "metrics.json" not in names:
        return "gamma_sigma" if "gamma_sigma.json" in names else None
    if isinstance(data, dict):
        if isinstance(data.get("variants"), list):
            return "mitigate"
        if _is_memorize(data):
            return "memorize"
        if _is_gradnorms(data):
            return "gradnorms"
        if _is_lira(data):
            return "lira"
    if hint in HINTS:
        return HINTS[hint]
    for kind, figure in LENS_FIGURES.items():
        if figure in names:
            return kind
    return None


def load_lens(path: Path, problems: list[str], hint: str | None = None) -> Lens | None:
    """Read one lens folder; None (with a problem noted) when it holds no results."""
    if not path.is_dir():
        problems.append(f"{path}: listed but missing (not started yet?)")
        return None
    if (path / "ERROR.txt").is_file():
        first = (path / "ERROR.txt").read_text(encoding="utf-8", errors="replace").strip().splitlines()[:1]
        problems.append(f"{path}: the job failed" + (f": {first[0]}" if first else ""))
    main = None
    for name in ("theory.json", "metrics.json", "gamma_sigma.json"):
        if (path / name).is_file():
            main = _read_json(path / name, problems)
            break
    kind = detect_kind(path, main if isinstance(main, dict) else None, hint)
    if kind is None or not isinstance(main, dict):
        if kind is not None or hint:
            problems.append(f"{path}: no results yet (metrics.json / gamma_sigma.json / theory.json missing)")
        return None
    if kind == "gamma_sigma" and (path / "gamma_sigma.json").is_file() and (path / "metrics.json").is_file():
        main = _read_json(path / "gamma_sigma.json", problems) or main
    config = _read_json(path / "config.json", problems) if (path / "config.json").is_file() else None
    env = _read_json(path / "environment.json", problems) if (path / "environment.json").is_file() else None
    figures = {p.name: p for p in sorted(path.glob("*.png"))}
    return Lens(kind=kind, path=path, data=main, config=config, environment=env, figures=figures)


def _extra_lenses(lens: Lens, problems: list[str]) -> list[Lens]:
    """Lenses that live inside another lens's folder (a gamma_sigma.json next to
    a memorize or mitigate metrics.json)."""
    out = []
    gs = lens.path / "gamma_sigma.json"
    if lens.kind != "gamma_sigma" and gs.is_file():
        data = _read_json(gs, problems)
        if isinstance(data, dict):
            out.append(Lens("gamma_sigma", lens.path, data, lens.config, lens.environment, lens.figures))
    return out


def _conditions_from(lens: Lens) -> dict[str, Any]:
    """Cell conditions from a lens's own conditions or config."""
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


def _first_env(*lenses: Lens | None) -> dict[str, Any] | None:
    for lens in lenses:
        if lens is not None and lens.environment:
            return lens.environment
    return None


def load_run(root: str | Path) -> RunData:
    """Read a study, lens or folder-of-lenses run directory.

    Raises:
        BnmemError: ``root`` is not a directory or holds no results the report knows.
    """
    root = Path(root)
    if not root.is_dir():
        raise BnmemError(f"{root} is not a directory")
    problems: list[str] = []
    env = _read_json(root / "environment.json", problems) if (root / "environment.json").is_file() else None
    if (root / "index.json").is_file():
        run = _load_study(root, problems)
    else:
        run = _load_loose(root, problems)
    if not run.cells and run.theory is None:
        raise BnmemError(
            f"{root} holds no bnmem results (no index.json, metrics.json, theory.json or gamma_sigma.json)"
        )
    all_lenses = [lens for c in run.cells for lens in c.lenses.values()] + [run.theory]
    run.environment = env or _first_env(*all_lenses)
    return run


def _load_study(root: Path, problems: list[str]) -> RunData:
    index = _read_json(root / "index.json", problems)
    if not isinstance(index, dict):
        raise BnmemError(f"{root / 'index.json'} is not a readable study index")
    cells = []
    for i, entry in enumerate(index.get("cells") or []):
        cid = str(entry.get("id", f"cell{i}"))
        cond = {k: entry.get(k) for k in CONDITION_KEYS if k in entry}
        cell = Cell(cid, cond)
        for name, rel in (entry.get("lenses") or {}).items():
            if rel is None:
                continue
            lens = load_lens(root / rel, problems, hint=name)
            if lens is None:
                continue
            for extra in [lens, *_extra_lenses(lens, problems)]:
                cell.lenses.setdefault(extra.kind, extra)
        for lens in cell.lenses.values():  # fill what the index left out
            for k, v in _conditions_from(lens).items():
                cell.conditions.setdefault(k, v)
        cells.append(cell)
    theory = None
    if index.get("theory"):
        theory = load_lens(root / index["theory"], problems, hint="theory")
    return RunData(root, "study", index.get("study"), cells, theory, None, problems)


def _load_loose(root: Path, problems: list[str]) -> RunData:
    """A single lens folder, or a folder of lens folders (one cell per folder)."""
    own = load_lens(root, problems)
    folders = [own] if own is not None else []
    if own is None:
        for sub in sorted(p for p in root.iterdir() if p.is_dir()):
            lens = load_lens(sub, problems)
            if lens is not None:
                folders.append(lens)
    theory = next((lens for lens in folders if lens.kind == "theory"), None)
    cells: list[Cell] = []
    for lens in folders:
        if lens.kind == "theory":
            continue
        cond = _conditions_from(lens)
        # Lenses of one setting (what defines a study cell: data, architecture,
        # corruption) share a cell, so memorize and lira of the same data end up
        # side by side; a different setting starts a new cell.
        same = lambda c: all(c.conditions.get(k) == cond.get(k) for k in CELL_KEYS)  # noqa: E731
        cell = next((c for c in cells if same(c) and lens.kind not in c.lenses), None)
        if cell is None:
            cell = Cell(lens.path.name if lens.path != root else root.name, cond)
            cells.append(cell)
        for extra in [lens, *_extra_lenses(lens, problems)]:
            cell.lenses.setdefault(extra.kind, extra)
    layout = "lens" if own is not None else "folder"
    return RunData(root, layout, None, cells, theory, None, problems)
