"""The γ/σ regularizer: keep each BN channel's scale ratio in check.

BN multiplies an outlier's per-step margin growth by (γ/σ)² (see
:mod:`bnmem.theory`), so the penalty

    R = λ · mean over BN channels c of relu(|γ_c| / σ_c − τ)²

with σ_c = sqrt(Var_batch[x_c] + eps) of the current training batch, is added to
the loss. It is differentiable through γ and through the batch σ (so it can
also act by widening the pre-normalization features).
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnmem.models.norms import batch_sigma


def gamma_sigma_penalty(gammas: Iterable[torch.Tensor], sigmas: Iterable[torch.Tensor], lam: float,
                        tau: float) -> torch.Tensor:
    """λ · mean over all channels of relu(|γ|/σ − τ)² (channels of all layers pooled)."""
    ratios = torch.cat([g.abs() / s for g, s in zip(gammas, sigmas)])
    return lam * torch.relu(ratios - tau).pow(2).mean()


class GammaSigmaRegularizer:
    """Loss hook for :func:`bnmem.train.train_model` (``extra_loss=``).

    Forward hooks record each selected BN layer's training-batch σ during the
    forward pass; calling the object after that forward returns the penalty.

    Args:
        model: the model being trained.
        lam: λ (0 disables the penalty).
        tau: τ, the ratio above which channels are penalized.
        layers: names of the BN layers to regularize (default: all).
    """

    def __init__(self, model: nn.Module, lam: float, tau: float = 1.0, layers: list[str] | None = None,
                 track_activity: bool = False) -> None:
        self.lam, self.tau = lam, tau
        # The per-epoch diagnostic the trainer records; off for a user's own loop, which never reads it.
        self.track_activity = track_activity
        self.modules: list[tuple[str, _BatchNorm]] = [
            (n, m) for n, m in model.named_modules()
            if isinstance(m, _BatchNorm) and m.affine and (layers is None or n in layers)
        ]
        self._sigma: dict[str, torch.Tensor] = {}
        self._handles = [m.register_forward_pre_hook(self._make_hook(n)) for n, m in self.modules]
        self._above: list[float] = []  # per step: fraction of channels with |γ|/σ above τ (the penalty's reach)

    def _make_hook(self, name: str):
        def hook(module: _BatchNorm, args: tuple) -> None:
            if module.training:
                self._sigma[name] = batch_sigma(args[0], module.eps)

        return hook

    def __call__(self, model: nn.Module) -> torch.Tensor:
        if not self.modules or self.lam == 0:
            return torch.zeros(())
        missing = [n for n, _ in self.modules if n not in self._sigma]
        if missing:
            raise RuntimeError(f"no training-mode forward pass recorded for BN layers {missing}: call the penalty "
                               "once after each forward pass of the model in training mode (model.train())")
        gammas, sigmas = [m.weight for _, m in self.modules], [self._sigma[n] for n, _ in self.modules]
        penalty = gamma_sigma_penalty(gammas, sigmas, self.lam, self.tau)
        if self.track_activity:
            with torch.no_grad():
                ratios = torch.cat([g.abs() / s for g, s in zip(gammas, sigmas)])
                self._above.append(float((ratios > self.tau).float().mean()))
        self._sigma.clear()
        return penalty

    def epoch_activity(self) -> dict[str, float]:
        """``{"gs_frac_above_tau"}``: the mean over this epoch's steps of the fraction of channels the penalty
        acts on (|γ|/σ above τ, batch σ); resets for the next epoch. The trainer adds it to the history."""
        out = {"gs_frac_above_tau": float(sum(self._above) / len(self._above))} if self._above else {}
        self._above.clear()
        return out

    def remove(self) -> None:
        """Detach the hooks from the model (the penalty is 0 afterwards)."""
        for h in self._handles:
            h.remove()
        self.modules = []


class GammaSigmaPenalty:
    """The γ/σ regularizer for your own training loop: ``loss = loss + penalty()``.

    Call it after each training-mode forward pass of ``model``; it returns
    ``lam · mean over BN channels of relu(|γ|/σ − tau)²`` with σ the standard deviation of
    that batch's input to each BN layer (differentiable through γ and σ), the
    penalty :class:`bnmem.train.train_model` adds with ``gs_reg``. A model without
    affine BatchNorm layers gets 0.

    Example::

        penalty = GammaSigmaPenalty(model, lam=0.1)
        loss = F.cross_entropy(model(x), y) + penalty()

    Args:
        model: the network being trained (its BN layers are hooked, not copied).
        lam: λ, the weight of the penalty (0 turns it off).
        tau: τ, the ratio |γ|/σ above which a channel is penalized.
        layers: names of the BN layers to regularize (default: all).

    A plain callable, not an ``nn.Module``: it owns no parameters and no state (nothing to move to a device, to
    save, or to hand to an optimizer), and ``help()`` shows its own few methods only.
    """

    def __init__(self, model: nn.Module, lam: float = 0.1, tau: float = 1.0, layers: list[str] | None = None) -> None:
        if lam < 0 or tau <= 0:
            raise ValueError(f"GammaSigmaPenalty needs lam >= 0 and tau > 0, got lam={lam}, tau={tau}")
        self.lam, self.tau = float(lam), float(tau)
        self._regularizer = GammaSigmaRegularizer(model, self.lam, self.tau, layers)

    @property
    def layers(self) -> list[str]:
        """Names of the BN layers the penalty watches."""
        return [n for n, _ in self._regularizer.modules]

    def __call__(self) -> torch.Tensor:
        """The penalty of the last training-mode forward pass (a scalar tensor)."""
        return self._regularizer(None)

    forward = __call__  # the name an nn.Module user reaches for

    def remove(self) -> None:
        """Detach the hooks from the model (the penalty is 0 afterwards)."""
        self._regularizer.remove()

    def __repr__(self) -> str:
        return f"GammaSigmaPenalty(lam={self.lam}, tau={self.tau}, layers={len(self.layers)})"
