"""The identifiable-layer rule (bnmem.models.identifiable) against the γ-rescaling oracle, and the scale-free gain.

Oracle: in float64, with every BN's eps set to 1e-300 (eps breaks the invariance at O(eps/σ²) ≈ 1e-5, far above the
threshold), scale one BN layer's γ and β by c = 3 and compare the logits of a batch. The layer's scale is
identifiable when the largest logit change exceeds 1e-9 relative to the largest |logit| (relative, so the
threshold does not depend on the logits' scale). Two modes where the invariance is defined: batch statistics
(training-mode BN, the running statistics untouched) and running statistics re-estimated after the rescaling
(what training from the rescaled point converges to). With the model's *fixed* running statistics every
layer's rescaling changes the logits, which is why eval mode alone cannot define identifiability.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pytest
import torch

from bnmem.measure.predict import bn_query_mode
from bnmem.models import build_model
from bnmem.models.identifiable import describe, effective_step, next_gain, scale_identifiable
from bnmem.models.norms import batchnorm_layers

C = 3.0
TOL = 1e-9
# torch refuses eps = 0 in training; 1e-300 is below float64 resolution of any variance here, so var + eps = var.
EPS = 1e-300
SHAPE = (1, 8, 8)
ARCHS = ("lenet", "mlp", "resnet20", "resnet18", "densenet")
# Counted by hand from each architecture's forward (docs/architecture.md, "Definitions").
EXPECTED = {"lenet": (1, 4), "mlp": (1, 2), "resnet20": (12, 21), "resnet18": (12, 20), "densenet": (1, 21)}


def _model(arch: str, seed: int = 0) -> torch.nn.Module:
    """A float64 model with eps 0 and random non-trivial γ (both signs), β and running statistics."""
    torch.manual_seed(seed)
    m = build_model(arch, SHAPE, 5).double()
    g = torch.Generator().manual_seed(seed + 1)
    for _, bn in batchnorm_layers(m):
        c = bn.num_features
        bn.eps = EPS
        with torch.no_grad():
            sign = torch.where(torch.rand(c, generator=g, dtype=torch.float64) < 0.2, -1.0, 1.0)
            bn.weight.copy_(sign * (0.5 + 1.5 * torch.rand(c, generator=g, dtype=torch.float64)))
            bn.bias.copy_(0.5 * torch.randn(c, generator=g, dtype=torch.float64))
            bn.running_mean.copy_(0.3 * torch.randn(c, generator=g, dtype=torch.float64))
            bn.running_var.copy_(0.5 + torch.rand(c, generator=g, dtype=torch.float64))
    return m


def _batches(n: int = 3, seed: int = 7) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(8, *SHAPE, generator=g, dtype=torch.float64) for _ in range(n)]


@torch.no_grad()
def _reestimate(model: torch.nn.Module, batches: list[torch.Tensor]) -> None:
    """Running statistics recomputed as the cumulative average over ``batches`` (training-mode passes)."""
    for _, bn in batchnorm_layers(model):
        bn.reset_running_stats()
        bn.momentum = None
    model.train()
    for xb in batches:
        model(xb)
    model.eval()


@torch.no_grad()
def _logits(model: torch.nn.Module, mode: str, batches: list[torch.Tensor]) -> torch.Tensor:
    if mode == "batch":
        with bn_query_mode(model, "batch"):
            return model(batches[0])
    if mode == "re-estimated":
        _reestimate(model, batches)
    model.eval()
    return model(batches[0])


def _scaled(model: torch.nn.Module, layer: str, c: float = C) -> torch.nn.Module:
    m = copy.deepcopy(model)
    bn = dict(m.named_modules())[layer]
    with torch.no_grad():
        bn.weight.mul_(c)
        bn.bias.mul_(c)
    return m


@contextmanager
def _bn_state_kept(model: torch.nn.Module) -> Iterator[None]:
    """Every BN's γ, β, running statistics and momentum restored on exit (cheaper than a copy of ResNet-18)."""
    saved = [(bn, {k: v.clone() for k, v in bn.state_dict().items()}, bn.momentum) for _, bn in batchnorm_layers(model)]
    try:
        yield
    finally:
        for bn, state, momentum in saved:
            bn.load_state_dict(state)
            bn.momentum = momentum


def relative_changes(model: torch.nn.Module, mode: str) -> dict[str, float]:
    """Per BN layer: max |Δ logit| / max |logit| when its (γ, β) are scaled by c = 3."""
    batches = _batches()
    with _bn_state_kept(model):
        base = _logits(model, mode, batches)
    out = {}
    for name, bn in batchnorm_layers(model):
        with _bn_state_kept(model), torch.no_grad():
            bn.weight.mul_(C)
            bn.bias.mul_(C)
            out[name] = float((_logits(model, mode, batches) - base).abs().max() / base.abs().max())
    return out


def oracle(model: torch.nn.Module, mode: str) -> dict[str, bool]:
    """Per BN layer: does scaling its (γ, β) by c = 3 change the logits by more than 1e-9 (relative)?"""
    return {n: d > TOL for n, d in relative_changes(model, mode).items()}


def disagreements(labels: dict[str, bool], truth: dict[str, bool]) -> list[str]:
    return [n for n in truth if labels.get(n) != truth[n]]


# Re-estimating ResNet-18's statistics 20 times takes most of this file's time; its batch-statistics case stays.
@pytest.mark.parametrize("arch, mode", [(a, "batch") for a in ARCHS]
                         + [(a, "re-estimated") for a in ARCHS if a != "resnet18"])
