"""Studies: one YAML file -> a grid of cells -> one job per (cell, lens) -> a run directory.

A study is a base experiment config (the ``data``/``arch``/``norms``/``seeds``/
``train`` sections of :class:`~bnmem.lenses.common.ExperimentConfig`), a
``grid`` and the ``lenses`` to run::

    name: demo
    data: {dataset: digits}          # base data section (dataset/outliers come from the grid)
    train: {epochs: 20, lr: 0.05}    # base recipe, shared by every lens
    grid:
      datasets: [digits]             # default: [data.dataset]
      archs: [lenet]                 # default: [arch]
      norms: [batch, none]           # compared inside every cell (default: norms)
      seeds: [0, 1, 2]               # every cell's seeds (default: seeds)
      outliers:                      # one cell per entry (default: data's rates)
        - {label_noise: 0.05}
        - {ood: 0.05, ood_source: noise}
    lenses:                          # a list of names, or name -> options
      memorize: {}
      lira: {shadow_models: 16, epochs: 20}
      rmia: {}                       # = lira with RMIA reported (same folder)
      theory: {steps: 200}

A cell is one (dataset, architecture, outlier setting); norms and seeds are
compared inside it. A per-cell lens's options are a partial config of that lens
(its ``bnmem LENS`` config: any of its fields, ``train: {...}`` merged into the
recipe), merged over the cell's base config; ``epochs: N`` is short for
``train: {epochs: N}`` unless the lens has an ``epochs`` field of its own.
Everything is validated when the study is loaded, before any job runs.

Run directory::

    <out>/study.json               resolved study (a rerun with another one is refused)
    <out>/index.json               cells, their conditions, each lens's folder (written first)
    <out>/<cell_id>/<lens>/        one lens's run directory (its own config, results, DONE)
    <out>/theory/                  the toy-model simulation (once per study)
    <out>/DONE                     written when every job has finished
"""

from __future__ import annotations

import copy
import json
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.errors import BnmemError
from bnmem.study.schema import LensOptions, Outliers, Study, read_study_yaml
from bnmem.lenses.registry import CELL_LENSES, RMIA, THEORY, build_config

__all__ = ["Cell", "Job", "Study", "StudyResult", "expand_grid", "index_doc", "load_study", "plan", "run_study"]

INDEX = "index.json"
STUDY = "study.json"
ERROR = "ERROR.txt"
# The cell is defined by these data keys; a lens may not change them.
CELL_DATA_KEYS = ("dataset", "label_noise", "ood", "ood_source")


# --- loading ---------------------------------------------------------------------------


def load_study(path: str | Path, overrides: list[str] | None = None) -> Study:
    """Load, override (``a.b=c``) and validate a study, including every lens config of every cell.

    Raises:
        BnmemError: unreadable/malformed file, a bad override, or a lens option
            its lens does not accept.
        pydantic.ValidationError: a bad key or value of the study itself (the
            command line turns it into one line with the key's path).
    """
    from bnmem.cli.app import apply_overrides

    doc = read_study_yaml(path)
    doc.setdefault("name", Path(path).stem)
    study = Study.model_validate(apply_overrides(doc, overrides))
    plan(study)  # validates every lens's config now, not hours into the run
    return study


# --- grid expansion --------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One (dataset, architecture, outlier setting); norms and seeds are compared inside it."""

    id: str
    dataset: str
    arch: str
    norms: tuple[str, ...]
    seeds: tuple[int, ...]
    outliers: Outliers

    def experiment(self, study: Study) -> dict[str, Any]:
        """The cell's base ExperimentConfig dict: the study's base with the cell's choices."""
        data = study.data.model_dump(mode="json")
        data.update(dataset=self.dataset, **self.outliers.model_dump())
        return {
            "data": data,
            "arch": self.arch,
            "norms": list(self.norms),
            "seeds": list(self.seeds),
            "train": study.train.model_dump(mode="json"),
        }

    def conditions(self) -> dict[str, Any]:
        """The index.json record of this cell (without its lenses)."""
        o = self.outliers
        return {
            "id": self.id,
            "dataset": self.dataset,
            "arch": self.arch,
            "norms": list(self.norms),
            "seeds": list(self.seeds),
            "label_noise": o.label_noise,
            "ood": o.ood,
            "ood_source": o.ood_source if o.ood > 0 else None,
        }


