"""The toy task: 1-D signals with class-specific bumps, a few of them turned into outliers."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bnmem.theory.config import TheoryConfig
from bnmem.theory.model import DTYPE


@dataclass(frozen=True)
class ToyData:
    """Training set with outliers, and the same set with each outlier replaced by its clean counterpart."""

    x: torch.Tensor  # (N, L) float64
    y: torch.Tensor  # (N,) int64
    outlier_idx: torch.Tensor  # (n_outliers,) int64, sorted
    x_clean: torch.Tensor
    y_clean: torch.Tensor


def make_toy_data(cfg: TheoryConfig) -> ToyData:
    """Classes are Gaussian bumps at class-specific positions (random shift, white noise).

    Outliers: ``flip`` gives a sample a wrong label; ``ood`` replaces its input by
    white noise of unit variance and gives it a random label. Both need the
    classifier to fit the sample's own noise, i.e. to memorize it.

    Args:
        cfg: the simulation's config (seed, sizes, noise, outlier kind).

    Returns:
        The corrupted training set and its clean counterpart, float64.
    """
    g = torch.Generator().manual_seed(cfg.seed)
    c, n_pc, length = cfg.n_classes, cfg.n_per_class, cfg.length
    n = c * n_pc
    y = torch.arange(c).repeat_interleave(n_pc)
    pos = torch.arange(length, dtype=DTYPE)
    shift = (torch.rand(n, generator=g, dtype=DTYPE) * 2 - 1) * (length / (c + 1) / 4)
    centers = (y.to(DTYPE) + 1) * length / (c + 1) + shift
    width = max(1.0, length / (8 * c))
    x = torch.exp(-0.5 * ((pos[None] - centers[:, None]) / width) ** 2)
    x = x + cfg.noise * torch.randn(n, length, generator=g, dtype=DTYPE)

    idx = torch.randperm(n, generator=g)[: cfg.n_outliers].sort().values
    x_out, y_out = x.clone(), y.clone()
    if cfg.outlier_kind == "flip":
        # A uniformly random *other* class: add 1..C-1 modulo C.
        y_out[idx] = (y[idx] + torch.randint(1, c, (len(idx),), generator=g)) % c
    else:
        x_out[idx] = torch.randn(len(idx), length, generator=g, dtype=DTYPE)
        y_out[idx] = torch.randint(0, c, (len(idx),), generator=g)
    return ToyData(x=x_out, y=y_out, outlier_idx=idx, x_clean=x, y_clean=y)
