"""Functional SGD / Adam over the stacked parameters of K models, with per-model masks.

The ensemble trainer keeps the parameters of K models as stacked tensors
``[K, *shape]`` (one per parameter name). This optimizer applies, slice by
slice, exactly the update ``torch.optim.SGD`` / ``torch.optim.Adam`` (their
single-tensor CPU implementations, as built by
:func:`bnmem.train.optim.build_optimizer`) would apply to each model alone:
the same elementwise ops in the same order, so the only differences to the
plain trainer come from the gradients, not from the optimizer.

A model whose training set ran out of full batches before the others' skips
the step: its parameters, momentum buffer, Adam moments and Adam step count
are left exactly as they were (the masked rows are restored after the
vectorized update, so no ``0 * momentum`` style approximation is involved).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bnmem.config import TrainConfig
from bnmem.train.optim import param_groups

# torch.optim.Adam defaults, which build_optimizer relies on.
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def weight_decay_by_name(model: nn.Module, cfg: TrainConfig) -> dict[str, float]:
    """The weight decay each named parameter of ``model`` gets under :func:`param_groups`.

    Args:
        model: one model of the ensemble (all share the architecture).
        cfg: the training recipe.

    Returns:
        ``{parameter name: weight decay}`` for every trainable parameter.
    """
    by_id = {id(p): g["weight_decay"] for g in param_groups(model, cfg) for p in g["params"]}
    return {n: float(by_id[id(p)]) for n, p in model.named_parameters() if id(p) in by_id}


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` [K] shaped to broadcast over a stacked tensor [K, ...]."""
    return mask.view(-1, *([1] * (like.ndim - 1)))