def expand_grid(study: Study) -> list[Cell]:
    """Cells of the study: datasets × archs × outlier settings, in that nesting order."""
    g = study.grid
    datasets = g.datasets or [study.data.dataset]
    archs = g.archs or [study.arch]
    norms = tuple(g.norms or study.norms)
    seeds = tuple(g.seeds or study.seeds)
    outliers = g.outliers or [Outliers(label_noise=study.data.label_noise, ood=study.data.ood,
                                       ood_source=study.data.ood_source)]
    return [
        Cell(id=f"{d}-{a}-{o.tag()}", dataset=d, arch=a, norms=norms, seeds=seeds, outliers=o)
        for d in datasets
        for a in archs
        for o in outliers
    ]


# Job kinds besides the lens names: a training run shared by several lenses.
SHARED = "shared-training"


@dataclass(frozen=True)
class Job:
    """One lens of one cell, the study's theory job, or a shared training run.

    Attributes:
        id: ``<cell_id>/<lens>``, ``theory`` or ``<cell_id>/_shared/<norm>/seed<k>``.
        lens: lens name (``lira`` also serves ``rmia``), or ``shared-training``.
        folder: results folder relative to the run directory.
        config: the lens's validated config, as plain data (for a shared run:
            a :func:`bnmem.study.share.shared_runs` entry).
        stage: jobs of a stage start once every earlier stage has finished.
    """

    id: str
    lens: str
    folder: str
    config: dict[str, Any]
    stage: int = 0


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in; nested dicts are merged, other values replaced."""
    out = copy.deepcopy(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def lens_config(study: Study, cell: Cell, lens: str) -> dict[str, Any]:
    """The validated config of ``lens`` in ``cell``, as plain data.

    Raises:
        BnmemError: an option the lens does not accept, or one that would
            change what defines the cell.
    """
    from bnmem.lenses.registry import config_class

    where = f"lenses.{lens}"
    opts: LensOptions = study.lenses.options(lens)
    extra = dict(opts.model_extra or {})
    for key in ("arch",):
        if key in extra:
            raise BnmemError(f"invalid study: {where}.{key}: set architectures in grid.archs, not per lens")
    for key in CELL_DATA_KEYS:
        if key in (extra.get("data") or {}):
            raise BnmemError(f"invalid study: {where}.data.{key}: the grid sets it for every cell")
    fields = config_class(lens).model_fields
    if opts.epochs is not None:
        if "epochs" in fields:
            extra["epochs"] = opts.epochs
        else:
            extra["train"] = {**(extra.get("train") or {}), "epochs": opts.epochs}
    base = cell.experiment(study)
    if CELL_LENSES[lens].one_seed:
        base["seeds"] = base["seeds"][:1]
    if CELL_LENSES[lens].bn_only:
        base["norms"] = ["batch"]
    cfg = _merge(base, extra)
    if lens == "lira" and study.lenses.rmia is not None:
        cfg = _with_rmia(cfg, fields)
    return build_config(lens, cfg, where).model_dump(mode="json")


def _with_rmia(cfg: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """Make sure a lira config reports RMIA (when it has an ``attacks`` list)."""
    if "attacks" in fields:
        attacks = cfg.get("attacks")
        if attacks is None:
            default = fields["attacks"].get_default(call_default_factory=True)
            attacks = list(default) if default is not None else None
        if attacks is not None and "rmia" not in attacks:
            cfg["attacks"] = [*attacks, "rmia"]
    return cfg


def plan(study: Study) -> tuple[list[Cell], list[Job]]:
    """Expand the grid and build every job with its validated config.

    Stages: 0 = theory and the training runs several lenses share; 1 = the
    per-cell lenses, lens by lens (every cell's memorize before any cell's
    gradnorms, ...), which find shared runs finished; 2 = lira, the expensive
    one, last, so early results cover every other lens. ``rmia`` adds no job of
    its own: it makes lira run (and report RMIA).

    Returns:
        The cells and the jobs.
    """
    from bnmem.study.share import shared_runs

    cells = expand_grid(study)
    enabled = study.lenses.enabled()
    jobs: list[Job] = []
    if THEORY in enabled:
        jobs.append(Job(id=THEORY, lens=THEORY, folder=THEORY, config=study.lenses.theory.model_dump()))
    wanted = set(enabled) | ({"lira"} if RMIA in enabled else set())
    for cell in cells:
        configs = {
            lens: lens_config(study, cell, lens) if lens != "lira" or study.lenses.lira else _rmia_only(study, cell)
            for lens in CELL_LENSES
            if lens in wanted
        }
        jobs += [Job(id=r["id"], lens=SHARED, folder=r["folder"], config=r, stage=0)
                 for r in shared_runs(cell.id, configs)]
        jobs += [Job(id=f"{cell.id}/{lens}", lens=lens, folder=f"{cell.id}/{CELL_LENSES[lens].folder}", config=cfg,
                     stage=2 if lens == "lira" else 1)
                 for lens, cfg in configs.items()]
    order = {lens: i for i, lens in enumerate([THEORY, SHARED, *CELL_LENSES])}
    jobs.sort(key=lambda j: (j.stage, order[j.lens]))
    return cells, jobs


def _rmia_only(study: Study, cell: Cell) -> dict[str, Any]:
    """Lira config with default options, for a study that asks for ``rmia`` without ``lira``."""
    from bnmem.lenses.registry import config_class

    base = cell.experiment(study)
    base["seeds"] = base["seeds"][:1]
    cfg = _with_rmia(base, config_class("lira").model_fields)
    return build_config("lira", cfg, "lenses.rmia").model_dump(mode="json")


def index_doc(study: Study, cells: list[Cell], jobs: list[Job]) -> dict[str, Any]:
    """The ``index.json`` document: cells, their conditions, each lens's folder (relative)."""
    by_id = {j.id: j for j in jobs}
    records = []
    for cell in cells:
        lenses: dict[str, str] = {}
        for lens in study.lenses.enabled():
            key = "lira" if lens == RMIA else lens
            job = by_id.get(f"{cell.id}/{key}")
            if job is not None:
                lenses[lens] = job.folder
        records.append({**cell.conditions(), "lenses": lenses})
    theory = by_id.get(THEORY)
    return {"study": study.name, "cells": records, "theory": theory.folder if theory else None}


