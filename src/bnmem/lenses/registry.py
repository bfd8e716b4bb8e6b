"""The lens registry: the runtime part of each lens (config model, runner, hooks), loaded lazily.

A lens is one experiment (forced memorization, gradient norms, LiRA, ...). What
can be known about it without running it (names, results file, figure, title,
per cell or per study, stage) is its static :class:`~bnmem.lenses.spec.LensSpec`
(:mod:`bnmem.lenses.spec`, torch-free; the report and the CLI listing read only
that). Its module defines a config (pydantic), a runner and, optionally, a
per-epoch measurement hook and a summary table, and registers them here with
:func:`register`. Nothing else needs editing to add a lens: ``bnmem run``
accepts its name under ``lenses:``, ``bnmem report`` shows its results (a
generic section when its spec names no view), and ``bnmem <name>`` runs it on
its own (generic flags when no hand-written command exists).

Built-in lenses are imported lazily (by module path, on first lookup), so
``import bnmem``, ``bnmem --help`` and ``bnmem report`` stay light and a study
that does not use a lens never imports it.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Protocol

from pydantic import BaseModel, ValidationError

from bnmem import io
from bnmem.config import validation_line
from bnmem.errors import BnmemError
from bnmem.lenses import spec as specs
from bnmem.lenses.spec import LENS_KEY, SCHEMA_KEY, LensSpec
from bnmem.names import BUILTIN_LENSES

__all__ = ["LENS_KEY", "SCHEMA_KEY", "CellWork", "Lens", "LensSpec", "Training", "register", "unregister", "get", "canonical",
           "all_lenses", "plugin_lenses", "names", "loaded"]


class Runner(Protocol):
    """``run(cfg, out, *, progress, executor) -> results`` (the results are also written to ``out``)."""

    def __call__(self, cfg: Any, out: Path, *, progress: bool = True, executor: Any = None) -> dict[str, Any]: ...


class Training(NamedTuple):
    """What a job's models train on and how: its data, architecture and recipe (the cost model times a step of
    it; the preflight checks the data is there)."""

    data: Any  # bnmem.config.DataConfig
    arch: str
    train: Any  # bnmem.config.TrainConfig


class CellWork(Protocol):
    """One job of a study, typed and built once: a lens's work in one cell (:class:`~bnmem.lenses.work.LensWork`; the lira
    lens's adds its shadow-model tasks), a norm's shared training runs (:class:`bnmem.study.share.SharedTraining`)
    or a setting's recipe selection (:class:`bnmem.study.recipes.RecipeSelection`). The study's task graph,
    its cost and disk estimates, its preflight and its job runner read these alone.

    Attributes:
        kind: the job's kind (a lens's name, ``shared-training``, ``recipe-selection``): what a pilot run's
            calibration is kept per.
        out: its folder (relative to the run directory while the jobs are built; absolute once :meth:`at` binds it).
        lens_share: the share of the job's estimated seconds left to the job itself after its :meth:`tasks`
            (the order only).
        step_factor: its seconds per example-epoch of the models it trains, relative to plain training.
        fixed_seconds: its seconds besides training.
        marked: the study marks its folder ``DONE`` when it ran (a shared training job leaves no folder).
    """

    kind: str
    out: Path
    lens_share: float
    step_factor: float
    fixed_seconds: float
    marked: bool

    def at(self, root: Path) -> "CellWork":
        """The same work with its folders under the run directory ``root``."""
        ...

    def dataset(self) -> Any:
        """Its dataset, loaded at most once per process (:func:`bnmem.data.loaded.load_once`)."""
        ...

    def training(self) -> Training | None:
        """What its models train on (None: it trains none on a dataset, e.g. the toy model)."""
        ...

    def models(self) -> float:
        """How many models it trains itself, each for :attr:`Training.train`'s epochs on the training set."""
        ...

    def bytes(self, n_train: int, parameter_count: Callable[[str, str, str], int]) -> dict[str, int]:
        """Estimated bytes it leaves on disk, by kind (``bnmem run --dry-run``); ``parameter_count(arch, dataset,
        norm)`` counts a model's weights."""
        ...

    def tasks(self, job_id: str, cost: float) -> list[Any]:
        """The :class:`~bnmem.executors.graph.Task` s a study runs before the job ``job_id`` (a chain: the job runs
        after the last), listed lazily from what is on disk; ``cost``: the job's estimated seconds."""
        ...

    def writes_into(self) -> tuple[Path, ...]:
        """Folders of other jobs it writes finished runs into (they run after it)."""
        ...

    def finished(self) -> bool:
        """Whether its work is all on disk (a rerun skips it)."""
        ...

    def seconds_taken(self) -> float | None:
        """The seconds the job itself recorded when it finished (None: not finished, or no seconds recorded)."""
        ...

    def task_seconds(self) -> float | None:
        """The seconds the tasks it gave the graph (:meth:`tasks`) recorded when they ran, summed (0.0: it gives
        none; None: one is not finished or recorded none). A pilot's calibration counts a job as these plus
        :meth:`seconds_taken`: the cell's whole work, as its estimate is."""
        ...

    def run(self, progress: bool = False, executor: Any = None) -> None:
        """Do the work (resuming what is on disk)."""
        ...

    def tidy(self) -> None:
        """Drop what a finished job no longer needs (a shared job's leftovers after its lenses trained)."""
        ...

    def in_driver(self) -> bool:
        """On a cluster, run it in the driver with the executor, after the graph (it spreads its own work over
        the executor and gives the graph no tasks: defenses)."""
        ...


