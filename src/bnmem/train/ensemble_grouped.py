"""K LeNets as one network: grouped convolutions, batched matmuls, per-channel norms.

Model k's batch is laid out as channels: the input of a step is
``[B, K*C, H, W]`` (channels_last), channel ``k*C + c`` holding channel c of
model k's b-th example. Then

- a convolution with ``groups=K`` and the K weight tensors stacked along the
  output channels is exactly K independent convolutions;
- BatchNorm over the K*C channels normalizes each channel with the statistics
  of its own model's batch and keeps a running mean/var per channel, i.e. per
  model (GroupNorm with K*g groups likewise normalizes each model's g groups);
- max-pool and ReLU are per channel anyway (ReLU runs after the pool, which
  gives the same values and gradients, on a 4x smaller tensor);
- the fully connected layers are ``baddbmm`` over the model dimension, and
  their norms again per-channel over ``[B, K*features]``.

So no model's output depends on another model's parameters or data, and each
model's computation is the one its own LeNet does (:class:`bnmem.models.LeNet`,
same op order), up to floating-point summation order inside the kernels.

channels_last matters on CPU: NCHW max-pooling is ~9x slower there, and
oneDNN runs grouped convolutions natively in NHWC.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import stack_module_state
from torch.nn.modules.batchnorm import _BatchNorm

from bnmem.data import augment
from bnmem.models.lenet import LeNet

# Norm kinds the grouped network implements (LeNet's norm_kind).
GROUPED_NORMS = ("batch", "none", "group", "layer")

_CONVS = ("conv1", "conv2")
_LINEARS = ("fc1", "fc2")  # each followed by a norm; fc3 gives the logits
_NORM_AFTER = {"conv1": "norm1", "conv2": "norm2", "fc1": "norm3", "fc2": "norm4"}


class _ModelsToChannels(torch.autograd.Function):
    """[K, B, O] -> [B, K*O] (models' features as channels, for the norm layers).

    Its gradient comes back laid out [K, B, O] contiguous, whatever K: autograd's
    own transpose+reshape would hand the following ``baddbmm`` a strided
    gradient whose bias reduction over B runs over K*O columns at once, and
    float32 column reductions round differently for different column counts.
    This way a model's result does not depend on how many models share its
    network (bitwise; checked by the tests).
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor) -> torch.Tensor:  # noqa: D102
        k, b, o = z.shape
        ctx.k, ctx.o = k, o
        return z.transpose(0, 1).reshape(b, k * o)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return grad.reshape(grad.shape[0], ctx.k, ctx.o).transpose(0, 1).contiguous()


class _ChannelRows(torch.autograd.Function):
    """h [B, K*C, ...] -> [K*C, B*...]: one contiguous row per channel.

    The rows make the batch-variance reduction run row by row, so its summation
    order does not depend on K (a column reduction over the K*C channels of a
    channels_last tensor would). The gradient goes back channels_last, the
    layout the convolution backward gets from the norm layers, so the sum of
    both gradients does not push it onto a different (NCHW) kernel.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor) -> torch.Tensor:  # noqa: D102
        ctx.shape = h.shape
        return h.transpose(0, 1).reshape(h.shape[1], -1).contiguous()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, c, *rest = ctx.shape
        g = grad.reshape(c, b, *rest).transpose(0, 1)
        return g.contiguous(memory_format=torch.channels_last) if g.ndim == 4 else g.contiguous()


class _SomeChannelRows(torch.autograd.Function):
    """h [B, K*C, ...] -> [P*C, B*...]: :class:`_ChannelRows` for the channels of P of the K models only.

    Each row holds the same values in the same order as in :class:`_ChannelRows`, so its variance is the
    same bits; the gradient goes back channels_last like there, zero on the other models' channels.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, channels: torch.Tensor) -> torch.Tensor:  # noqa: D102
        ctx.shape, ctx.channels = h.shape, channels
        return h.transpose(0, 1).index_select(0, channels).reshape(channels.numel(), -1).contiguous()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: D102
        b, c, *rest = ctx.shape
        fmt = torch.channels_last if len(rest) == 2 else torch.contiguous_format
        g = torch.empty(ctx.shape, dtype=grad.dtype, device=grad.device, memory_format=fmt).zero_()
        g.transpose(0, 1).index_copy_(0, ctx.channels, grad.reshape(ctx.channels.numel(), b, *rest))
        return g, None


def _sigma_by_model(h: torch.Tensor, k: int, eps: float, models: torch.Tensor | None = None) -> torch.Tensor:
    """Per-channel batch σ of h [B, K*C, ...] as [K, C], as :func:`batch_sigma` computes it; with ``models``
    (indices), only those models' rows, as [len(models), C]."""
    if models is None:
        return torch.sqrt(_ChannelRows.apply(h).var(dim=1, unbiased=False) + eps).view(k, -1)
    c = h.shape[1] // k
    channels = (models.unsqueeze(1) * c + torch.arange(c, device=h.device)).reshape(-1)
    return torch.sqrt(_SomeChannelRows.apply(h, channels).var(dim=1, unbiased=False) + eps).view(models.numel(), -1)


