"""Validated configuration models shared by every experiment.

All models reject unknown keys, so a typo in a YAML study or a ``--set``
override fails with the key's path instead of being silently ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DATASETS = ("digits", "mnist", "fashion-mnist", "cifar10", "cifar100")
NORMS = ("batch", "none", "group", "layer")
ARCHS = ("lenet", "mlp", "resnet20", "resnet18", "densenet")
# Aliases a user may type; resolved by ``canonical_arch``.
ARCH_ALIASES = {"resnet": "resnet20"}


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

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, v: str) -> str:
        if v not in DATASETS:
            raise ValueError(f"unknown dataset {v!r}; choose one of {', '.join(DATASETS)}")
        return v

    _rate = field_validator("label_noise", "ood")(validate_rate)


class ModelConfig(StrictModel):
    arch: str = "lenet"
    norm: str = "batch"

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, v: str) -> str:
        v = ARCH_ALIASES.get(v, v)
        if v not in ARCHS:
            raise ValueError(f"unknown architecture {v!r}; choose one of {', '.join(ARCHS)} (or 'resnet')")
        return v

    @field_validator("norm")
    @classmethod
    def _known_norm(cls, v: str) -> str:
        if v not in NORMS:
            raise ValueError(f"unknown norm {v!r}; choose one of {', '.join(NORMS)}")
        return v


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


def parse_list(value: str | list, kind=str) -> list:
    """Parse '1,2,3' (CLI) or a list (YAML) into a list of ``kind``."""
    if isinstance(value, (list, tuple)):
        return [kind(v) for v in value]
    return [kind(v.strip()) for v in str(value).split(",") if v.strip()]
