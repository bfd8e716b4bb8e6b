"""K fast CIFAR networks (:class:`bnmem.models.fastnet.FastNet`) as one grouped network.

The layout is :class:`bnmem.train.ensemble_grouped.GroupedLeNet`'s: model k's batch is channels
``k*C .. k*C + C - 1`` of a ``[B, K*C, H, W]`` channels_last tensor; every convolution runs with
``groups=K`` on the K weight tensors stacked along the output channels; the norm layers run over the K*C
channels (BatchNorm's statistics and running buffers per channel, i.e. per model); max-pooling, GELU and
the global max pool are per channel anyway; the linear read-out (no bias) is a ``bmm`` over the model
dimension. So model k's computation is the one :class:`FastNet` does, in its op order, up to
floating-point summation order inside the kernels (checked in float64 by tests/test_ensemble_archs.py).

Why: on a GPU one fast network's step at shadow-model batch sizes is a few dozen kernels that do not
fill the device; K models in one network launch each kernel once. Whether that beats
:class:`bnmem.train.ensemble_vmap.VmapEnsemble` is measured by benchmarks/gpu_check.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnmem.models.fastnet import FastNet
from bnmem.train.ensemble_grouped import GROUPED_NORMS
from bnmem.train.ensemble_grouped_resnet import NamedNormsGrouped


def supports_grouped_fastnet(model: nn.Module) -> bool:
    """True if ``model`` is a :class:`FastNet` the grouped network reproduces (batch/none/group/layer norm,
    BatchNorm with a momentum, affine and running statistics; convs without bias)."""
    if type(model) is not FastNet or model.norm_kind not in GROUPED_NORMS:
        return False
    for m in model.modules():
        if isinstance(m, _BatchNorm) and (m.momentum is None or not m.affine or not m.track_running_stats):
            return False
        if isinstance(m, nn.GroupNorm) and not m.affine:
            return False
        if isinstance(m, nn.Conv2d) and (m.bias is not None or m.groups != 1 or m.dilation != (1, 1)):
            return False
    return True


class GroupedFastNet(NamedNormsGrouped):
    """Training steps of K fast networks as one grouped network (see the module docstring).

    Same interface, stacked ``params``/``buffers``, regularizer and activity record as :class:`GroupedLeNet`
    (whose input layout, norm layers, penalty and step it reuses); only the forward pass differs. As for the
    ResNets, the default widths are multiples of 16 (not measured bitwise for this network).
    """

    trains = "fast networks (fastnet) with batch/none/group/layer norm"

    @staticmethod
    def supports(model: nn.Module) -> bool:  # noqa: D102
        return supports_grouped_fastnet(model)

    def _unit(self, h: torch.Tensor, name: str, pool: bool, sigmas: list[torch.Tensor]) -> torch.Tensor:
        """gelu(norm([maxpool](conv(h)))), as :class:`bnmem.models.fastnet.ConvBlock`."""
        conv = self.template.get_submodule(f"{name}.conv")
        w = self.params[f"{name}.conv.weight"]
        h = F.conv2d(h, w.reshape(-1, *w.shape[2:]), None, conv.stride, conv.padding, 1, self.k)
        if pool:
            h = F.max_pool2d(h, 2, ceil_mode=True)
        return F.gelu(self._norm(h, f"{name}.norm", sigmas))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The K forward passes in :meth:`FastNet.forward`'s op order.

        Args:
            x: [B, K*C, H, W] channels_last (see :meth:`GroupedLeNet._inputs`).

        Returns:
            Logits [K, B, num_classes], and each BN layer's batch σ as [K, C] in :attr:`norm_names` order
            (only when the regularizer is on).
        """
        sigmas: list[torch.Tensor] = []
        net = self.template
        h = self._unit(x, "stem", False, sigmas)
        for i in range(net.num_stages):
            h = self._unit(h, f"layer{i + 1}.0", True, sigmas)
            h = self._unit(h, f"layer{i + 1}.1", False, sigmas)
        b = h.shape[0]
        pooled = torch.amax(h, dim=(2, 3)).reshape(b, self.k, -1).transpose(0, 1)  # [K, B, C]
        logits = torch.bmm(pooled, self.params["fc.weight"].transpose(1, 2)) * net.logit_scale
        return logits, sigmas
