"""K models of any architecture at once with ``torch.func.vmap`` over ``grad``.

Parameters and buffers of the K models are stacked (``stack_module_state``)
and *both* are vmapped with ``in_dims=0``: each model's BatchNorm layers then
normalize with their own batch statistics and update their own slice of the
stacked running statistics and ``num_batches_tracked`` in place.
(``torch.func.replace_all_batch_norm_modules_`` is deliberately not used: it
stops BN from tracking running statistics, which the eval-mode queries of
every downstream measurement need.)

This is the generic path, meant for accelerators. On the CPU it is no faster
than the plain loop: the batching rules move the model dimension in and out
of the channels around every op (copies, NCHW max-pooling). Its results match
the plain trainer to rounding, but unlike the grouped LeNet they can differ in
the last bits with the number of models vmapped together.
"""

from __future__ import annotations

import copy
import itertools
import warnings
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap
from torch.nn.modules.batchnorm import _BatchNorm

from bnmem.data import augment
from bnmem.models.norms import batch_sigma
from bnmem.train.regularizer import gamma_sigma_penalty


def _to_param_dtype(module: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook: the input in the dtype of the module's parameters (see ``VmapEnsemble``)."""
    ref = next(itertools.chain(module.parameters(), module.buffers()), None)
    return args if ref is None or not ref.is_floating_point() else (args[0].to(ref.dtype), *args[1:])


class VmapEnsemble:
    """Training steps of K models of one architecture with a vmapped per-model gradient.

    Needs BN layers with a numeric ``momentum`` (the default): with
    ``momentum=None`` BN reads ``num_batches_tracked`` as a Python number,
    which a vmapped buffer cannot give.

    Args:
        models: the K models, already on the target device and dtype.
        x_all: all training inputs [N, ...] on the device.
        y_all: their labels [N].
        gs_reg: λ of the γ/σ regularizer (0: off); it covers affine BN layers,
            like :class:`bnmem.train.regularizer.GammaSigmaRegularizer`.
        gs_tau: τ of the regularizer.
        padding: padding mode of the training augmentation (when batches come with parameters).
        channels_last: present each model's image batch channels_last (default: on the CPU only). CUDA's
            batch norm cannot run under vmap on a channels_last input ("Tensor.clone(memory_format) inside
            vmap", seen with PyTorch 2.11 on an H200), and NCHW max-pooling is slow only on the CPU.
        autocast_dtype: run each forward pass under autocast to this dtype (bfloat16; None: off).
    """

    def __init__(self, models: list[nn.Module], x_all: torch.Tensor, y_all: torch.Tensor, gs_reg: float = 0.0,
                 gs_tau: float = 1.0, padding: str = "reflect", channels_last: bool | None = None,
                 autocast_dtype: torch.dtype | None = None) -> None:
        self.k = len(models)
        params, buffers = stack_module_state(models)
        self.params: dict[str, torch.Tensor] = {n: p.detach() for n, p in params.items()}
        self.buffers: dict[str, torch.Tensor] = buffers
        # functional_call swaps the stacked slices into this copy for each call.
        self.base = copy.deepcopy(models[0]).train()
        self.bn = [(n, m) for n, m in self.base.named_modules() if isinstance(m, _BatchNorm) and m.affine]
        self.lam, self.tau = float(gs_reg), float(gs_tau)
        self._sigma: dict[str, torch.Tensor] = {}
        if self.lam > 0:
            for n, m in self.bn:
                m.register_forward_pre_hook(self._sigma_hook(n))
        self.x_all, self.y_all = x_all, y_all
        self.padding = padding
        self._images = x_all.ndim == 4
        self._channels_last = x_all.device.type == "cpu" if channels_last is None else channels_last
        self._autocast = autocast_dtype
        if autocast_dtype is not None:
            # vmap's batch-norm rule refuses a bfloat16 input with float32 parameters ("expected scalar type
            # BFloat16 but found Float", PyTorch 2.14 on the CPU), so under autocast each norm layer gets its
            # input cast back to the parameters' dtype: the norm runs in float32, as cuDNN's computes anyway.
            for m in self.base.modules():
                if isinstance(m, _BatchNorm):
                    m.register_forward_pre_hook(_to_param_dtype)
        if self._images:
            # [N, H, W, C]: gathered batches can then be presented to vmap as a
            # [K, B, C, H, W] view whose per-model slices are channels_last, and
            # the conv batching rule's merge of K into the channels stays a view.
            self.x_nhwc = x_all.permute(0, 2, 3, 1).contiguous()
        self._grad = vmap(grad(self._loss, has_aux=True), in_dims=(0, 0, 0, 0), randomness="error")

    def compile(self, wrap) -> None:
        """Run the vmapped gradient through ``wrap(fn)`` (``bnmem.train.precision.compiled``)."""
        self._grad = wrap(self._grad)

    def _sigma_hook(self, name: str):
        def hook(module: _BatchNorm, args: tuple) -> None:
            if module.training:
                self._sigma[name] = batch_sigma(args[0], module.eps)

        return hook

    def _loss(self, p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], x: torch.Tensor,
              y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One model's training loss (called under vmap and grad)."""
        ctx = nullcontext() if self._autocast is None else torch.autocast(x.device.type, dtype=self._autocast)
        with ctx:
            logits = functional_call(self.base, (p, b), (x,))
        loss = F.cross_entropy(logits.to(x.dtype), y)  # float32 logits under autocast
        if self.lam > 0 and self.bn:
            gammas = [p[f"{n}.weight"] for n, _ in self.bn]
            loss = loss + gamma_sigma_penalty(gammas, [self._sigma[n] for n, _ in self.bn], self.lam, self.tau)
            self._sigma.clear()
        return loss, loss.detach()

    def _inputs(self, sel: torch.Tensor, aug: torch.Tensor | None = None) -> torch.Tensor:
        if not self._images:
            return self.x_all[sel]
        x = self.x_nhwc[sel.t().contiguous()]  # [B, K, H, W, C]
        if aug is not None:
            # The same pixel copies as the plain trainer's augment.apply (rows in (b, k) order).
            b, k, h, w, c = x.shape
            x = augment.apply_nhwc(x.view(b * k, h, w, c), aug.transpose(0, 1).reshape(-1, 3),
                                   self.padding).view(b, k, h, w, c)
        if not self._channels_last:
            return x.permute(1, 0, 4, 2, 3).contiguous()  # [K, B, C, H, W], each model's batch NCHW
        x = x.permute(0, 2, 3, 1, 4).contiguous()  # memory (b, h, w, k, c)
        return x.permute(3, 0, 4, 1, 2)  # logical [K, B, C, H, W]

    def losses_and_grads(self, sel: torch.Tensor, aug: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One training step's forward and backward for all K models.

        Args:
            sel: [K, B] indices into the training inputs, model k's batch in row k.
            aug: [K, B, 3] augmentation parameters of those examples, or None.

        Returns:
            Per-model losses [K] and stacked gradients ``{name: [K, ...]}``;
            BN buffers have been updated for every model.
        """
        with warnings.catch_warnings():
            # Ops without a batching rule (adaptive_avg_pool2d's as_strided_ in
            # the ResNets) fall back to a per-model loop: slower, still exact.
            warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet")
            grads, losses = self._grad(self.params, self.buffers, self._inputs(sel, aug), self.y_all[sel])
        return losses, grads
