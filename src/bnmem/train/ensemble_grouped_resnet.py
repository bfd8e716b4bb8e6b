"""K CIFAR-style ResNets (ResNet-20, ResNet-18) as one grouped network.

The layout is :class:`bnmem.train.ensemble_grouped.GroupedLeNet`'s: model k's
batch is channels ``k*C .. k*C + C - 1`` of a ``[B, K*C, H, W]`` channels_last
tensor, every convolution (3x3 and the 1x1 projections) runs with
``groups=K`` on the K weight tensors stacked along the output channels, the
norm layers run over the K*C channels (BatchNorm's statistics and running
buffers per channel, i.e. per model), the residual additions and ReLUs are
per channel anyway, the global average pool is per channel, and the final
linear layer is a ``baddbmm`` over the model dimension. So model k's
computation is the one :class:`bnmem.models.resnet.ResNet` does, in its op
order, up to floating-point summation order inside the kernels; no model's
result depends on another model's parameters or data.

Why: the digits ResNet-20's layers are tiny (8x8 maps, 16-64 channels,
batch 64), so one model's step is mostly per-operator overhead (about 150
kernels forward and backward); K models in one network pay it once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnmem.models.resnet import BasicBlock, ResNet
from bnmem.train.ensemble_grouped import GROUPED_NORMS, GroupedLeNet


def supports_grouped_resnet(model: nn.Module) -> bool:
    """True if ``model`` is a :class:`ResNet` :class:`GroupedResNet` reproduces (batch/none/group/layer norm,
    BatchNorm with a momentum, affine and running statistics)."""
    if type(model) is not ResNet or model.norm_kind not in GROUPED_NORMS:
        return False
    for m in model.modules():
        if isinstance(m, _BatchNorm) and (m.momentum is None or not m.affine or not m.track_running_stats):
            return False
        if isinstance(m, nn.GroupNorm) and not m.affine:
            return False
        if isinstance(m, nn.Conv2d) and (m.bias is not None or m.groups != 1 or m.dilation != (1, 1)):
            return False
    return True


def _norm_names(model: nn.Module) -> tuple[str, ...]:
    """The model's affine norm layers in ``named_modules`` order (the plain regularizer's order)."""
    return tuple(n for n, m in model.named_modules()
                 if isinstance(m, (_BatchNorm, nn.GroupNorm)) and getattr(m, "weight", None) is not None)


class NamedNormsGrouped(GroupedLeNet):
    """A grouped network whose norm layers are found by name in the template model (ResNets, fast networks):
    :class:`GroupedLeNet`'s input layout, norm layers, penalty and step, with ``norm_names`` read first."""

    # Every channel count is a multiple of 16, so K*C is a multiple of the vector width for any K; only a
    # network of one model (a groups=1 convolution, another oneDNN kernel) rounds differently. Measured on
    # this AVX-512 CPU for ResNets: a model's float32 result is bitwise the same in networks of 2 to 6 models.
    multiple = 2

    def __init__(self, models: list[nn.Module], *args, **kwargs) -> None:
        if models and self.supports(models[0]):
            self.norm_names = _norm_names(models[0])
        super().__init__(models, *args, **kwargs)


class GroupedResNet(NamedNormsGrouped):
    """Training steps of K ResNets as one grouped network (see the module docstring).

    Same interface, stacked ``params``/``buffers``, regularizer and activity record as :class:`GroupedLeNet`
    (whose input layout, norm layers, penalty and step it reuses); only the forward pass differs.
    """

    trains = "ResNets with batch/none/group/layer norm"

    @staticmethod
    def supports(model: nn.Module) -> bool:  # noqa: D102
        return supports_grouped_resnet(model)

    def _conv(self, h: torch.Tensor, name: str) -> torch.Tensor:
        conv = self.template.get_submodule(name)
        w = self.params[f"{name}.weight"]
        return F.conv2d(h, w.reshape(-1, *w.shape[2:]), None, conv.stride, conv.padding, 1, self.k)

    def _block(self, h: torch.Tensor, name: str, block: BasicBlock, sigmas: list[torch.Tensor]) -> torch.Tensor:
        """relu(norm2(conv2(relu(norm1(conv1(h))))) + shortcut(h)), as :meth:`BasicBlock.forward`."""
        out = F.relu_(self._norm(self._conv(h, f"{name}.conv1"), f"{name}.norm1", sigmas))
        out = self._norm(self._conv(out, f"{name}.conv2"), f"{name}.norm2", sigmas)
        if isinstance(block.shortcut, nn.Sequential):
            short = self._norm(self._conv(h, f"{name}.shortcut.0"), f"{name}.shortcut.1", sigmas)
        else:
            short = h
        return F.relu_(out + short)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The K forward passes in :meth:`ResNet.forward`'s op order.

        Args:
            x: [B, K*C, H, W] channels_last (see :meth:`GroupedLeNet._inputs`).

        Returns:
            Logits [K, B, num_classes], and each BN layer's batch σ as [K, C] in :attr:`norm_names` order
            (only when the regularizer is on).
        """
        sigmas: list[torch.Tensor] = []
        net = self.template
        h = F.relu_(self._norm(self._conv(x, "conv1"), "norm1", sigmas))
        for i in range(net.num_stages):
            for j, block in enumerate(getattr(net, f"layer{i + 1}")):
                h = self._block(h, f"layer{i + 1}.{j}", block, sigmas)
        b = h.shape[0]
        pooled = F.adaptive_avg_pool2d(h, 1).reshape(b, self.k, -1).transpose(0, 1)  # [K, B, C]
        logits = torch.baddbmm(self.params["fc.bias"].unsqueeze(1), pooled, self.params["fc.weight"].transpose(1, 2))
        return logits, sigmas
