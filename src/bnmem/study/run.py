"""Studies: one YAML file -> a grid of cells -> one job per (cell, lens) -> a run directory.

A study is a base experiment config (the ``data``/``arch``/``norms``/``seeds``/
``train`` sections of :class:`~bnmem.config.ExperimentConfig`), a
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

This module builds the jobs and runs one job (:func:`run_job`); :mod:`bnmem.study.execute` runs a whole
study (:func:`~bnmem.study.execute.run_study`) as one dependency graph (:mod:`bnmem.study.graph`).
"""

from __future__ import annotations

import copy
import json
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bnmem import io
from bnmem.allocator import keep_freed_memory
from bnmem.analysis_plan import CONFIRMATORY_KEY, RECORD_KEY
from bnmem.config import apply_overrides, validation_line
from bnmem.errors import BnmemError, DiskFullError
from bnmem.lenses import registry
from bnmem.lenses.work import lens_work
from bnmem.names import ERROR_FILE, FAIR_ARMS, INDEX_FILE, STUDY_FILE
from bnmem.study.confirmatory import RULE as SEED_RULE, ReplicateSeeds, replicate_seeds, seed_key, study_seed
from bnmem.study.schema import LensOptions, Outliers, Study, read_study_yaml
from bnmem.study.recipes import SELECTED_RECIPES_KEY, SELECTION, SELECTION_DIR, RecipeSelection, recipe_from
from bnmem.study.share import SHARED, shared_runs

__all__ = ["Cell", "Job", "Study", "expand_grid", "index_doc", "load_study", "build_jobs", "read_study", "run_job"]

INDEX = INDEX_FILE

STUDY = STUDY_FILE
# The key of study.json that records the analysis plan ({"version", "sha256"}) fixed before the first job.
PLAN_KEY = RECORD_KEY
ERROR = ERROR_FILE
# The cell is defined by these data keys; a lens may not change them.
CELL_DATA_KEYS = ("dataset", "label_noise", "ood", "ood_source")


# --- loading ---------------------------------------------------------------------------


def load_study(path: str | Path, overrides: list[str] | None = None) -> Study:
    """Load, override (``a.b=c``) and validate a study, including every lens config of every cell
    (:func:`read_study`, then :func:`build_jobs`).

    Raises:
        BnmemError: unreadable/malformed file, a bad override, or a lens option
            its lens does not accept.
        pydantic.ValidationError: a bad key or value of the study itself (the
            command line turns it into one line with the key's path).
    """
    study = read_study(path, overrides)
    build_jobs(study)  # validates every lens's config now, not hours into the run
    return study


def read_study(path: str | Path, overrides: list[str] | None = None) -> Study:
    """Load, override (``a.b=c``) and validate a study's own keys; its lens options are validated when it is
    expanded into jobs (:func:`build_jobs`: ``bnmem run`` builds them once, before anything runs or is written).

    Raises:
        BnmemError: unreadable/malformed file or a bad override.
        pydantic.ValidationError: a bad key or value of the study itself.
    """
    doc = read_study_yaml(path)
    doc.setdefault("name", Path(path).stem)
    return Study.model_validate(apply_overrides(doc, overrides))


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
    replicate: int | None = None  # None: the study has one replicate (no suffix, no seed offsets)
    recipe: str = "shared"  # "per-norm" (fair arms): each norm's learning rate and epochs selected on validation
    derived: ReplicateSeeds | None = None  # a confirmatory run: every seed from the plan's hash

    def experiment(self, study: Study) -> dict[str, Any]:
        """The cell's base ExperimentConfig dict: the study's base with the cell's choices.

        Replicate k shifts the corruption seed by k and every model seed by
        ``REPLICATE_SEED_STRIDE * k``; :func:`lens_model` shifts the lenses' own
        seeds (``REPLICATE_SEED_FIELDS``: LiRA's keep matrix and query permutation)
        by k, so replicates are independent experiments. A confirmatory cell
        (:attr:`derived`) takes all of them from the plan's hash instead.
        """
        data = study.data.model_dump(mode="json")
        data.update(dataset=self.dataset, **self.outliers.model_dump())
        k = self.replicate or 0
        data["seed"] = self.derived.data if self.derived else int(data["seed"]) + k
        seeds = list(self.derived.models) if self.derived else [int(s) + REPLICATE_SEED_STRIDE * k
                                                                  for s in self.seeds]
        return {
            "data": data,
            "arch": self.arch,
            "norms": list(self.norms),
            "seeds": seeds,
            "train": study.train.model_dump(mode="json"),
        }

    def conditions(self) -> dict[str, Any]:
        """The index.json record of this cell (without its lenses): ``seeds`` are the model seeds it trained with
        (replicate k's are shifted by ``REPLICATE_SEED_STRIDE * k``)."""
        o = self.outliers
        k = self.replicate or 0
        return {
            "id": self.id,
            "dataset": self.dataset,
            "arch": self.arch,
            "norms": list(self.norms),
            "seeds": list(self.derived.models) if self.derived else [int(s) + REPLICATE_SEED_STRIDE * k
                                                                      for s in self.seeds],
            "label_noise": o.label_noise,
            "ood": o.ood,
            "ood_source": o.ood_source if o.ood > 0 else None,
            **({} if self.replicate is None else {"replicate": self.replicate}),
            **({} if self.recipe == "shared" else {"recipe": self.recipe}),
        }


