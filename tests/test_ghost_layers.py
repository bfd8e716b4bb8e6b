"""Ghost-norm identities for the layers the torchvision zoo uses, each checked per parameter
against one backward per example in float64."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.convnext import LayerNorm2d

from bnmem.measure.ghost import GhostUnsupported, ghost_sq_norms, layer_kind, unsupported_reason
from bnmem.measure.gradnorms import eval_sq_norms, loop_sq_norms

RTOL = 1e-9  # float64: the identities agree with the loop to ~1e-14


def loop_per_param(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Oracle: one backward per example, squared gradient norm of every parameter."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    out = {n: torch.empty(x.shape[0], dtype=torch.float64) for n in params}
    for i in range(x.shape[0]):
        loss = F.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
        for n, g in zip(params, torch.autograd.grad(loss, list(params.values()), allow_unused=True)):
            out[n][i] = 0.0 if g is None else g.pow(2).sum()
    return out


def assert_per_param(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    model = model.double().eval()
    got = ghost_sq_norms(model, x, y)
    want = loop_per_param(model, x, y)
    assert set(got) == set(want)
    for name in want:
        assert bool((want[name] > 0).all()), f"{name}: the oracle has a zero gradient; the test would be weak"
        torch.testing.assert_close(got[name], want[name], rtol=RTOL, atol=0, msg=name)
    return got


def _x(n: int, *shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, *shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _y(n: int, classes: int = 5, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(seed + 1))


def _randomize(model: nn.Module) -> nn.Module:
    """Non-trivial affines and running statistics, as after training."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for m in model.modules():
            for name in ("weight", "bias"):
                p = getattr(m, name, None)
                if isinstance(p, nn.Parameter) and isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm,
                                                                   nn.LayerNorm)):
                    p.copy_((0.5 if name == "weight" else 0.0) + torch.rand(p.shape, generator=g))
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(0.3 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
    return model


class ResidualInplace(nn.Module):
    """torchvision's BasicBlock pattern: BN → ReLU(inplace) and `out += identity` on a BN output."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)
        self.skip = nn.Conv2d(3, 4, 1)
        self.head = nn.Linear(4, 5)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.skip(x)
        out = self.relu(out)
        return self.head(F.adaptive_avg_pool2d(out, 1).flatten(1))


def test_inplace_activations_and_residual_adds():
    torch.manual_seed(0)
    assert_per_param(_randomize(ResidualInplace()), _x(6, 3, 6, 6), _y(6))


@pytest.mark.parametrize("groups,cout,stride,padding", [(2, 6, 1, 1), (4, 4, 2, 1), (4, 8, 1, 0)])
def test_grouped_and_depthwise_convolutions(groups, cout, stride, padding):
    torch.manual_seed(groups)
    model = nn.Sequential(nn.Conv2d(4, cout, 3, stride=stride, padding=padding, groups=groups), nn.BatchNorm2d(cout),
                          nn.ReLU(inplace=True), nn.Flatten(), nn.LazyLinear(5))
    model(torch.zeros(1, 4, 7, 7))  # materialize the lazy layer
    assert layer_kind(model[0]) == "grouped_conv"
    assert_per_param(_randomize(model), _x(6, 4, 7, 7), _y(6))


def test_same_padding_and_refusal_of_uneven_same():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3, padding="same", dilation=2), nn.ReLU(),
                          nn.Conv2d(4, 4, 5, padding="same", groups=2), nn.Flatten(), nn.Linear(4 * 36, 5))
    assert_per_param(model, _x(4, 2, 6, 6), _y(4))
    uneven = nn.Sequential(nn.Conv2d(2, 4, 2, padding="same"), nn.Flatten(), nn.Linear(4 * 36, 5))
    assert "uneven" in unsupported_reason(uneven)


class NormZoo(nn.Module):
    """LayerNorm2d (ConvNeXt), GroupNorm, and LayerNorm over an (N, L, D) sequence and (N, H, W, C) maps."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 8, 3, padding=1)
        self.ln2d = LayerNorm2d(8)
        self.gn = nn.GroupNorm(2, 8)
        self.ln_hwc = nn.LayerNorm(8)
        self.ln_seq = nn.LayerNorm(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        h = self.gn(self.ln2d(self.conv(x)))
        h = self.ln_hwc(h.permute(0, 2, 3, 1))  # (N, H, W, C)
        seq = self.ln_seq(h.flatten(1, 2))  # (N, L, D)
        return self.head(torch.tanh(seq).mean(1))


def test_norm_affines_sum_over_positions():
    torch.manual_seed(0)
    model = _randomize(NormZoo())
    assert layer_kind(model.ln2d) == "local" and layer_kind(model.ln_seq) == "norm"
    assert_per_param(model, _x(5, 2, 4, 4), _y(5))


class TinyViT(nn.Module):
    """A class token and position embedding added to the activations, attention, a layer scale."""

    def __init__(self, batch_first: bool = True, kdim: int | None = None):
        super().__init__()
        self.patch = nn.Conv2d(1, 8, 2, stride=2)
        self.class_token = nn.Parameter(torch.randn(1, 1, 8))
        self.pos_embedding = nn.Parameter(torch.randn(1, 5, 8))
        self.ln = nn.LayerNorm(8)
        self.batch_first = batch_first
        self.attn = nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=kdim, vdim=kdim)
        self.key_proj = nn.Linear(8, kdim) if kdim else None
        self.scale = nn.Parameter(torch.rand(8) + 0.5)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)  # (N, 4, 8)
        t = torch.cat([self.class_token.expand(x.shape[0], -1, -1), t], dim=1) + self.pos_embedding
        q = self.ln(t)
        kv = self.key_proj(q) if self.key_proj is not None else q
        mask = torch.zeros(x.shape[0], 5, dtype=torch.bool)
        mask[:, -1] = True  # a key padding mask: the last token is never attended to
        if not self.batch_first:
            q, kv = q.transpose(0, 1), kv.transpose(0, 1)
        a, _ = self.attn(q, kv, kv, key_padding_mask=mask, need_weights=False)
        if not self.batch_first:
            a = a.transpose(0, 1)
        return self.head(t[:, 0] + self.scale * a[:, 0])