# hook(cfg, ds, job, seed) -> EpochHook | None: the per-epoch measurement a lens attaches to
# each of its (norm, seed) training runs (job = that run's folder, where it may write arrays).
HookFactory = Callable[[Any, Any, Path, int], Callable | None]


# The static fields a Lens reads through from its spec (``lens.stage`` is ``lens.spec.stage``).
_SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(LensSpec))


class FolderWork:
    """The defaults a :class:`CellWork` that lives in one folder ``out`` shares (a lens's work, a recipe
    selection): bound under a run directory by replacing ``out``, no tasks of its own, writing into no other
    job's folder, finished when its folder is marked ``DONE`` and timed by that marker alone."""

    out: Path

    def at(self, root: Path) -> Any:
        return dataclasses.replace(self, out=Path(root) / self.out)  # type: ignore[type-var]

    def tasks(self, job_id: str, cost: float) -> list[Any]:
        return []

    def writes_into(self) -> tuple[Path, ...]:
        return ()

    def finished(self) -> bool:
        return io.is_done(self.out)

    def seconds_taken(self) -> float | None:
        return io.done_seconds(self.out)

    def task_seconds(self) -> float | None:
        return 0.0


@dataclass(frozen=True)
class Lens:
    """A registered lens: its static :class:`LensSpec` and its runtime part.

    Every field of the spec reads through (``lens.name``, ``lens.stage``, ``lens.results``... are
    ``lens.spec.name``...; their meaning is documented once, on :class:`LensSpec`).

    Attributes:
        spec: its static declaration (what the report and the CLI listing read).
        config: its pydantic config class. A per-cell lens's config is an
            :class:`~bnmem.config.ExperimentConfig` subclass; a once-per-study
            lens's config holds only its own options.
        run: its :class:`Runner`.
        summary: ``summary(results) -> str``, the table a command prints.
        hook: the per-epoch measurement :data:`HookFactory` (None: none).
        work: its :class:`CellWork` class, a subclass of :class:`bnmem.lenses.work.LensWork` (None: that class):
            what it trains and writes beyond every (norm, seed) once, the graph tasks of the spec's ``phases``,
            which a study runs for every cell at once before ``run``, which finds them finished.
            :func:`bnmem.lenses.work.lens_work` makes one.
    """

    spec: LensSpec
    config: type[BaseModel]
    run: Runner
    summary: Callable[[dict[str, Any]], str] | None = None
    hook: HookFactory | None = None
    work: type | None = None

    @classmethod
    def of(cls, spec: LensSpec, **runtime: Any) -> "Lens":
        """The lens declared by ``spec`` with its runtime part (``config``, ``run``, ``summary``, ``hook``...)."""
        return cls(spec, **runtime)

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes the Lens itself lacks: the spec's fields read through.
        if name in _SPEC_FIELDS:
            return getattr(self.spec, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def stamp(self, results: dict[str, Any]) -> dict[str, Any]:
        """``results`` with this lens's name and schema version first (what every results file carries)."""
        return {LENS_KEY: self.name, SCHEMA_KEY: self.schema_version,
                **{k: v for k, v in results.items() if k not in (LENS_KEY, SCHEMA_KEY)}}

    def validate(self, config: dict[str, Any], where: str = "") -> BaseModel:
        """Validate a plain config dict with this lens's model.

        Raises:
            BnmemError: one line naming each bad key's path (prefixed by ``where``).
        """
        try:
            return self.config.model_validate(config)
        except ValidationError as e:
            prefix = "invalid study: " if where else "invalid configuration: "
            raise BnmemError(prefix + validation_line(e, where)) from e


# Built-in lenses (bnmem.names, the one table of lens names): name -> the module that registers it,
# in the order a study runs them (cheap first; membership inference last); their specs: spec.SPECS.
BUILTIN = BUILTIN_LENSES
_REGISTRY: dict[str, Lens] = {}
_plugins_loaded = False


def register(lens: Lens, *, replace: bool = False) -> Lens:
    """Add ``lens`` to the registry and return it.

    Args:
        lens: the lens.
        replace: replace a lens already registered under the same name (tests, interactive work).

    Raises:
        BnmemError: the name is taken (by a registered lens, or by a built-in lens that another
            module tries to register) and ``replace`` is False.
    """
    owner = BUILTIN.get(lens.name)
    module = getattr(lens.run, "__module__", "") or ""
    if not replace:
        if lens.name in _REGISTRY:
            taken = getattr(_REGISTRY[lens.name].run, "__module__", "?")
            raise BnmemError(f"a lens named {lens.name!r} is already registered (by {taken}); "
                             "pass replace=True to replace it")
        if owner is not None and not module.startswith(owner):
            raise BnmemError(f"lens name {lens.name!r} belongs to the built-in lens in {owner}; "
                             "choose another name (or pass replace=True)")
    if lens.spec.takes_recipe != ("recipe" in lens.config.model_fields):
        raise BnmemError(f"lens {lens.name!r}: its spec's takes_recipe ({lens.spec.takes_recipe}) disagrees with "
                         "its config (a recipe field there or not)")
    _REGISTRY[lens.name] = lens
    specs.add(lens.spec)
    return lens


def unregister(name: str) -> None:
    """Remove a lens (tests register toy lenses and clean up after themselves)."""
    _REGISTRY.pop(name, None)
    specs.remove(name)


def loaded(name: str) -> Lens | None:
    """The lens registered under ``name`` if its module is already loaded, else None (imports nothing)."""
    return _REGISTRY.get(name)


def _load_builtin(name: str) -> None:
    module = BUILTIN[name]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            raise BnmemError(f"lens {name!r} is not available in this installation ({module} is missing)") from e
        raise
    if name not in _REGISTRY:
        raise BnmemError(f"{module} does not register a lens named {name!r}")


def canonical(name: str) -> str:
    """The registered spelling of a lens name or alias (``gamma_sigma`` → ``gamma-sigma``, ``rmia`` → ``lira``),
    read from the specs (no lens module is imported).

    Raises:
        BnmemError: no lens by that name.
    """
    return specs.canonical(name)


def get(name: str) -> Lens:
    """The lens registered under ``name`` (or one of its aliases).

    Raises:
        BnmemError: unknown name, or its module is not installed.
    """
    name = canonical(name)
    if name not in _REGISTRY:
        _load_builtin(name)
    return _REGISTRY[name]


def all_lenses() -> list[Lens]:
    """Every lens: built-ins in study order, then the others in registration order."""
    for name in BUILTIN:
        if name not in _REGISTRY:
            try:
                _load_builtin(name)
            except BnmemError:
                continue  # not installed: absent from the list
    builtin = [_REGISTRY[n] for n in BUILTIN if n in _REGISTRY]
    return builtin + [lens for n, lens in _REGISTRY.items() if n not in BUILTIN]


def plugin_lenses() -> list[Lens]:
    """Lenses registered by other installed packages (entry-point group ``bnmem.lenses``: each entry
    names a module that calls :func:`register` on import; loaded once per process) or by code already
    imported (e.g. a test)."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        _load_plugins()
    return [lens for n, lens in _REGISTRY.items() if n not in BUILTIN]


def _load_plugins() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group="bnmem.lenses"):
        try:
            ep.load()
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break the CLI
            import warnings

            warnings.warn(f"bnmem: lens plugin {ep.name!r} could not be loaded: {e}", stacklevel=2)


def names() -> list[str]:
    """Registered lens names, built-ins first, without importing any lens module."""
    return specs.names()