def _grad_layout(name: str, p: torch.Tensor) -> torch.Tensor:
    """A stacked parameter as a leaf whose memory layout matches its gradient's."""
    p = p.detach()
    if name.startswith("fc") and p.ndim == 3:
        p = p.transpose(1, 2).contiguous().transpose(1, 2)
    elif p.ndim == 5:
        p = p.permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)
    return p.requires_grad_()


def supports_grouped(model: nn.Module) -> bool:
    """True if ``model`` is a LeNet the grouped network reproduces exactly.

    Args:
        model: one (template) model of the ensemble.

    Returns:
        Whether :class:`GroupedLeNet` can train it.
    """
    if type(model) is not LeNet or model.norm_kind not in GROUPED_NORMS:
        return False
    for name in _NORM_AFTER.values():
        m = getattr(model, name)
        if isinstance(m, _BatchNorm):
            # momentum=None (cumulative average) would need per-model counts in
            # the kernel; affine-free or stat-free BN is not what LeNet builds.
            if m.momentum is None or not m.affine or not m.track_running_stats:
                return False
        elif isinstance(m, nn.GroupNorm):
            if not m.affine:
                return False
        elif isinstance(m, nn.LayerNorm):
            if not m.elementwise_affine or len(m.normalized_shape) != 1 or m.bias is None:
                return False
        elif not isinstance(m, nn.Identity):
            return False
    return True