# --- running ---------------------------------------------------------------------------


def job_spec(job: Job, out: Path, progress: bool) -> dict[str, Any]:
    """The plain-data spec :func:`run_job` receives (absolute paths, so any worker can run it)."""
    spec = {"id": job.id, "lens": job.lens, "config": job.config, "out": str(out / job.folder), "progress": progress}
    if job.lens == SHARED:
        spec.update(norm=job.config["norm"], seed=job.config["seed"], training=job.config["training"],
                    targets=[{**t, "out": str(out / t["folder"])} for t in job.config["targets"]])
    return spec


def is_finished(spec: dict[str, Any]) -> bool:
    """A lens or theory job: its folder's DONE marker. A shared run: every target has its copy."""
    if spec["lens"] == SHARED:
        rel = f"{spec['norm']}/seed{spec['seed']}"
        return all(io.is_done(Path(t["out"]) / rel) for t in spec["targets"])
    return io.is_done(spec["out"])


def run_job(spec: dict[str, Any], executor: Any = None) -> dict[str, Any]:
    """Run one study job (module-level, so any executor can ship it).

    Args:
        spec: plain data from :func:`job_spec`.
        executor: handed to lens runners that take one (lira), when the job
            runs in the driver.

    Returns:
        ``{"id", "status": "done"|"skipped"|"failed", "seconds", "error"?}``.
        A failure does not raise (the other jobs go on); its traceback is in
        ``<out>/ERROR.txt`` and the job reruns next time.
    """
    from bnmem.lenses.registry import run_cell_lens, run_theory_lens, shadow_gamma_sigma
    from bnmem.study.share import run_shared_training

    out = Path(spec["out"])
    if is_finished(spec):
        return {"id": spec["id"], "status": "skipped", "seconds": 0.0}
    t0 = time.perf_counter()
    try:
        io.ensure_dir(out)
        if spec["lens"] == THEORY:
            run_theory_lens(spec["config"], out, spec["progress"])
        elif spec["lens"] == SHARED:
            run_shared_training(spec)
        else:
            run_cell_lens(spec["lens"], spec["config"], out, spec["progress"], executor)
            if spec["lens"] == "lira":
                shadow_gamma_sigma(spec["config"], out)  # reuse the shadow models: γ/σ over M BN models
    except Exception as e:  # noqa: BLE001 - one failed job must not stop the others
        msg = str(e).splitlines()[0] if str(e) else ""
        error = msg if isinstance(e, BnmemError) else f"{type(e).__name__}: {msg}"
        try:
            io.write_text(out / ERROR, traceback.format_exc())
        except (OSError, BnmemError):
            pass
        return {"id": spec["id"], "status": "failed", "seconds": time.perf_counter() - t0, "error": error,
                "traceback": str(out / ERROR)}
    seconds = time.perf_counter() - t0
    if spec["lens"] == SHARED:
        _remove_empty(out, levels=3)  # the scratch run is gone; its empty parents too
        return {"id": spec["id"], "status": "done", "seconds": seconds}
    (out / ERROR).unlink(missing_ok=True)
    if not io.is_done(out):  # some runners mark their folder themselves; the others get it here, last
        io.mark_done(out, {"lens": spec["lens"], "seconds": seconds})
    return {"id": spec["id"], "status": "done", "seconds": seconds}


