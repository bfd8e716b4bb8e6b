"""Optimizer with separate weight decay for weights and normalization parameters,
and the per-epoch learning-rate schedule."""

from __future__ import annotations

import math

import torch
from torch import nn

from bnmem.config import TrainConfig

_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


def param_groups(model: nn.Module, cfg: TrainConfig) -> list[dict]:
    """Split parameters: decay on weight matrices/kernels, ``norm_weight_decay`` on
    normalization γ/β, none on biases.

    Decay on γ is kept separate on purpose: it pulls γ/σ down, which is exactly the
    quantity the study measures, so it must be a deliberate setting.
    """
    norm_params: set[int] = set()
    for m in model.modules():
        if isinstance(m, _NORM_TYPES):
            norm_params.update(id(p) for p in m.parameters(recurse=False))
    decay, norm, no_decay = [], [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if id(p) in norm_params:
            norm.append(p)
        elif p.ndim >= 2:
            decay.append(p)
        else:
            no_decay.append(p)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": norm, "weight_decay": cfg.norm_weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """SGD with (heavy-ball) momentum, or Adam, over :func:`param_groups`."""
    groups = param_groups(model, cfg)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return torch.optim.Adam(groups, lr=cfg.lr)


def lr_at(cfg: TrainConfig, epoch: int) -> float:
    """Learning rate for 0-based ``epoch``; constant within an epoch."""
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "cosine":
        return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * epoch / cfg.epochs))
    # step: divide by 10 at 50% and again at 75% of training
    factor = 1.0
    if epoch >= cfg.epochs // 2:
        factor *= 0.1
    if epoch >= (3 * cfg.epochs) // 4:
        factor *= 0.1
    return cfg.lr * factor


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for g in optimizer.param_groups:
        g["lr"] = lr