class StackedOptimizer:
    """SGD (heavy-ball momentum) or Adam on stacked parameters ``{name: [K, ...]}``.

    Args:
        params: stacked parameters, updated in place.
        weight_decay: decay per parameter name (see :func:`weight_decay_by_name`).
        cfg: the recipe (``optimizer``, ``momentum``).

    Raises:
        KeyError: a parameter has no weight-decay entry.
    """

    def __init__(self, params: dict[str, torch.Tensor], weight_decay: dict[str, float], cfg: TrainConfig) -> None:
        self.params = params
        self.wd = {n: weight_decay[n] for n in params}
        self.kind = cfg.optimizer
        self.momentum = float(cfg.momentum)
        first = next(iter(params.values()))
        self.n_models = int(first.shape[0])
        self._by_decay: dict[float, list[str]] = {}
        for n in params:
            self._by_decay.setdefault(self.wd[n], []).append(n)
        # Zero-initialized state: momentum*0 + g == g exactly, so a zero buffer
        # reproduces torch's "buffer = clone(grad)" first step bit for bit, and
        # also holds for models whose first steps are masked.
        if self.kind == "sgd":
            self.bufs = {n: torch.zeros_like(p) for n, p in params.items()} if self.momentum != 0 else {}
        else:
            self.exp_avg = {n: torch.zeros_like(p) for n, p in params.items()}
            self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in params.items()}
            # Per-model step counts on the host: Adam's bias corrections are
            # Python floats in torch's CPU implementation.
            self.steps = np.zeros(self.n_models, dtype=np.int64)

    def _state(self) -> list[dict[str, torch.Tensor]]:
        if self.kind == "sgd":
            return [self.params, self.bufs]
        return [self.params, self.exp_avg, self.exp_avg_sq]

    @torch.no_grad()
    def step(self, grads: dict[str, torch.Tensor], lr: float | torch.Tensor,
             active: torch.Tensor | None = None) -> None:
        """One update of every model (or only of the ``active`` ones).

        Args:
            grads: stacked gradients, same names and shapes as the parameters.
            lr: learning rate of this epoch: one for every model, or one per model (a float64 tensor [K]
                on the CPU; e.g. learning-rate candidates trained together).
            active: bool [K] on the CPU, False for models that skip this step;
                None when all models step.
        """
        if active is not None and bool(active.all()):
            active = None
        snapshot = None
        if active is not None:
            # Only the skipping models' rows are saved and put back (exactly).
            rows = (~active).nonzero().view(-1).to(next(iter(self.params.values())).device)
            snapshot = [{n: t.index_select(0, rows) for n, t in d.items()} for d in self._state()]
        if isinstance(lr, torch.Tensor) and bool((lr == lr[0]).all()):
            lr = float(lr[0])
        if self.kind == "sgd":
            self._sgd(grads, lr)
        else:
            self._adam(grads, lr, active)
        if snapshot is not None:
            for cur, old in zip(self._state(), snapshot):
                for n, t in cur.items():
                    t.index_copy_(0, rows, old[n])

    def _sgd(self, grads: dict[str, torch.Tensor], lr: float | torch.Tensor) -> None:
        # Per tensor the op sequence of torch.optim.sgd._single_tensor_sgd
        # (dampening 0, no nesterov); the foreach ops only save dispatch overhead.
        for wd, names in self._by_decay.items():
            ps = [self.params[n] for n in names]
            gs = [grads[n] for n in names]
            if wd != 0:
                gs = torch._foreach_add(gs, ps, alpha=wd)
            if self.momentum != 0:
                bufs = [self.bufs[n] for n in names]
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, gs, alpha=1)
                gs = bufs
            if isinstance(lr, torch.Tensor):  # per-model learning rates: p − lr_k · g
                for p, g in zip(ps, gs):
                    p.sub_(g * _rows(lr.to(device=g.device, dtype=g.dtype), g))
            else:
                torch._foreach_add_(ps, gs, alpha=-lr)

    def _adam(self, grads: dict[str, torch.Tensor], lr: float | torch.Tensor, active: torch.Tensor | None) -> None:
        # Same op sequence as torch.optim.adam._single_tensor_adam (no amsgrad).
        beta1, beta2 = ADAM_BETAS
        if active is None:
            self.steps += 1
        else:
            self.steps[active.numpy()] += 1
        # A skipped model may not have stepped yet (count 0): its update is
        # discarded anyway, max(., 1) only keeps the arithmetic finite.
        steps = np.maximum(self.steps, 1)
        lrs = lr.tolist() if isinstance(lr, torch.Tensor) else [lr] * len(steps)
        uniform = bool((steps == steps[0]).all()) and not isinstance(lr, torch.Tensor)
        if uniform:
            bc1, bc2 = 1 - beta1 ** float(steps[0]), 1 - beta2 ** float(steps[0])
            step_size, bc2_sqrt = lr / bc1, bc2**0.5
        else:
            # Models at different step counts (different batches per epoch) or learning rates:
            # per-model scalars, rounded to the parameter dtype exactly as the
            # scalar arguments of the torch kernels are.
            first = next(iter(self.params.values()))
            bc1s = [1 - beta1 ** float(s) for s in steps]
            bc2s = [1 - beta2 ** float(s) for s in steps]
            neg_step = torch.tensor([-(r / b) for r, b in zip(lrs, bc1s)], dtype=first.dtype, device=first.device)
            bc2_sqrts = torch.tensor([b**0.5 for b in bc2s], dtype=first.dtype, device=first.device)
        for n, p in self.params.items():
            g = grads[n]
            if self.wd[n] != 0:
                g = g.add(p, alpha=self.wd[n])
            m, v = self.exp_avg[n], self.exp_avg_sq[n]
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            if uniform:
                denom = (v.sqrt() / bc2_sqrt).add_(ADAM_EPS)
                p.addcdiv_(m, denom, value=-step_size)
            else:
                denom = (v.sqrt() / _rows(bc2_sqrts, v)).add_(ADAM_EPS)
                # addcdiv computes p + value * m / denom; folding the per-model
                # value into m first gives the same roundings.
                p.addcdiv_(m * _rows(neg_step, m), denom)