class GroupedLeNet:
    """Training steps (forward, backward, BN statistics) of K LeNets as one grouped network.

    The stacked parameters ``params`` ({name: [K, ...]}, leaves) and buffers
    ``buffers`` are this object's own; the optimizer updates ``params`` in
    place and the caller reads both back into the K models at the end.

    Args:
        models: the K models, already on the target device and dtype (their
            parameters and buffers are copied, not shared).
        x_all: all training images [N, C, H, W] on the device.
        y_all: their labels [N].
        gs_reg: λ of the γ/σ regularizer (0: off), or one λ per model.
        gs_tau: τ of the regularizer, or one τ per model.
        padding: padding mode of the training augmentation (when batches come with parameters).
        twins: the last ``twins`` models are throw-away copies that pad the network (nothing reads them):
            they skip the regularizer, like the models with λ = 0.
        autocast_dtype: run the forward pass under autocast to this dtype (bfloat16; None: off); the loss is
            computed from logits in the data's dtype.

    Raises:
        ValueError: a model is not a LeNet :func:`supports_grouped` accepts.
    """

    # What the network reproduces (the error message's words), and its norm layers in the regularizer's order
    # (the models' named_modules order).
    trains = "LeNets with batch/none/group/layer norm"
    # Networks hold a multiple of this many models (:data:`bnmem.train.ensemble.GROUPED_MULTIPLE` says why 4).
    multiple = 4
    norm_names: tuple[str, ...] = tuple(_NORM_AFTER.values())

    @staticmethod
    def supports(model: nn.Module) -> bool:
        """Whether this network reproduces ``model`` (:func:`supports_grouped`)."""
        return supports_grouped(model)

    def __init__(self, models: list[nn.Module], x_all: torch.Tensor, y_all: torch.Tensor,
                 gs_reg: float | list[float] = 0.0, gs_tau: float | list[float] = 1.0,
                 padding: str = "reflect", twins: int = 0, autocast_dtype: torch.dtype | None = None) -> None:
        if not all(self.supports(m) for m in models):
            raise ValueError(f"{type(self).__name__} trains {self.trains} only")
        template = models[0]
        self.k = len(models)
        self.template = template
        self.kind = template.norm_kind
        params, buffers = stack_module_state(models)
        # Leaves (requires_grad) laid out in memory the way autograd will lay out
        # their gradients: linear weights as [K, in, out] (the bmm operand),
        # conv weights channels_last. Parameter, gradient and optimizer state
        # then share strides, and the optimizer's elementwise ops stay on the
        # fast path (mixed strides made them ~3x slower).
        self.params: dict[str, torch.Tensor] = {n: _grad_layout(n, p) for n, p in params.items()}
        self.buffers: dict[str, torch.Tensor] = buffers
        # The regularizer covers BN layers only. Per model: a λ of 0 adds exactly 0 to that model's loss and
        # gradients, so a plain model may share a network with regularized ones. Its batch σ (a variance per
        # channel and step, the regularizer's main cost) is computed only for the models it acts on.
        lams = [float(x) for x in (gs_reg if isinstance(gs_reg, (list, tuple)) else [gs_reg] * self.k)]
        taus = [float(x) for x in (gs_tau if isinstance(gs_tau, (list, tuple)) else [gs_tau] * self.k)]
        if len(lams) != self.k or len(taus) != self.k:
            raise ValueError(f"{self.k} models but {len(lams)} λ and {len(taus)} τ")
        self.lam = max(lams) if self.kind == "batch" else 0.0  # > 0: the penalty is computed
        dtype = x_all.dtype
        self.lams = torch.tensor(lams, dtype=dtype, device=x_all.device)
        self.taus = torch.tensor(taus, dtype=dtype, device=x_all.device).unsqueeze(1)
        self.scalar = len(set(lams)) == 1 and len(set(taus)) == 1  # the one-λ expression, as before
        self.tau = taus[0]
        on = [i for i in range(self.k - twins) if lams[i] > 0] if self.kind == "batch" else []
        if not on:
            self.lam = 0.0
        # None: every model (the full network's σ rows); else the indices of the penalized models.
        self.penalized = None if len(on) == self.k else torch.tensor(on, dtype=torch.long, device=x_all.device)
        # Per model, the last step's penalty and fraction of channels above τ (the trainer's activity record;
        # 0 for the models without the penalty).
        self.last_penalty: torch.Tensor | None = None
        self.last_above: torch.Tensor | None = None
        # Images as [N, H, W, C]: one gather then gives each model's batch with
        # channels innermost, the order channels_last wants.
        self.x_nhwc = x_all.permute(0, 2, 3, 1).contiguous()
        self.y_all = y_all
        self.padding = padding
        self.autocast_dtype = autocast_dtype

    def compile(self, wrap) -> None:
        """Run the forward pass through ``wrap(forward)`` (``bnmem.train.precision.compiled``)."""
        self.forward = wrap(self.forward)

    def _inputs(self, sel: torch.Tensor, aug: torch.Tensor | None = None) -> torch.Tensor:
        """Models' batches as channels: sel [K, B] (aug [K, B, 3]) -> [B, K*C, H, W] channels_last."""
        n, h, w, c = self.x_nhwc.shape
        k, b = sel.shape
        # index_select on rows is a plain row copy (advanced indexing is slower).
        x = self.x_nhwc.view(n, -1).index_select(0, sel.t().reshape(-1)).view(b, k, h, w, c)
        if aug is not None:
            # The same pixel copies as the plain trainer's augment.apply (rows in (b, k) order).
            x = augment.apply_nhwc(x.view(b * k, h, w, c), aug.transpose(0, 1).reshape(-1, 3),
                                   self.padding).view(b, k, h, w, c)
        # Memory (b, h, w, k, c) is channels_last for [B, K*C, H, W]. (Explicit
        # copy: reshape could return a strided view that is neither layout.)
        return x.permute(0, 2, 3, 1, 4).contiguous().view(b, h, w, k * c).permute(0, 3, 1, 2)

    def _norm(self, h: torch.Tensor, name: str, sigmas: list[torch.Tensor]) -> torch.Tensor:
        """Apply layer ``name``'s norm to h [B, K*C, ...] (channels of model k contiguous)."""
        m = self.template.get_submodule(name)
        if self.kind == "none":
            return h
        weight = self.params[f"{name}.weight"].reshape(-1)
        bias = self.params[f"{name}.bias"].reshape(-1)
        if self.kind == "batch":
            if self.lam > 0:
                sigmas.append(_sigma_by_model(h, self.k, m.eps, self.penalized))
            # Views of the stacked buffers: batch_norm updates them in place.
            mean = self.buffers[f"{name}.running_mean"].view(-1)
            var = self.buffers[f"{name}.running_var"].view(-1)
            if h.ndim == 2:
                return F.batch_norm(h, mean, var, weight, bias, True, m.momentum, m.eps)
            # Feature maps go through BN as their [B*H*W, K*C] view (free for
            # channels_last): same statistics (over B, H, W per channel), but
            # the 2-D kernel's backward is 1.5-3x faster here than the 4-D
            # channels_last one (short rows of K*C channels).
            b, c, hh, ww = h.shape
            flat = h.permute(0, 2, 3, 1).reshape(b * hh * ww, c)
            out = F.batch_norm(flat, mean, var, weight, bias, True, m.momentum, m.eps)
            return out.view(b, hh, ww, c).permute(0, 3, 1, 2)
        # GroupNorm(g, C) per model == GroupNorm(K*g, K*C) on contiguous channel
        # blocks; LayerNorm(C) on vectors is GroupNorm(1, C) there.
        groups = m.num_groups if isinstance(m, nn.GroupNorm) else 1
        return F.group_norm(h, self.k * groups, weight, bias, m.eps)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The K forward passes, LeNet's op order.

        Args:
            x: [B, K*C, H, W] (see :meth:`_inputs`).

        Returns:
            Logits [K, B, num_classes], and each BN layer's batch σ as [K, C]
            (only when the regularizer is on).
        """
        p, k, sigmas = self.params, self.k, []
        h = x
        for name in _CONVS:
            conv = getattr(self.template, name)
            w = p[f"{name}.weight"]
            h = F.conv2d(h, w.reshape(-1, *w.shape[2:]), p[f"{name}.bias"].reshape(-1), conv.stride, conv.padding,
                         conv.dilation, groups=k)
            # max_pool(relu(x)) == relu(max_pool(x)) exactly, and so are the
            # gradients (relu is monotone; where a window is all <= 0 both
            # give 0). Pooling first runs the ReLU and its backward on a 4x
            # smaller tensor.
            # (In place: max-pool, baddbmm and the norms do not save their
            # outputs for the backward pass, so a fresh tensor is not needed.)
            h = F.relu_(F.max_pool2d(self._norm(h, _NORM_AFTER[name], sigmas), 2))
        b = h.shape[0]
        # flatten(1) per model in logical (c, h, w) order, then models first for bmm.
        h = h.reshape(b, k, -1).transpose(0, 1)  # [K, B, F]
        for name in _LINEARS:
            z = torch.baddbmm(p[f"{name}.bias"].unsqueeze(1), h, p[f"{name}.weight"].transpose(1, 2))  # [K, B, O]
            if self.kind == "none":
                h = F.relu_(z)
            else:
                o = z.shape[2]
                z = self._norm(_ModelsToChannels.apply(z), _NORM_AFTER[name], sigmas)
                h = F.relu_(z).view(b, k, o).transpose(0, 1)
        logits = torch.baddbmm(p["fc3.bias"].unsqueeze(1), h, p["fc3.weight"].transpose(1, 2))
        return logits, sigmas

    def _penalty(self, sigmas: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The regularizer per penalized model (all, or :attr:`penalized`) from its BN layers' batch σ:
        λ · mean over channels of relu(|γ|/σ − τ)², and which channels are above τ."""
        rows = self.penalized
        gammas = [self.params[f"{n}.weight"] for n in self.norm_names]
        if rows is not None:
            gammas = [g.index_select(0, rows) for g in gammas]
        ratios = torch.cat([g.abs() / s for g, s in zip(gammas, sigmas)], dim=1)
        if self.scalar:
            return self.lam * torch.relu(ratios - self.tau).pow(2).mean(1), ratios > self.tau
        lams, taus = (self.lams, self.taus) if rows is None else (self.lams[rows], self.taus[rows])
        return lams * torch.relu(ratios - taus).pow(2).mean(1), ratios > taus

    def losses_and_grads(self, sel: torch.Tensor, aug: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One training step's forward and backward for all K models.

        Args:
            sel: [K, B] indices into the training images, model k's batch in row k.
            aug: [K, B, 3] augmentation parameters of those examples, or None.

        Returns:
            Per-model losses [K] (cross-entropy plus regularizer, detached) and
            stacked gradients ``{name: [K, ...]}``. BN running statistics and
            ``num_batches_tracked`` have been updated for every model.
        """
        x = self._inputs(sel, aug)
        if self.autocast_dtype is None:
            logits, sigmas = self.forward(x)
        else:
            with torch.autocast(x.device.type, dtype=self.autocast_dtype):
                logits, sigmas = self.forward(x)
            logits = logits.to(x.dtype)
        k, b, n_cls = logits.shape
        y = self.y_all[sel]
        # Cross-entropy as logsumexp minus the target logit: the same value as
        # F.cross_entropy up to rounding, and ~3x faster on rows of 10 logits.
        nll = torch.logsumexp(logits, 2) - logits.gather(2, y.unsqueeze(2)).squeeze(2)
        losses = nll.mean(1)
        if self.lam > 0:
            penalty, above = self._penalty(sigmas)
            rows = self.penalized
            losses = losses + penalty if rows is None else losses.index_add(0, rows, penalty)
            with torch.no_grad():
                above = above.float().mean(1)
                if rows is not None:
                    penalty, above = (t.new_zeros(self.k).index_copy_(0, rows, t) for t in (penalty, above))
                self.last_penalty = penalty.detach()
                self.last_above = above
        if self.kind == "batch":
            with torch.no_grad():
                for name in self.norm_names:
                    self.buffers[f"{name}.num_batches_tracked"].add_(1)
        # d(sum_k loss_k)/d(params of model k) = d loss_k / d(params of model k).
        grads = torch.autograd.grad(losses.sum(), list(self.params.values()))
        return losses.detach(), dict(zip(self.params, grads))
