"""`from bnmem import GammaSigmaPenalty`: the γ/σ regularizer in a user's own PyTorch loop."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from bnmem import GammaSigmaPenalty
from bnmem.config import DataConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.train import train_model
from bnmem.train.regularizer import GammaSigmaRegularizer


def small_bn_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 8 * 8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))


def test_penalty_equals_a_float64_hand_computation_and_has_gradients():
    net = small_bn_net().double()
    for bn in (net[1], net[5]):  # scales well above 1 so that some channels are penalized
        nn.init.uniform_(bn.weight, 0.5, 3.0)
    penalty = GammaSigmaPenalty(net, lam=0.3, tau=1.0)
    x = torch.randn(32, 1, 8, 8, dtype=torch.float64)
    h1 = net[0](x)
    sigma1 = torch.sqrt(h1.var(dim=(0, 2, 3), unbiased=False) + net[1].eps)
    h2 = net[4](net[3](net[2](net[1](h1))))
    sigma2 = torch.sqrt(h2.var(dim=0, unbiased=False) + net[5].eps)
    ratios = torch.cat([net[1].weight.abs() / sigma1, net[5].weight.abs() / sigma2])
    want = 0.3 * torch.relu(ratios - 1.0).pow(2).mean()
    net(x)
    got = penalty()
    assert float(want.detach()) > 0 and torch.allclose(got, want, rtol=1e-10, atol=0)
    got.backward()
    assert net[1].weight.grad is not None and net[0].weight.grad is not None  # through γ and through σ
    assert penalty.layers == ["1", "5"] and repr(penalty) == "GammaSigmaPenalty(lam=0.3, tau=1.0, layers=2)"


def test_penalty_is_the_trainers_regularizer():
    """One training step with GammaSigmaPenalty in a hand-written loop equals train_model's gs_reg."""
    ds = load_dataset(DataConfig(dataset="digits", train_size=64))
    cfg = TrainConfig(epochs=1, batch_size=64, gs_reg=0.5, momentum=0.0, weight_decay=0.0, lr=0.1)
    ours, ref = small_bn_net(), small_bn_net()
    train_model(ref, ds, cfg, seed=0, measure=False, progress=False)
    penalty = GammaSigmaPenalty(ours, lam=0.5)
    opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    ours.train()
    loss = nn.functional.cross_entropy(ours(ds.x_train), ds.y_train) + penalty()
    opt.zero_grad()
    loss.backward()
    opt.step()
    # Same batch (the whole set, one step), same penalty: the same weights up to float32 summation order.
    for (name, a), b in zip(ours.named_parameters(), ref.parameters()):
        assert torch.allclose(a, b.to(a.dtype).cpu(), rtol=1e-4, atol=1e-6), name


def test_zero_without_bn_and_one_clear_error_when_misused():
    plain = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    assert float(GammaSigmaPenalty(plain)()) == 0.0
    net = small_bn_net()
    penalty = GammaSigmaPenalty(net)
    net(torch.randn(8, 1, 8, 8))
    penalty()
    with pytest.raises(RuntimeError, match="once after each forward pass"):
        penalty()
    with pytest.raises(ValueError, match="lam >= 0"):
        GammaSigmaPenalty(net, lam=-1)
    penalty.remove()
    assert float(penalty()) == 0.0 and isinstance(GammaSigmaRegularizer(net, 0.1), GammaSigmaRegularizer)


def test_readme_snippet_runs():
    """The README's 'γ/σ regularizer in your own loop' snippet, run as written (tiny sizes)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    snippet = next(b for b in blocks if "GammaSigmaPenalty(" in b)
    scope: dict = {}
    exec(compile(snippet, "README.md", "exec"), scope)  # noqa: S102 - the project's own README
    assert isinstance(scope["penalty"], GammaSigmaPenalty) and torch.isfinite(scope["loss"])