# Model seeds of replicate k are the study's seeds + k * this stride.
REPLICATE_SEED_STRIDE = 1000
# Lens config fields that are seeds of their own; replicate k adds k to each.
REPLICATE_SEED_FIELDS = ("keep_seed", "query_seed")


def expand_grid(study: Study, seeds_from: str | None = None) -> list[Cell]:
    """Cells of the study: datasets × archs × outlier settings, in that nesting order.

    ``seeds_from``: the seed key of a confirmatory run (:func:`bnmem.study.confirmatory.seed_key`: the plan's and
    the deciding source's SHA-256); every replicate's seeds are then derived from it.
    """
    g = study.grid
    datasets = g.datasets or [study.data.dataset]
    archs = g.archs or [study.arch]
    norms = tuple(g.norms or study.norms)
    seeds = tuple(g.seeds or study.seeds)
    outliers = g.outliers or [Outliers(label_noise=study.data.label_noise, ood=study.data.ood,
                                       ood_source=study.data.ood_source)]
    reps: list[int | None] = [None] if g.replicates == 1 else list(range(g.replicates))
    derived = replicate_seeds(seeds_from, g.replicates, len(seeds)) if seeds_from else None
    return [
        Cell(id=f"{d}-{a}-{o.tag()}" + ("" if rec == "shared" else "-pernorm") + ("" if r is None else f"-r{r}"),
             dataset=d, arch=a, norms=norms, seeds=seeds, outliers=o, replicate=r, recipe=rec,
             derived=derived[r or 0] if derived else None)
        for d in datasets
        for a in archs
        for o in outliers
        for rec in g.recipes
        for r in reps
    ]


