"""Validated configuration models shared by every experiment.

All models reject unknown keys, so a typo in a YAML study or a ``--set``
override fails with the key's path instead of being silently ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bnmem.augment_spec import spec_of
from bnmem.errors import BnmemError
from bnmem.names import ARCH_ALIASES, ARCHS, DATASETS, NORMS


def check_dataset(v: str) -> str:
    """A dataset name from :data:`bnmem.names.DATASETS` (the one table of datasets)."""
    if v not in DATASETS:
        raise ValueError(f"unknown dataset {v!r}; choose one of {', '.join(DATASETS)}")
    return v


def check_arch(v: str) -> str:
    """An architecture of :data:`bnmem.names.ARCHS` (the one table of architectures), aliases resolved."""
    name = ARCH_ALIASES.get(v, v)
    if name not in ARCHS:
        aliases = ", ".join(f"'{a}'" for a in ARCH_ALIASES)
        raise ValueError(f"unknown architecture {v!r}; choose one of {', '.join(ARCHS)} (or {aliases})")
    return name


def check_norm(v: str) -> str:
    """A normalization name of :data:`bnmem.names.NORMS`."""
    if v not in NORMS:
        raise ValueError(f"unknown norm {v!r}; choose one of {', '.join(NORMS)}")
    return v


def check_norms(v: list[str]) -> list[str]:
    """A non-empty list of distinct norms."""
    if not v:
        raise ValueError("norms must not be empty")
    if len(set(v)) != len(v):
        raise ValueError(f"norms lists a norm twice: {v}")
    return [check_norm(n) for n in v]


def validate_rate(v: float) -> float:
    """An outlier rate must lie in [0, 1) (1 would leave no clean example)."""
    if not 0.0 <= v < 1.0:
        raise ValueError(f"rate {v} is outside [0, 1)")
    return v


class StrictModel(BaseModel):
    """Base for config models: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(StrictModel):
    """Which data, and which outliers are injected into its training split."""

    dataset: str = "digits"
    data_root: Path | None = None
    download: bool = False
    label_noise: float = Field(0.0, description="fraction of training labels flipped")
    ood: float = Field(0.0, description="fraction of the training set that is OOD")
    ood_source: str = Field("noise", description="'noise', 'heldout-classes' or a dataset name")
    heldout_classes: list[int] | None = Field(
        None, description="classes held out for ood_source='heldout-classes' (default: the last 20%)"
    )
    train_size: int | None = Field(None, description="use only the first N training examples (after a seeded shuffle)")
    seed: int = Field(0, description="seed of the corruption (same across norms and model seeds)")
    val_fraction: float = Field(
        0.0, description="fraction of the in-distribution training pool held out (clean labels) as a validation "
                         "split for recipe and λ selection; it never trains a model and is never a LiRA candidate"
    )

    @field_validator("val_fraction")
    @classmethod
    def _val_fraction(cls, v: float) -> float:
        if not 0.0 <= v <= 0.5:
            raise ValueError(f"val_fraction {v} is outside [0, 0.5]")
        return v

    _dataset = field_validator("dataset")(check_dataset)
    _rate = field_validator("label_noise", "ood")(validate_rate)


class ModelConfig(StrictModel):
    """One architecture with one normalization."""

    arch: str = "lenet"
    norm: str = "batch"

    _arch = field_validator("arch")(check_arch)
    _norm = field_validator("norm")(check_norm)


class TrainConfig(StrictModel):
    """One training recipe, shared by the plain and the ensemble trainer."""

    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(5e-4, ge=0, description="decay on weight matrices/kernels")
    norm_weight_decay: float = Field(
        0.0, ge=0, description="decay on normalization γ/β (changes γ/σ: a deliberate choice)"
    )
    schedule: Literal["constant", "cosine", "step"] = "constant"
    epochs: int = Field(30, ge=1)
    batch_size: int = Field(64, ge=2)
    threads: int = Field(1, ge=1, description="torch intra-op threads per training job (fixes bitwise reproducibility)")
    gs_reg: float = Field(0.0, ge=0, description="λ of the γ/σ regularizer (0: off)")
    gs_tau: float = Field(1.0, gt=0, description="τ of the γ/σ regularizer")
    augment: Literal["none", "shift", "crop-flip"] = Field(
        "none", description="training augmentation: none, random shifts, or random crop + horizontal flip (CIFAR)"
    )
    augment_pad: int | None = Field(
        None, ge=1, description="maximal shift in pixels (None: max(1, H // 8): 1 on digits, 3 on MNIST, 4 on CIFAR)"
    )
    augment_padding: Literal["reflect", "zero"] = Field(
        "reflect", description="how shifted-in pixels are filled: reflected, or 0 (the normalized mean colour)"
    )
    device: str = "cpu"


class ExperimentConfig(StrictModel):
    """Data + architecture + norms + seeds + recipe: what every per-cell lens starts from.

    Every field is validated here, so a bad value fails before a run directory is touched.
    """

    data: DataConfig = DataConfig()
    arch: str = "lenet"
    norms: list[str] = ["batch", "none"]
    seeds: list[int] = [0, 1, 2]
    train: TrainConfig = TrainConfig()

    _arch = field_validator("arch")(check_arch)
    _norms = field_validator("norms")(check_norms)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("seeds must not be empty")
        if len(set(v)) != len(v):
            raise ValueError(f"seeds lists a seed twice: {v}")
        return v

    @model_validator(mode="after")
    def _augment_fits_the_data(self) -> ExperimentConfig:
        """A training augmentation the data cannot take (flips on digits, pad too large) fails here, in one line."""
        if self.train.augment != "none":
            spec_of(self.train, DATASETS[self.data.dataset].input_shape, self.data.dataset)
        return self

    def model(self, norm: str) -> ModelConfig:
        return ModelConfig(arch=self.arch, norm=norm)


def parse_list(value: str | list, kind=str) -> list:
    """Parse '1,2,3' (CLI) or a list (YAML) into a list of ``kind``."""
    if isinstance(value, (list, tuple)):
        return [kind(v) for v in value]
    return [kind(v.strip()) for v in str(value).split(",") if v.strip()]


def apply_overrides(config: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``a.b=c`` overrides (values parsed as YAML) to a nested config dict."""
    for item in overrides or []:
        if "=" not in item:
            raise BnmemError(f"--set expects KEY=VALUE (e.g. train.lr=0.1), got {item!r}")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise BnmemError(f"--set {key}: cannot parse value {raw!r}") from e
        node = config
        parts = key.strip().split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                if p in node:
                    raise BnmemError(f"--set {key}: {p!r} is not a section")
                node[p] = {}
            node = node[p]
        node[parts[-1]] = value
    return config


def validation_line(err: ValidationError, prefix: str = "") -> str:
    """'prefix.path: message; ...' for every error of a pydantic ValidationError."""
    parts = []
    for e in err.errors():
        loc = ".".join([*([prefix] if prefix else []), *(str(p) for p in e["loc"])]) or "config"
        parts.append(f"{loc}: {e['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)