def test_rule_agrees_with_the_rescaling_oracle_on_every_bn_layer(arch: str, mode: str) -> None:
    model = _model(arch)
    labels = scale_identifiable(model)
    truth = oracle(model, mode)
    assert list(labels) == list(truth)
    assert disagreements(labels, truth) == []
    assert (sum(labels.values()), len(labels)) == EXPECTED[arch], describe(labels)


@pytest.mark.parametrize("arch", ["lenet", "resnet20", "densenet"])
def test_the_oracle_fails_a_rule_that_calls_every_layer_identifiable(arch: str) -> None:
    truth = oracle(_model(arch), "batch")
    assert disagreements({n: True for n in truth}, truth)


def test_fixed_running_statistics_make_every_rescaling_visible() -> None:
    # Why the oracle does not use eval mode with the model's own running statistics: there the next BN divides by
    # a fixed σ, so even the non-identifiable layers' rescaling changes the logits.
    truth = oracle(_model("lenet"), "fixed")
    assert all(truth.values())


def test_the_rule_leaves_the_model_as_it_was() -> None:
    model = _model("resnet20").train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scale_identifiable(model)
    next_gain(model)
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_an_unknown_operation_counts_as_changing_the_output() -> None:
    class Odd(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_shape = (4,)
            self.fc1, self.bn1 = torch.nn.Linear(4, 6, bias=False), torch.nn.BatchNorm1d(6)
            self.fc2, self.bn2 = torch.nn.Linear(6, 6, bias=False), torch.nn.BatchNorm1d(6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # tanh is not positively homogeneous: scaling bn1 changes what bn2 sees beyond a scale.
            return self.bn2(self.fc2(torch.tanh(self.bn1(self.fc1(x)))))

    assert scale_identifiable(Odd()) == {"bn1": True, "bn2": True}


def test_a_users_module_with_view_inplace_relu_and_a_divisor() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_shape = SHAPE
            self.conv, self.bn1 = torch.nn.Conv2d(1, 4, 3, bias=False), torch.nn.BatchNorm2d(4)
            self.fc, self.bn2 = torch.nn.Linear(4 * 36, 5), torch.nn.BatchNorm1d(5)
            self.bn3, self.head = torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3)
            self.relu = torch.nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.relu(self.bn1(self.conv(x)))
            h = self.bn2(self.fc(h.view(h.size(0), -1)))  # x.view(N, -1): a flatten; the bias is centered out
            return self.head(1.0 / (1.5 + self.bn3(h).abs()))  # abs and a divisor: not homogeneous

    torch.manual_seed(0)
    net = Net().double()
    for _, bn in batchnorm_layers(net):
        bn.eps = EPS
    truth = oracle(net, "batch")
    assert truth == {"bn1": False, "bn2": False, "bn3": True}
    assert scale_identifiable(net) == truth


def _gains(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v for k, v in next_gain(model).items() if v is not None}


@pytest.mark.parametrize("arch", ["lenet", "densenet"])
def test_the_gain_is_unchanged_by_rescaling_a_non_identifiable_layer(arch: str) -> None:
    model = _model(arch)
    batches = _batches()
    _reestimate(model, batches)
    base = _gains(model)
    for name, ident in scale_identifiable(model).items():
        if ident:
            continue
        scaled = _scaled(model, name)
        _reestimate(scaled, batches)  # the running statistics the rescaled network converges to
        after = _gains(scaled)
        assert after.keys() == base.keys()
        for k in base:
            np.testing.assert_allclose(after[k], base[k], rtol=1e-10, err_msg=f"{name} -> {k}")
        # |γ|/σ of the rescaled layer itself is not: it moved by the factor c
        bn0, bn1 = dict(model.named_modules())[name], dict(scaled.named_modules())[name]
        ratio = (bn1.weight.abs() / bn1.running_var.sqrt()) / (bn0.weight.abs() / bn0.running_var.sqrt())
        assert torch.allclose(ratio, torch.full_like(ratio, C))


def test_the_gain_is_unchanged_by_moving_a_factor_between_gamma_and_the_next_weight() -> None:
    model = _model("lenet")
    batches = _batches()
    _reestimate(model, batches)
    moved = _scaled(model, "norm4")
    with torch.no_grad():
        moved.fc3.weight.div_(C)  # relu(c·y) = c·relu(y): the logits stay the same
    assert torch.allclose(_logits(moved, "fixed", batches), _logits(model, "fixed", batches), rtol=1e-12)
    np.testing.assert_allclose(_gains(moved)["norm4"], _gains(model)["norm4"], rtol=1e-12)


def test_the_gain_matches_its_definition_on_the_last_lenet_layer() -> None:
    # norm4 -> relu -> fc3 -> logits: G_c² = γ_c² Σ_k W[k, c]² (v_k = 1 for a logit).
    model = _model("lenet")
    g = _gains(model)["norm4"]
    want = model.norm4.weight.detach().numpy() ** 2 * (model.fc3.weight.detach().numpy() ** 2).sum(0)
    np.testing.assert_allclose(g, want, rtol=1e-12)
    # norm3 -> relu -> fc2 -> norm4: v_k = norm4's running variance + eps (1e-300 here).
    v = model.norm4.running_var.detach().numpy()
    want3 = model.norm3.weight.detach().numpy() ** 2 * ((model.fc2.weight.detach().numpy() ** 2) / v[:, None]).sum(0)
    np.testing.assert_allclose(_gains(model)["norm3"], want3, rtol=1e-12)
    step = effective_step(0.05, g)
    assert step is not None and step["median"] == pytest.approx(0.05 * float(np.median(g)), rel=1e-12)