class Scaled(nn.Module):
    """Parameters of its own next to a child: covered by per-module vmap."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.gain = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return self.gain * self.inner(x)


@pytest.mark.parametrize("batch_first,kdim", [(True, None), (False, None), (True, 6)])
def test_attention_class_token_position_embedding(batch_first, kdim):
    torch.manual_seed(0)
    model = TinyViT(batch_first, kdim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's fast-path notes for masks
        got = assert_per_param(_randomize(model), _x(5, 1, 4, 4), _y(5))
    assert ("attn.in_proj_weight" in got) == (kdim is None)
    assert layer_kind(model) == "local" and layer_kind(model.attn) == "attention"


def test_scalar_parameter_of_a_parent_module():
    torch.manual_seed(0)
    assert_per_param(Scaled(nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 5))), _x(4, 6), _y(4))


class Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 6, padding_idx=0)
        self.fc = nn.Linear(6, 5)

    def forward(self, idx):
        return self.fc(torch.tanh(self.emb(idx)).mean(1))


def test_embedding_with_repeated_and_padding_tokens():
    torch.manual_seed(0)
    idx = torch.tensor([[1, 2, 1, 0], [3, 3, 3, 3], [0, 4, 5, 6], [6, 1, 0, 2]])
    model = Tokens().double().eval()
    got = ghost_sq_norms(model, idx, _y(4))
    want = loop_per_param(model, idx, _y(4))
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=RTOL, atol=0, msg=name)


class MixesExamples(nn.Module):
    """Subtracts the batch mean: examples are coupled, which no per-example identity sees."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.shift = nn.Parameter(torch.ones(5))

    def forward(self, x):
        h = self.fc(x)
        return h - h.mean(0, keepdim=True) + self.shift


def test_self_check_catches_a_batch_coupling_layer_and_falls_back():
    torch.manual_seed(0)
    model = MixesExamples().double().eval()
    x, y = _x(6, 6), _y(6)
    with pytest.raises(Exception, match="ghost-norm path does not cover.*disagree"):
        eval_sq_norms(model, x, y, "ghost")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sq, used = eval_sq_norms(model, x, y, "auto")
    assert used == "vmap" and any("falling back" in str(w.message) for w in caught)
    # vmap evaluates each example alone, which is the loop's (per-example) definition
    torch.testing.assert_close(sq, loop_sq_norms(model, x, y), rtol=RTOL, atol=0)


def test_refusals_name_the_layer():
    reflect = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect"), nn.Flatten(), nn.Linear(18, 3))
    assert "padding_mode" in unsupported_reason(reflect)
    kv = nn.MultiheadAttention(4, 2, add_bias_kv=True)
    assert "add_bias_kv" in unsupported_reason(nn.Sequential(kv))
    with pytest.raises(GhostUnsupported, match="called 2 times"):
        shared = nn.Linear(3, 3).double()
        ghost_sq_norms(nn.Sequential(shared, nn.Tanh(), shared).eval(), _x(2, 3), _y(2, 3))
