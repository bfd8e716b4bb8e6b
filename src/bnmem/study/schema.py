"""The study YAML schema: base experiment config + grid + lenses, validated by pydantic.

Every model rejects unknown keys, so a typo fails with its path
(``grid.datasetz: Extra inputs are not permitted``). A per-cell lens's options
are checked against that lens's own config when the study is planned (see
:func:`bnmem.study.build_jobs`). The schema with an example is in :mod:`bnmem.study`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, Field, RootModel, field_validator, model_validator

from bnmem.config import (
    DataConfig, StrictModel, TrainConfig, check_arch, check_dataset, check_norms, validate_rate,
)
from bnmem.errors import BnmemError
from bnmem.lenses import registry
from bnmem.lenses.spec import find as spec_of
from bnmem.names import DEFAULT_RECIPES, FAIR_ARMS, FAIR_ARMS_VAL_FRACTION
from bnmem.power import MAX_UNITS

# The most replicates a study may ask for: what `bnmem design --propose` can propose (power's search limit, plus the
# replicate that selects claim 6's λ). More would take hours to plan, not a typo's one error line.
MAX_REPLICATES = MAX_UNITS + 1

class Outliers(StrictModel):
    """One outlier setting of the grid: flipped labels and/or OOD inputs."""

    label_noise: float = Field(0.0, description="fraction of training labels flipped")
    ood: float = Field(0.0, description="fraction of the training set that is OOD")
    ood_source: str = Field("noise", description="'noise', 'heldout-classes' or a dataset name")

    _rate = field_validator("label_noise", "ood")(validate_rate)

    @property
    def injected(self) -> bool:
        """Whether the setting injects outliers (flipped labels or OOD inputs); False on clean data."""
        return self.label_noise > 0 or self.ood > 0

    def tag(self) -> str:
        """Folder-name part: ``flip0.05``, ``ood0.05-noise``, both, or ``clean``."""
        parts = []
        if self.label_noise > 0:
            parts.append(f"flip{self.label_noise:g}")
        if self.ood > 0:
            parts.append(f"ood{self.ood:g}-{self.ood_source}")
        return "-".join(parts) or "clean"


def _nonempty(v: list | None, what: str) -> list | None:
    if v is not None and not v:
        raise ValueError(f"{what} must not be empty (omit it to use the base config's value)")
    if v is not None and len(set(map(str, v))) != len(v):
        raise ValueError(f"{what} lists a value twice")
    return v


class Grid(StrictModel):
    """What varies across cells (datasets × archs × outliers) and inside them (norms, seeds).

    Every field defaults to the base config's value.
    """

    datasets: list[str] | None = None
    archs: list[str] | None = None
    norms: list[str] | None = None
    outliers: list[Outliers] | None = None
    seeds: list[int] | None = None

    replicates: int = Field(1, ge=1, le=MAX_REPLICATES, description="independent replicates of every cell (data, keep-matrix "
                                                 "and model seeds all change with the replicate)")
    recipes: list[Literal["shared", "per-norm"]] = Field(
        list(DEFAULT_RECIPES), min_length=1, description="training recipes compared: per-norm (fair arms, the "
        "default: each norm's learning rate and epochs selected on the validation split, once per setting; "
        "cells of their own, for the lenses that take a recipe) and/or shared (the paper's protocol: one "
        "recipe, the same epochs, for every norm)")
    lr_grid: list[float] | None = Field(None, description="per-norm recipes: the candidate learning rates "
                                        "(default: train.lr times bnmem.train.recipe.LR_FACTORS)")
    max_epochs: int | None = Field(None, ge=1, description="per-norm recipes: the plateau rule's cap on epochs "
                                   "(default: bnmem.train.recipe.PLATEAU_CAP_FACTOR times train.epochs)")

    @field_validator("recipes")
    @classmethod
    def _recipes(cls, v: list[str]) -> list[str]:
        return _nonempty(v, "recipes")

    @field_validator("lr_grid")
    @classmethod
    def _lr_grid(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (not v or any(not (x > 0 and math.isfinite(x)) for x in v)):
            raise ValueError(f"lr_grid must list positive learning rates, got {v}")
        return v

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _nonempty([check_dataset(d) for d in v], "datasets")

    @field_validator("archs")
    @classmethod
    def _archs(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _nonempty([check_arch(a) for a in v], "archs")

    @field_validator("norms")
    @classmethod
    def _norms(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else check_norms(_nonempty(v, "norms"))

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int] | None) -> list[int] | None:
        return _nonempty(v, "seeds")

    @field_validator("outliers")
    @classmethod
    def _outliers(cls, v: list[Outliers] | None) -> list[Outliers] | None:
        if v is not None and len({o.tag() for o in v}) != len(v):
            raise ValueError("outliers lists the same setting twice")
        return _nonempty(v, "outliers")


class LensOptions(StrictModel):
    """Options of a per-cell lens: a partial config of that lens.

    ``epochs``, ``replicates``, ``archs`` and ``clean`` are declared here; every other key
    is checked against the lens's own config model when the study is loaded
    (unknown keys are errors there, with their path). ``replicates``, ``archs``
    and ``clean`` allot the lens to part of the grid (a study sized for the claims
    that need many replicates runs the expensive lenses only where their claims
    need them; a lens that measures outliers has nothing to measure on clean data).
    """

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    epochs: int | None = Field(None, ge=1, description="short for train.epochs (or the lens's own epochs field)")
    replicates: int | None = Field(None, ge=1, le=MAX_REPLICATES, description="run the lens on the first N replicates only "
                                                           "(default: all); a lens with a replicates field of "
                                                           "its own (defenses) takes it as that")
    archs: list[str] | None = Field(None, description="run the lens only in these architectures' cells (default: "
                                                      "every architecture of the grid)")
    clean: bool = Field(True, description="run the lens in the grid's clean-data cells too (false: only where the "
                                          "grid injects flipped labels or OOD inputs)")

    @field_validator("archs")
    @classmethod
    def _archs(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _nonempty([check_arch(a) for a in v], "archs")

    def allots(self, arch: str, replicate: int | None, injected: bool = True) -> bool:
        """Whether the lens runs in a cell of this architecture and replicate (``injected``: the cell's data
        carry injected outliers)."""
        in_reps = self.replicates is None or (replicate or 0) < self.replicates
        return in_reps and (self.archs is None or arch in self.archs) and (self.clean or injected)


class Lenses(RootModel[dict[str, dict[str, Any]]]):
    """The lenses to run: lens name -> its options (absent = not run).

    A YAML list of names means defaults for each; ``name: false`` switches one
    off under all its names (``--set lenses.lira=false`` drops ``rmia`` too). Names are registered lens names or
    their aliases (``gamma_sigma``; ``rmia``, which runs the lira lens: its
    attack evaluation reports RMIA). A per-cell lens's options are a
    :class:`LensOptions`, checked against the lens's own config when the study
    is planned; a once-per-study lens's options are its config.
    """

    @model_validator(mode="before")
    @classmethod
    def _normalize(cls, v: Any) -> Any:
        if isinstance(v, list):
            if not all(isinstance(x, str) for x in v):
                raise ValueError("a list of lenses must hold lens names")
            v = {x: {} for x in v}
        if not isinstance(v, dict):
            raise ValueError("lenses must be a list of lens names or a mapping name -> options")
        out: dict[str, dict[str, Any]] = {}
        try:
            # `name: false` switches the lens off under every name: `lira: false` drops `rmia` too.
            off = {registry.canonical(str(key)) for key, opts in v.items() if opts is False}
        except BnmemError as e:
            raise ValueError(str(e)) from None
        for key, opts in v.items():
            if opts is False:
                continue
            try:
                name = registry.canonical(str(key))
            except BnmemError as e:
                raise ValueError(str(e)) from None
            if name in off:
                continue
            opts = {} if opts is None or opts is True else opts
            if not isinstance(opts, dict):
                raise ValueError(f"{key}: options must be a mapping, got {type(opts).__name__}")
            # Options are validated by build_jobs(), with their full path.
            if name == "lira" and key != name:
                # `rmia` stays listed under its own name (index.json points it at lira's folder).
                if opts:
                    raise ValueError(f"{key}: it runs the lira lens and takes no options of its own; "
                                     f"set them under lira")
                out[str(key)] = {}
                continue
            out[name] = dict(opts)
        return out

    def enabled(self) -> list[str]:
        """Registered names of the lenses to run, in registry order (``rmia`` → ``lira``)."""
        chosen = {registry.canonical(k) for k in self.root}
        return [name for name in registry.names() if name in chosen]

    def asked(self) -> dict[str, str]:
        """Name as written in the study -> registered name (index.json lists both ``rmia`` and ``lira``)."""
        return {k: registry.canonical(k) for k in self.root}

    def options(self, name: str) -> dict[str, Any] | None:
        """The options given for lens ``name`` (merged over its aliases), or None when it does not run."""
        found = [o for k, o in self.root.items() if registry.canonical(k) == registry.canonical(name)]
        if not found:
            return None
        merged: dict[str, Any] = {}
        for o in found:
            merged.update(o)
        return merged


class Resources(StrictModel):
    """Per-job resource request handed to the executor (the local executor ignores it)."""

    num_cpus: float = Field(1, gt=0)
    num_gpus: float = Field(0, ge=0)


class Study(StrictModel):
    """A whole study: base experiment config + grid + lenses."""

    name: str = Field(..., min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    description: str = ""
    data: DataConfig = DataConfig()
    arch: str = "lenet"
    norms: list[str] = ["batch", "none"]
    seeds: list[int] = [0, 1, 2]
    train: TrainConfig = TrainConfig()
    grid: Grid = Grid()
    lenses: Lenses
    resources: Resources = Resources()

    _arch = field_validator("arch")(check_arch)
    _norms = field_validator("norms")(check_norms)

    @model_validator(mode="after")
    def _some_lens(self) -> "Study":
        if not self.lenses.enabled():
            raise ValueError(f"lenses: name at least one of {', '.join(registry.names())}")
        return self

    @model_validator(mode="after")
    def _validation_split(self) -> "Study":
        # Per-norm recipes select on a validation split: a study that runs a lens taking a recipe and does not
        # size a split gets the declared default (a study of other lenses keeps its data as they are).
        takes = any((s := spec_of(n)) is not None and s.takes_recipe for n in self.lenses.enabled())
        if FAIR_ARMS in self.grid.recipes and takes and self.data.val_fraction <= 0:
            if "val_fraction" in self.data.model_fields_set:
                raise ValueError("grid.recipes: per-norm recipes select on a validation split: set "
                                 "data.val_fraction > 0, or grid.recipes: [shared] (the paper's protocol)")
            self.data = self.data.model_copy(update={"val_fraction": FAIR_ARMS_VAL_FRACTION})
        return self


def read_study_yaml(path: str | Path) -> dict[str, Any]:
    """Read a study file into a dict.

    Raises:
        BnmemError: missing/unreadable file, malformed YAML, or not a mapping.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BnmemError(f"study file {path} does not exist") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise BnmemError(f"cannot read study file {path}: {type(e).__name__}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "malformed YAML"
        raise BnmemError(f"{path} is not valid YAML: {problem}{where}") from None
    if not isinstance(doc, dict):
        raise BnmemError(f"{path} must hold a mapping (name, data, train, grid, lenses), got {type(doc).__name__}")
    return doc
