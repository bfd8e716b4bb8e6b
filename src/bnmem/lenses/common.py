"""Pieces shared by the experiment runners."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pydantic import model_validator

from bnmem.config import DataConfig, ModelConfig, StrictModel, TrainConfig


class ExperimentConfig(StrictModel):
    """Data + architecture + norms + seeds + recipe: what every lens starts from."""

    data: DataConfig = DataConfig()
    arch: str = "lenet"
    norms: list[str] = ["batch", "none"]
    seeds: list[int] = [0, 1, 2]
    train: TrainConfig = TrainConfig()

    @model_validator(mode="after")
    def _augment_fits_the_data(self) -> "ExperimentConfig":
        """A training augmentation the data cannot take (flips on digits, pad too large) fails here, in one line."""
        if self.train.augment != "none":
            from bnmem.data import augment, model_shape

            augment.spec_of(self.train, model_shape(self.data)[0], self.data.dataset)
        return self

    def model(self, norm: str) -> ModelConfig:
        return ModelConfig(arch=self.arch, norm=norm)

    def conditions(self) -> dict[str, Any]:
        """The conditions every result names (with what differs between norms at initialization)."""
        from bnmem.data import model_shape
        from bnmem.models.pairing import init_pairing

        shape, n_classes = model_shape(self.data)
        return {
            "dataset": self.data.dataset,
            "arch": self.arch,
            "norms": self.norms,
            "seeds": self.seeds,
            "label_noise": self.data.label_noise,
            "ood": self.data.ood,
            "ood_source": self.data.ood_source if self.data.ood > 0 else None,
            "init_pairing": init_pairing(self.arch, shape, n_classes, self.norms)["note"],
        }


def mean_curve(curves: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Per-epoch mean over seeds, ignoring missing values; None where all are missing."""
    arr = np.array([[np.nan if v is None else v for v in c] for c in curves], dtype=float)
    out = []
    for col in arr.T:
        ok = ~np.isnan(col)
        out.append(float(col[ok].mean()) if ok.any() else None)
    return out


def fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain fixed-width text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
