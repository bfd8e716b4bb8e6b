"""The study YAML schema: base experiment config + grid + lenses, validated by pydantic.

Every model rejects unknown keys, so a typo fails with its path
(``grid.datasetz: Extra inputs are not permitted``). A per-cell lens's options
are checked against that lens's own config when the study is planned (see
:func:`bnmem.study.plan`). The schema with an example is in :mod:`bnmem.study`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, Field, field_validator, model_validator

from bnmem.config import ARCH_ALIASES, ARCHS, DATASETS, NORMS, DataConfig, StrictModel, TrainConfig, validate_rate
from bnmem.errors import BnmemError
from bnmem.lenses.registry import LENSES, canonical_lens
from bnmem.theory.config import TheoryConfig

class Outliers(StrictModel):
    """One outlier setting of the grid: flipped labels and/or OOD inputs."""

    label_noise: float = Field(0.0, description="fraction of training labels flipped")
    ood: float = Field(0.0, description="fraction of the training set that is OOD")
    ood_source: str = Field("noise", description="'noise', 'heldout-classes' or a dataset name")

    _rate = field_validator("label_noise", "ood")(validate_rate)

    def tag(self) -> str:
        """Folder-name part: ``flip0.05``, ``ood0.05-noise``, both, or ``clean``."""
        parts = []
        if self.label_noise > 0:
            parts.append(f"flip{self.label_noise:g}")
        if self.ood > 0:
            parts.append(f"ood{self.ood:g}-{self.ood_source}")
        return "-".join(parts) or "clean"


def _check_archs(archs: list[str]) -> list[str]:
    archs = [ARCH_ALIASES.get(a, a) for a in archs]
    for a in archs:
        if a not in ARCHS:
            raise ValueError(f"unknown architecture {a!r}; choose one of {', '.join(ARCHS)} (or 'resnet')")
    return archs


def _check_norms(norms: list[str]) -> list[str]:
    for n in norms:
        if n not in NORMS:
            raise ValueError(f"unknown norm {n!r}; choose one of {', '.join(NORMS)}")
    return norms


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

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, v: list[str] | None) -> list[str] | None:
        for d in v or []:
            if d not in DATASETS:
                raise ValueError(f"unknown dataset {d!r}; choose one of {', '.join(DATASETS)}")
        return _nonempty(v, "datasets")

    @field_validator("archs")
    @classmethod
    def _archs(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _nonempty(_check_archs(v), "archs")

    @field_validator("norms")
    @classmethod
    def _norms(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _nonempty(_check_norms(v), "norms")

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

    Only ``epochs`` is declared here; every other key is checked against the
    lens's own config model when the study is loaded (unknown keys are errors
    there, with their path).
    """

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    epochs: int | None = Field(None, ge=1, description="short for train.epochs (or the lens's own epochs field)")


class RmiaOptions(StrictModel):
    """``rmia`` has no options of its own: it is reported by the lira lens (set those under ``lira``)."""


class Lenses(StrictModel):
    """The lenses to run; absent = not run. A YAML list of names means defaults for each."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    memorize: LensOptions | None = None
    gamma_sigma: LensOptions | None = Field(None, alias="gamma-sigma")
    gradnorms: LensOptions | None = None
    mitigate: LensOptions | None = None
    lira: LensOptions | None = None
    rmia: RmiaOptions | None = None
    theory: TheoryConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalize(cls, v: Any) -> Any:
        # `lenses: [memorize, lira]` and `memorize:` (YAML null) both mean "run with defaults";
        # `memorize: false` (e.g. --set lenses.memorize=false) means "don't run it".
        if isinstance(v, list):
            if not all(isinstance(x, str) for x in v):
                raise ValueError("a list of lenses must hold lens names")
            v = {x: {} for x in v}
        if isinstance(v, dict):
            v = {canonical_lens(k) if isinstance(k, str) else k: ({} if o is None or o is True else o)
                 for k, o in v.items() if o is not False}
        return v

    def enabled(self) -> list[str]:
        """Lens names to run, in :data:`~bnmem.lenses.registry.LENSES` order."""
        return [name for name in LENSES if self.options(name) is not None]

    def options(self, name: str) -> StrictModel | None:
        return getattr(self, name.replace("-", "_"))


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

    @field_validator("arch")
    @classmethod
    def _arch(cls, v: str) -> str:
        return _check_archs([v])[0]

    @field_validator("norms")
    @classmethod
    def _norms(cls, v: list[str]) -> list[str]:
        return _nonempty(_check_norms(v), "norms")

    @model_validator(mode="after")
    def _some_lens(self) -> "Study":
        if not self.lenses.enabled():
            raise ValueError(f"lenses: name at least one of {', '.join(LENSES)}")
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