def _remove_empty(path: Path, levels: int) -> None:
    for p in [path, *path.parents][:levels]:
        if not p.exists():
            continue
        try:
            p.rmdir()
        except OSError:  # not empty: something else lives there
            return


def _write_if_changed(path: Path, doc: Any) -> None:
    """Rewrite ``path`` only when its content changes (a resumed run leaves mtimes alone)."""
    try:
        if io.read_json(path) == json.loads(json.dumps(doc)):
            return
    except (OSError, ValueError):
        pass
    io.write_json(path, doc)


def _prepare(out: Path, study: Study) -> Path:
    from bnmem.rundir import prepare_run_dir

    resolved = study.model_dump(mode="json", by_alias=True)
    path = out / STUDY
    try:
        if io.read_json(path) == json.loads(json.dumps(resolved)):
            return out  # same study: resume without touching anything
    except (OSError, ValueError):
        pass
    return prepare_run_dir(out, resolved, name=STUDY)


@dataclass
class StudyResult:
    """What :func:`run_study` did."""

    out: Path
    index: dict[str, Any]
    jobs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [j for j in self.jobs if j["status"] == "failed"]


def run_study(study: Study, out: str | Path, executor: Any = None, progress: bool = True) -> StudyResult:
    """Run every job of ``study`` into ``out`` (resumable: finished jobs are skipped).

    Args:
        study: a validated study (:func:`load_study`).
        out: run directory.
        executor: an :class:`~bnmem.executors.Executor` (default: local).
        progress: progress bars.

    Returns:
        The index and one status per job.

    Raises:
        BnmemError: ``out`` holds a different study, or some job failed (after
            every other job has run; rerunning retries only the failed ones).
    """
    from bnmem.executors import get_executor

    out = Path(out).expanduser().resolve()
    cells, jobs = plan(study)
    _prepare(out, study)
    index = index_doc(study, cells, jobs)
    _write_if_changed(out / INDEX, index)  # first, so a report can read a study in progress
    own = executor is None
    executor = executor or get_executor("local", progress=progress)
    resources = study.resources.model_dump()
    result = StudyResult(out=out, index=index)
    try:
        for stage in sorted({j.stage for j in jobs}):
            specs = [job_spec(j, out, progress) for j in jobs if j.stage == stage]
            todo = [s for s in specs if not is_finished(s)]
            for s in specs:
                if s not in todo and s["lens"] == SHARED and Path(s["out"]).exists():
                    # Its lenses trained the run themselves after it failed: drop the leftovers.
                    shutil.rmtree(s["out"], ignore_errors=True)
                    _remove_empty(Path(s["out"]), levels=3)
            result.jobs += [{"id": s["id"], "status": "skipped", "seconds": 0.0} for s in specs if s not in todo]
            if not todo:
                continue
            if executor.name == "local":
                result.jobs += executor.map(run_job, todo, desc=f"{study.name} jobs", resources=resources)
            else:
                # Lenses that parallelize internally (lira's shadow models) get the
                # executor itself and run from here; the rest are shipped as jobs.
                inline = [s for s in todo if _takes_executor(s["lens"])]
                shipped = [s for s in todo if s not in inline]
                if shipped:
                    result.jobs += executor.map(run_job, shipped, desc=f"{study.name} jobs", resources=resources)
                result.jobs += [run_job(s, executor) for s in inline]
    finally:
        if own:
            executor.close()
    if result.failed:
        first = result.failed[0]
        raise BnmemError(
            f"{len(result.failed)} of {len(jobs)} jobs failed (first: {first['id']}: {first['error']}; "
            f"traceback in {first['traceback']}); fix and rerun the same command to resume"
        )
    if not io.is_done(out):
        io.mark_done(out, {"study": study.name, "jobs": len(jobs),
                           "seconds": round(sum(j["seconds"] for j in result.jobs), 3)})
    return result


def _takes_executor(lens: str) -> bool:
    import inspect

    from bnmem.lenses.registry import CELL_LENSES as specs
    from bnmem.lenses.registry import _module

    if lens not in specs:
        return False
    runner = getattr(_module(specs[lens]), specs[lens].runner)
    return "executor" in inspect.signature(runner).parameters
