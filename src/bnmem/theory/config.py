"""The one configuration of the toy-model simulation (no torch import: the CLI reads its defaults)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from bnmem.config import StrictModel
from bnmem.errors import BnmemError

OUTLIER_KINDS = ("flip", "ood")


class TheoryConfig(StrictModel):
    """Everything that defines one toy-model simulation, validated once.

    The same model is the CLI's flags (``bnmem theory``), the study's
    ``lenses.theory`` block and the argument of :func:`bnmem.theory.run_theory`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(400, ge=1, description="full-batch gradient-descent steps of each run")
    lr: float = Field(0.05, gt=0, allow_inf_nan=False,
                      description="learning rate of every run and of the per-step probes")
    n_outliers: int = Field(4, ge=1, description="corrupted training samples (out of n_classes x n_per_class, 60 by default)")
    seed: int = Field(0, description="seeds data, corruption and initialization")
    n_per_class: int = Field(20, ge=2, description="clean samples per class")
    n_classes: int = Field(3, ge=2, description="classes of the toy task")
    length: int = Field(32, ge=2, description="length of every 1-D signal")
    kernel_size: int = Field(5, ge=1, description="conv kernel length (below the signal length, 32 by default)")
    noise: float = Field(0.3, ge=0, allow_inf_nan=False,
                         description="standard deviation of the white noise on every signal")
    outlier_kind: Literal["flip", "ood"] = Field(
        "flip", description="flip (wrong label) or ood (noise input, random label)")
    bn_eps: float = Field(1e-5, gt=0, description="BN's eps in sqrt(var + eps)")
    # Probe learning rates, as multiples of lr, for the first-order check; probed
    # every ``sweep_every`` steps of the BN run.
    sweep_factors: tuple[float, ...] = Field((0.25, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0), min_length=1)
    sweep_every: int = Field(10, ge=1, description="probe the learning-rate sweep every this many steps")
    counterfactual_seeds: int = Field(
        5, ge=1, description="seeds (seed, seed+1, ...) of the claim-5b counterfactual, run for each outlier kind")
    plot: bool = Field(True, description="also write theory.png")

    @field_validator("sweep_factors")
    @classmethod
    def _positive_factors(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not all(f > 0 and math.isfinite(f) for f in v):
            raise ValueError(f"sweep factors must be positive numbers, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TheoryConfig:
        n = self.n_classes * self.n_per_class
        if not self.n_outliers < n:
            raise ValueError(f"n_outliers must be between 1 and {n - 1}, got {self.n_outliers}")
        if self.length <= self.kernel_size:
            raise ValueError(f"need kernel_size < length, got kernel_size={self.kernel_size}, length={self.length}")
        return self

    def simulation_key(self) -> dict[str, Any]:
        """The fields that change the numbers (everything but ``plot``), JSON-ready."""
        return self.model_dump(mode="json", exclude={"plot"})

    @classmethod
    def from_options(cls, **options: Any) -> TheoryConfig:
        """Validate keyword options; a bad value is a one-line BnmemError naming the field.

        Raises:
            BnmemError: for an unknown key or an invalid value.
        """
        try:
            return cls(**options)
        except ValidationError as e:
            parts = []
            for err in e.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "theory"
                parts.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")
            raise BnmemError("invalid theory config: " + "; ".join(parts)) from None
