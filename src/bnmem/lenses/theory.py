"""The toy-model lens: one conv channel + linear classifier with and without BN (once per study)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from bnmem.config import StrictModel
from bnmem.errors import BnmemError
from bnmem.lenses.registry import Lens, register


class TheoryOptions(StrictModel):
    """Arguments of :func:`bnmem.theory.run_theory` (the toy model, once per study)."""

    steps: int = Field(400, ge=1)
    lr: float = Field(0.05, gt=0)
    n_outliers: int = Field(4, ge=1)
    seed: int = 0
    n_per_class: int = Field(20, ge=2)
    noise: float = Field(0.3, ge=0)
    kernel_size: int = Field(5, ge=1)
    outlier_kind: str = "flip"
    plot: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> "TheoryOptions":
        from bnmem.theory import TheoryConfig

        kw = self.model_dump(exclude={"plot"})
        try:
            TheoryConfig(**kw).validate()
        except BnmemError as e:
            raise ValueError(str(e)) from None
        return self


def run(cfg: TheoryOptions, out: Path, *, progress: bool = True, executor: Any = None) -> dict[str, Any]:
    """Run the toy-model simulation into ``out``."""
    from bnmem.theory import run_theory

    return run_theory(out, **cfg.model_dump())


def summary(result: dict[str, Any]) -> str:
    """``key: value`` lines of the scalar entries of the simulation's summary."""
    def lines(d: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict):
                out += lines(v, f"{prefix}{k}.")
            elif isinstance(v, float):
                out.append(f"{prefix}{k}: {v:.4g}")
            elif v is None or isinstance(v, (int, str)):
                out.append(f"{prefix}{k}: {v}")
        return out

    return "\n".join(lines(result))


LENS = register(Lens(
    name="theory", config=TheoryOptions, run=run, results="theory.json", figure="theory.png",
    title="Toy model: the (γ/σ)² amplification", summary=summary, per_cell=False, stage=0,
))