@dataclass(frozen=True)
class Job:
    """One lens of one cell, the study's theory job, a norm's shared training runs or a setting's recipe
    selection.

    Attributes:
        id: ``<cell_id>/<lens>``, ``theory``, ``<cell_id>/_shared/<norm>`` (a norm's shared runs, every seed) or
            ``<cell_id>/_recipe``.
        lens: lens name (``lira`` also serves ``rmia``), ``shared-training`` or ``recipe-selection``.
        folder: results folder relative to the run directory.
        work: its typed cell work (:class:`~bnmem.lenses.registry.CellWork`), made once from the config
            :func:`build_jobs` validated, with its folders relative until :meth:`at` binds them: what it trains and
            writes, its graph tasks, how it runs. Nothing validates its config again.
        stage: the registry's order of lenses: the order of the job list (the dry run's table and times);
            what runs when is the dependency graph's (:mod:`bnmem.study.graph`).
        after: the jobs it reads from besides its shared runs: a per-norm cell's lenses read their setting's
            recipe selection (``<cell>/_recipe``, :mod:`bnmem.study.recipes`).
    """

    id: str
    lens: str
    folder: str
    work: Any = field(compare=False, repr=False)
    stage: int = 0
    after: tuple[str, ...] = ()  # jobs whose output it reads besides shared runs (a per-norm cell's selection)
    progress: bool = field(default=False, compare=False)  # progress bars when it runs

    @property
    def config(self) -> Any:
        """A lens job's validated config (its work's)."""
        return self.work.cfg

    def at(self, out: Path, progress: bool = False) -> "Job":
        """The job with its work's folders under the run directory ``out`` (absolute: any worker can run it),
        showing progress bars when it runs or not."""
        return replace(self, work=self.work.at(Path(out)), progress=progress)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in; nested dicts are merged, other values replaced."""
    out = copy.deepcopy(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def lens_model(study: Study, cell: Cell, name: str) -> Any:
    """The validated config of per-cell lens ``name`` in ``cell`` (its lens's pydantic model).

    Raises:
        BnmemError: an option the lens does not accept, or one that would
            change what defines the cell.
    """
    lens = registry.get(name)
    where = f"lenses.{name}"
    try:
        opts = LensOptions.model_validate(study.lenses.options(name) or {})
    except ValidationError as e:
        raise BnmemError(f"invalid study: {validation_line(e, where)}") from e
    extra = dict(opts.model_extra or {})
    if "arch" in extra:
        raise BnmemError(f"invalid study: {where}.arch: set architectures in grid.archs, not per lens")
    for key in CELL_DATA_KEYS:
        if key in (extra.get("data") or {}):
            raise BnmemError(f"invalid study: {where}.data.{key}: the grid sets it for every cell")
    if opts.replicates is not None and "replicates" in lens.config.model_fields:
        extra["replicates"] = opts.replicates  # the lens's own replicates (defenses), not an allotment
    if opts.epochs is not None:
        if "epochs" in lens.config.model_fields:
            extra["epochs"] = opts.epochs
        else:
            extra["train"] = {**(extra.get("train") or {}), "epochs": opts.epochs}
    base = cell.experiment(study)
    if lens.takes_recipe:
        base["recipe"] = cell.recipe
        if cell.recipe == FAIR_ARMS:
            taken = [k for k in ("lr_grid", "max_epochs", "recipe_from") if k in extra]
            if taken:
                raise BnmemError(f"invalid study: {where}.{taken[0]}: a study selects each setting's recipes once "
                                 "for every lens; set grid.lr_grid / grid.max_epochs")
            base.update(recipe_from=recipe_from(f"{cell.id}/{name}", selection_folder(cell)),
                        lr_grid=study.grid.lr_grid, max_epochs=study.grid.max_epochs)
    if lens.one_seed:
        base["seeds"] = base["seeds"][:1]
    if lens.bn_only:
        base["norms"] = ["batch"]
    cfg = _merge(base, extra)
    if cell.derived:
        cfg.update({k: v for k, v in cell.derived.lens_seeds().items() if k in lens.config.model_fields})
    elif cell.replicate:
        # A lens's own seeds (LiRA's keep matrix, its batch-mode query permutation) move with the replicate too.
        for key in REPLICATE_SEED_FIELDS:
            if key in lens.config.model_fields:
                default = lens.config.model_fields[key].default
                cfg[key] = int(cfg.get(key, default if default is not None else 0)) + cell.replicate
    return lens.validate(cfg, where)


def selection_folder(cell: Cell) -> str:
    """Where the recipe selection of a per-norm cell's setting lives: its replicate-0 cell's ``_recipe``."""
    rid = cell.id if cell.replicate is None else f"{cell.id.rsplit('-r', 1)[0]}-r0"
    return f"{rid}/{SELECTION_DIR}"


def runs_in(study: Study, name: str, cell: Cell) -> bool:
    """Whether per-cell lens ``name`` runs in ``cell`` (its ``replicates`` / ``archs`` / ``clean`` options
    allot it)."""
    try:
        opts = LensOptions.model_validate(study.lenses.options(name) or {})
    except ValidationError as e:
        raise BnmemError(f"invalid study: {validation_line(e, f'lenses.{name}')}") from e
    if "replicates" in registry.get(name).config.model_fields:
        opts.replicates = None  # a lens with replicates of its own (defenses) takes the option itself
    return opts.allots(cell.arch, cell.replicate, cell.outliers.injected)


def build_jobs(study: Study, seeds_from: str | None = None) -> tuple[list[Cell], list[Job]]:
    """Expand the grid and build every job with its validated config.

    ``seeds_from``: a confirmatory run's seed key (plan and source hashes); every seed is derived from it (:func:`expand_grid`; a
    once-per-study lens's ``seed`` too).

    Stages: 0 = once-per-study lenses (theory) and the training runs several
    lenses share; then each per-cell lens at its registry stage (every cell's
    memorize before any cell's gradnorms, ...; lira, the expensive one, last),
    so early results cover every cell.

    Returns:
        The cells and the jobs.
    """
    cells = expand_grid(study, seeds_from)
    enabled = [registry.get(n) for n in study.lenses.enabled()]
    jobs: list[Job] = []
    selections: set[str] = set()  # the settings' recipe-selection jobs built so far
    for lens in enabled:
        if not lens.per_cell:
            opts = dict(study.lenses.options(lens.name) or {})
            if seeds_from and "seed" in lens.config.model_fields:
                opts["seed"] = study_seed(seeds_from, lens.name)
            cfg = lens.validate(opts, f"lenses.{lens.name}")
            jobs.append(Job(id=lens.name, lens=lens.name, folder=lens.name, work=lens_work(lens, cfg, lens.name),
                            stage=lens.stage))
    for cell in cells:
        # A per-norm-recipe cell runs only the lenses that take a recipe (the others would repeat the shared cell).
        # A lens allotted to part of the grid (its `replicates` / `archs` options) skips the other cells.
        models = {lens.name: lens_model(study, cell, lens.name) for lens in enabled if lens.per_cell
                  and (cell.recipe == "shared" or lens.takes_recipe)
                  and runs_in(study, lens.name, cell)}
        jobs += [Job(id=str(r.out), lens=r.kind, folder=str(r.out), work=r, stage=0)
                 for r in shared_runs(cell.id, models)]
        needs: tuple[str, ...] = ()
        if cell.recipe == FAIR_ARMS and any(getattr(m, "recipe_from", None) for m in models.values()):
            needs = (selection_folder(cell),)
            if needs[0] not in selections:
                selections.add(needs[0])
                selecting = next(c for c in cells if f"{c.id}/{SELECTION_DIR}" == needs[0])  # replicate 0
                selection = RecipeSelection.of(needs[0], selecting.experiment(study), study.grid.lr_grid,
                                               study.grid.max_epochs)
                jobs.append(Job(id=needs[0], lens=selection.kind, folder=needs[0], stage=0, work=selection))
        for name, cfg in models.items():
            folder = f"{cell.id}/{name}"
            jobs.append(Job(id=folder, lens=name, folder=folder, work=lens_work(registry.get(name), cfg, folder),
                            stage=registry.get(name).stage, after=needs if getattr(cfg, "recipe_from", None) else ()))
    # A fair-arms cell none of whose lenses takes a recipe has nothing to run: it is no cell of the study.
    ran = {j.id.split("/", 1)[0] for j in jobs}
    cells = [c for c in cells if c.recipe != FAIR_ARMS or c.id in ran]
    # Within a stage: once-per-study lenses, then shared training runs, then per-cell lenses in registry order.
    studywide = [lens.name for lens in enabled if not lens.per_cell]
    seq = [*studywide, SELECTION, SHARED, *(n for n in registry.names() if n not in studywide)]
    order = {name: i for i, name in enumerate(seq)}
    jobs.sort(key=lambda j: (j.stage, order[j.lens]))
    return cells, jobs


def index_doc(study: Study, cells: list[Cell], jobs: list[Job]) -> dict[str, Any]:
    """The ``index.json`` document: cells, their conditions, each lens's folder (relative).

    A lens asked for by an alias (``rmia``) is listed under that name too, pointing at its lens's folder.
    """
    by_id = {j.id: j for j in jobs}
    records = []
    for cell in cells:
        lenses: dict[str, str] = {}
        for asked, name in [*((n, n) for n in study.lenses.enabled()), *study.lenses.asked().items()]:
            job = by_id.get(f"{cell.id}/{name}")
            if job is not None:
                lenses.setdefault(asked, job.folder)
        records.append({**cell.conditions(), "lenses": lenses})
    studywide = {j.lens: j.folder for j in jobs if j.id == j.lens}
    return {"study": study.name, "cells": records, "theory": studywide.get("theory"),
            **({"lenses": studywide} if studywide else {})}


# --- running ---------------------------------------------------------------------------


def run_job(job: Job, executor: Any = None) -> dict[str, Any]:
    """Run one study job (module-level, so any executor can ship it).

    Args:
        job: a job bound to its run directory (:meth:`Job.at`).
        executor: handed to the lens runner (lira trains its shadow models
            through it) when the job runs in the driver.

    Returns:
        ``{"id", "status": "done"|"skipped"|"failed", "seconds", "error"?}``.
        A failure does not raise (the other jobs go on); its traceback is in
        ``<out>/ERROR.txt`` and the job reruns next time.
    """
    work = job.work
    out = work.out
    if work.finished():
        return {"id": job.id, "status": "skipped", "seconds": 0.0}
    keep_freed_memory()  # fewer page faults in whichever process runs the job; same results
    t0 = time.perf_counter()
    try:
        io.ensure_dir(out)
        work.run(progress=job.progress, executor=executor)
    except Exception as e:  # noqa: BLE001 - one failed job must not stop the others
        msg = str(e).splitlines()[0] if str(e) else ""
        error = msg if isinstance(e, BnmemError) else f"{type(e).__name__}: {msg}"
        try:
            io.write_text(out / ERROR, traceback.format_exc())
        except (OSError, BnmemError):
            pass
        failed = {"id": job.id, "status": "failed", "seconds": time.perf_counter() - t0, "error": error,
                  "traceback": str(out / ERROR)}
        if isinstance(e, DiskFullError):
            failed["disk_full"] = True  # the study starts no further job: they would fail too
        return failed
    seconds = time.perf_counter() - t0
    if work.marked:
        (out / ERROR).unlink(missing_ok=True)
        if not io.is_done(out):  # some runners mark their folder themselves; the others get it here, last
            io.mark_done(out, {"lens": job.lens, "seconds": seconds})
    return {"id": job.id, "status": "done", "seconds": seconds}


def write_if_changed(path: Path, doc: Any) -> None:
    """Rewrite ``path`` only when its content changes (a resumed run leaves mtimes alone)."""
    try:
        if io.read_json(path) == json.loads(json.dumps(doc)):
            return
    except (OSError, ValueError):
        pass
    io.write_json(path, doc)


def confirmatory_record(study: Study, plan_sha: str, version: str, source: dict[str, Any], commit: str | None = None,
                        started: str | None = None, study_file: str | Path | None = None) -> dict[str, Any]:
    """study.json's :data:`CONFIRMATORY_KEY` record: the plan, source (:func:`bnmem.provenance.source_record`) and
    study (name, file and resolved hashes) the seeds came from, the derivations, the commit, when the run started
    (its attempts-log entry has the same time), the rule, every seed."""
    from bnmem.provenance import SEED_DERIVATION, file_sha256, resolved_sha256

    resolved = resolved_sha256(study.model_dump(mode="json", by_alias=True))
    file_sha = file_sha256(study_file) if study_file is not None else resolved
    key = seed_key(plan_sha, source["source_sha256"], study.name, file_sha, resolved)
    cells = expand_grid(study, key)
    seeds = {f"r{c.replicate or 0}": c.derived.record() for c in cells if c.derived}
    studywide = {n: study_seed(key, n) for n in study.lenses.enabled()
                 if not registry.get(n).per_cell and "seed" in registry.get(n).config.model_fields}
    return {"plan_version": version, "plan_sha256": plan_sha, **source,
            "source_files": "every file under src/bnmem but __pycache__, and the versions of torch, numpy, scipy",
            "seed_derivation": SEED_DERIVATION, "study": study.name,
            "study_file": None if study_file is None else _repo_path(study_file), "study_sha256": file_sha,
            "resolved_study_sha256": resolved, "commit": commit, "started": started, "rule": SEED_RULE,
            "replicates": seeds, **({"study_lenses": studywide} if studywide else {})}


def _repo_path(path: str | Path) -> str:
    """A study file's path relative to the checkout's root when it lies inside it (how git names it), else as
    given."""
    from bnmem.provenance import checkout_root

    root, p = checkout_root(), Path(path).resolve()
    try:
        return p.relative_to(root.resolve()).as_posix() if root is not None else str(path)
    except ValueError:
        return str(path)


def _refuse_mixed(out: Path, existing: dict[str, Any], sha: str | None, source: str | None = None) -> None:
    """A rerun may not change whether a run is confirmatory, nor the plan or deciding source its seeds came from."""
    rec = existing.get(CONFIRMATORY_KEY)
    if rec is None and sha is not None:
        raise BnmemError(f"{out} holds an exploratory run; a confirmatory run derives other seeds: use a new --out")
    if rec is not None and sha is None:
        raise BnmemError(f"{out} holds a confirmatory run (seeds from plan {rec.get('plan_version')}); resume it "
                         "with --confirmatory")
    if rec is not None and rec.get("plan_sha256") != sha:
        raise BnmemError(f"{out} is confirmatory under plan {rec.get('plan_version')} (sha256 "
                         f"{rec.get('plan_sha256')}), whose hash its seeds came from; the current plan's hash differs, "
                         "so resuming would mix seeds of two plans: start a new --out to confirm the current plan")
    if rec is not None and rec.get("source_sha256") != source:
        raise BnmemError(f"{out} is confirmatory with seeds from the deciding source sha256 "
                         f"{rec.get('source_sha256')} (commit {rec.get('commit')}); the current source's hash differs, "
                         "so resuming would mix seeds of two sources: check out that commit, or start a new --out")


def prepare(out: Path, study: Study, confirmatory: bool = False, commit: str | None = None,
            study_file: str | Path | None = None) -> Path:
    """Write study.json with the analysis plan's version and hash (:data:`PLAN_KEY`) before any job runs, and
    for a confirmatory run the seeds derived from that hash and the deciding source's
    (:data:`CONFIRMATORY_KEY`, with ``commit`` and the start time); a rerun of the same study resumes and keeps
    the plan recorded when the run started (a confirmatory one only under that plan and source)."""
    from bnmem.analysis_plan import plan_record
    from bnmem.provenance import source_record, utc_now
    from bnmem.rundir import prepare_run_dir

    resolved = study.model_dump(mode="json", by_alias=True)
    record = plan_record()
    sha = record["sha256"] if confirmatory else None
    src = source_record() if confirmatory else None
    source = src["source_sha256"] if src else None
    path = out / STUDY
    try:
        existing = io.read_json(path)
    except (OSError, ValueError):
        existing = None
    if isinstance(existing, dict):
        _refuse_mixed(out, existing, sha, source)
        if {k: v for k, v in existing.items() if k not in (PLAN_KEY, CONFIRMATORY_KEY, SELECTED_RECIPES_KEY)} == json.loads(
                json.dumps(resolved)):
            return out  # same study: resume without touching anything (the recorded plan stays)
    extra = ({CONFIRMATORY_KEY: confirmatory_record(study, sha, record["version"], src, commit, utc_now(),
                                                    study_file)}
             if sha and src else {})
    return prepare_run_dir(out, {**resolved, PLAN_KEY: record, **extra}, name=STUDY)
