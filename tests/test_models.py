"""Tests for bnmem.models: shapes, norm swapping, audit helpers, LeNet op order, trainability."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bnmem.models.norms import NORMS
from bnmem.models import MODELS

ARCHS = tuple(MODELS)
from bnmem.errors import BnmemError
from bnmem.models import (
    MODELS,
    BasicBlock,
    LeNet,
    ResNet,
    batchnorm_layers,
    build_model,
    model_options,
    norm_factory,
    norm_layers,
    num_groups,
)

SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]
SLOW = {("resnet18", (3, 32, 32)), ("densenet", (3, 32, 32))}


def _cases():
    for arch in ARCHS:
        for shape in SHAPES:
            marks = [pytest.mark.slow] if (arch, shape) in SLOW else []
            yield pytest.param(arch, shape, marks=marks, id=f"{arch}-{'x'.join(map(str, shape))}")


def _non_norm_params(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters that do not belong to a normalization layer."""
    norm_names = {name for name, _ in norm_layers(model)}
    out = {}
    for name, p in model.named_parameters():
        owner = name.rsplit(".", 1)[0]
        if owner not in norm_names:
            out[name] = p
    return out


# ---------------------------------------------------------------- shapes, grads


@pytest.mark.parametrize("arch, shape", list(_cases()))
def test_every_norm_forward_backward(arch, shape):
    torch.manual_seed(0)
    for norm in NORMS:
        model = build_model(arch, shape, 7, norm)
        x = torch.randn(3, *shape)
        out = model(x)
        assert out.shape == (3, 7), (arch, norm)
        out.square().mean().backward()
        for name, p in model.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), (arch, norm, name)
        # Eval mode (running statistics for BN) must also work.
        model.eval()
        with torch.no_grad():
            assert torch.isfinite(model(x[:1])).all()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_channels_last_input_matches_nchw(arch, norm):
    torch.manual_seed(0)
    model = build_model(arch, (3, 8, 8), 5, norm).eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        ref = model(x)
        out = model(x.to(memory_format=torch.channels_last))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- norm swapping


@pytest.mark.parametrize("arch", ARCHS)
def test_norm_variants_differ_only_in_norm_layers(arch):
    models = {}
    for norm in NORMS:
        torch.manual_seed(123)  # norm layers draw no random numbers: same seed -> same other weights
        models[norm] = build_model(arch, (1, 8, 8), 10, norm)
    ref = _non_norm_params(models["batch"])
    bn_names = [name for name, _ in norm_layers(models["batch"])]
    assert bn_names and [n for n, _ in batchnorm_layers(models["batch"])] == bn_names
    for norm, model in models.items():
        other = _non_norm_params(model)
        assert {k: v.shape for k, v in other.items()} == {k: v.shape for k, v in ref.items()}, norm
        # The norm modules sit at the same places in every variant.
        modules = dict(model.named_modules())
        assert all(n in modules for n in bn_names)
        for n in bn_names:
            # Each BN position holds this norm's layer for the same tensor shape (norm_factory's docstring).
            conv = isinstance(models["batch"].get_submodule(n), nn.BatchNorm2d)
            want = {"batch": nn.BatchNorm2d if conv else nn.BatchNorm1d, "none": nn.Identity,
                    "group": nn.GroupNorm, "layer": nn.GroupNorm if conv else nn.LayerNorm}[norm]
            assert type(modules[n]) is want, (norm, n, type(modules[n]))
            if norm == "layer" and conv:
                assert modules[n].num_groups == 1, n
        if norm == "none":
            assert norm_layers(model) == []
        else:
            assert [n for n, _ in norm_layers(model)] == bn_names
        for name, p in other.items():
            if norm == "none" and isinstance(model, ResNet) and ".conv2." in name:
                assert torch.count_nonzero(p) == 0  # zero-init of the residual branch (documented)
            else:
                assert torch.equal(p, ref[name]), (norm, name)


def test_resnet_zero_init_residual():
    none = build_model("resnet20", (1, 8, 8), 10, "none")
    batch = build_model("resnet20", (1, 8, 8), 10, "batch")
    forced = build_model("resnet", (1, 8, 8), 10, "group", zero_init_residual=True)
    blocks = lambda m: [b for b in m.modules() if isinstance(b, BasicBlock)]  # noqa: E731
    assert len(blocks(none)) == 9
    assert all(torch.count_nonzero(b.conv2.weight) == 0 for b in blocks(none))
    assert all(torch.all(b.norm2.weight == 1) for b in blocks(batch))  # standard γ=1 by default
    assert all(torch.count_nonzero(b.norm2.weight) == 0 for b in blocks(forced))
    assert all(torch.count_nonzero(b.conv2.weight) > 0 for b in blocks(forced))
    # At init a 'none' block is relu(shortcut(x)): identity on non-negative inputs.
    block = blocks(none)[1]
    x = torch.rand(2, 16, 8, 8)
    torch.testing.assert_close(block(x), x)


# ---------------------------------------------------------------- factory, audit helpers


def test_norm_factory_kinds():
    assert isinstance(norm_factory("batch")(4), nn.BatchNorm2d)
    assert isinstance(norm_factory("batch", dims=1)(4), nn.BatchNorm1d)
    assert isinstance(norm_factory("none")(4), nn.Identity)
    assert isinstance(norm_factory("none", dims=1)(4), nn.Identity)
    g = norm_factory("group")(16)
    assert isinstance(g, nn.GroupNorm) and g.num_groups == 8 and g.num_channels == 16
    l2 = norm_factory("layer")(12)
    assert isinstance(l2, nn.GroupNorm) and l2.num_groups == 1
    l1 = norm_factory("layer", dims=1)(12)
    assert isinstance(l1, nn.LayerNorm) and l1.normalized_shape == (12,)
    assert isinstance(norm_factory("group", dims=1)(12), nn.GroupNorm)
    with pytest.raises(BnmemError, match="unknown norm 'bn'"):
        norm_factory("bn")


def test_layer_norm_on_conv_features_normalizes_over_chw():
    x = torch.randn(2, 6, 4, 4) * 3 + 1
    y = norm_factory("layer")(6)(x)
    torch.testing.assert_close(y.mean(dim=(1, 2, 3)), torch.zeros(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(dim=(1, 2, 3), unbiased=False), torch.ones(2), atol=1e-3, rtol=0)


@pytest.mark.parametrize("c, g", [(1, 1), (6, 6), (7, 7), (8, 8), (12, 6), (16, 8), (33, 3), (60, 6), (11, 1)])
def test_num_groups_is_largest_divisor_up_to_8(c, g):
    assert num_groups(c) == g


def test_audit_helpers_on_a_user_model():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Sequential(nn.Conv2d(8, 8, 3), nn.GroupNorm(2, 8), nn.InstanceNorm2d(8, affine=True)),
        nn.Identity(),
        nn.Flatten(),
        nn.LazyLinear(16),
        nn.LayerNorm(16),
        nn.BatchNorm1d(16),
    )
    assert [n for n, _ in norm_layers(model)] == ["1", "3.1", "3.2", "7", "8"]
    assert [n for n, _ in batchnorm_layers(model)] == ["1", "8"]
    assert norm_layers(nn.Linear(3, 3)) == [] and batchnorm_layers(nn.Linear(3, 3)) == []
    # The root module itself counts (name '').
    assert [n for n, _ in batchnorm_layers(nn.BatchNorm2d(3))] == [""]


# ---------------------------------------------------------------- build_model


def test_config_validates_against_the_model_registry():
    """bnmem.config checks architecture names against bnmem.names.ARCHS, which MODELS lists exactly."""
    from bnmem.config import ModelConfig
    from bnmem.names import ARCHS

    assert tuple(MODELS) == ARCHS
    for arch in MODELS:
        assert ModelConfig(arch=arch).arch == arch
    assert ModelConfig(arch="resnet").arch == "resnet20"
    with pytest.raises(ValueError, match="unknown architecture 'vgg'"):
        ModelConfig(arch="vgg")


def test_build_model_alias_and_options():
    model = build_model("resnet", (3, 32, 32), 10)
    assert isinstance(model, ResNet) and model.layer3[0].conv1.out_channels == 64 and not hasattr(model, "layer4")
    assert model_options("densenet") == {"depth": 22, "growth": 12, "compression": 0.5}
    assert build_model("mlp", (1, 8, 8), 3, "none", width=32).fc1.out_features == 32
    small = build_model("densenet", (1, 8, 8), 3, "group", depth=10, growth=4)
    assert small(torch.randn(2, 1, 8, 8)).shape == (2, 3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(arch="vgg"), "unknown architecture 'vgg'; choose one of lenet, mlp, resnet20, resnet18, densenet"),
        (dict(norm="batchnorm"), "unknown norm 'batchnorm'"),
        (dict(depth=22), "unknown option.*depth.*lenet"),
        (dict(input_shape=(8, 8)), "input_shape"),
        (dict(num_classes=0), "num_classes"),
        (dict(input_shape=(1, 3, 3)), "at least 4x4"),
    ],
)
def test_build_model_errors(kwargs, match):
    args = dict(arch="lenet", input_shape=(1, 8, 8), num_classes=10, norm="batch") | kwargs
    with pytest.raises(BnmemError, match=match):
        build_model(**args)


def test_densenet_bad_depth():
    with pytest.raises(BnmemError, match="6n\\+4"):
        build_model("densenet", (1, 8, 8), 10, depth=21)


# ---------------------------------------------------------------- LeNet op order (oracle)


def _lenet_reference(m: LeNet, x: torch.Tensor) -> torch.Tensor:
    """The op order documented in LeNet's docstring, written with bare functionals (eval mode)."""

    def norm(layer, h):
        if isinstance(layer, (nn.BatchNorm2d, nn.BatchNorm1d)):
            return F.batch_norm(h, layer.running_mean, layer.running_var, layer.weight, layer.bias, False, 0.0, layer.eps)
        if isinstance(layer, nn.GroupNorm):
            return F.group_norm(h, layer.num_groups, layer.weight, layer.bias, layer.eps)
        if isinstance(layer, nn.LayerNorm):
            return F.layer_norm(h, layer.normalized_shape, layer.weight, layer.bias, layer.eps)
        return h

    h = F.conv2d(x, m.conv1.weight, m.conv1.bias, stride=1, padding=2)
    h = F.max_pool2d(F.relu(norm(m.norm1, h)), kernel_size=2, stride=2)
    h = F.conv2d(h, m.conv2.weight, m.conv2.bias, stride=1, padding=2)
    h = F.max_pool2d(F.relu(norm(m.norm2, h)), kernel_size=2, stride=2)
    h = h.reshape(h.shape[0], -1)  # NCHW order
    h = F.relu(norm(m.norm3, F.linear(h, m.fc1.weight, m.fc1.bias)))
    h = F.relu(norm(m.norm4, F.linear(h, m.fc2.weight, m.fc2.bias)))
    return F.linear(h, m.fc3.weight, m.fc3.bias)


@pytest.mark.parametrize("norm", NORMS)
def test_lenet_matches_documented_op_order(norm):
    torch.manual_seed(0)
    m = build_model("lenet", (3, 28, 28), 10, norm)
    with torch.no_grad():  # non-trivial BN statistics and affine parameters
        for _, layer in norm_layers(m):
            layer.weight.uniform_(0.5, 1.5)
            layer.bias.uniform_(-0.2, 0.2)
            if isinstance(layer, (nn.BatchNorm2d, nn.BatchNorm1d)):
                layer.running_mean.uniform_(-0.1, 0.1)
                layer.running_var.uniform_(0.5, 2.0)
    m.eval()
    assert [n for n, _ in m.named_children()] == ["conv1", "norm1", "conv2", "norm2", "fc1", "norm3", "fc2", "norm4", "fc3"]
    assert m.fc1.in_features == 16 * 7 * 7
    x = torch.randn(4, 3, 28, 28)
    with torch.no_grad():
        assert torch.equal(m(x), _lenet_reference(m, x))


# ---------------------------------------------------------------- trainability


def test_resnet20_without_norm_learns():
    """A few full-batch steps on 64 learnable examples reduce the loss of an unnormalized ResNet-20."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1, 8, 8, generator=g)
    # Labels are a fixed linear function of the input, so they are learnable.
    y = (x.flatten(1) @ torch.randn(64, 4, generator=g)).argmax(1)
    torch.manual_seed(0)
    model = build_model("resnet20", (1, 8, 8), 4, "none")
    # lr 0.01: full-batch fitting of an unnormalized net spikes at 0.05 (so does LeNet);
    # minibatch training on real digits is stable at 0.05.
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(20):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(map(lambda v: v == v, losses))  # no NaN
    assert losses[-1] < 0.85 * losses[0], losses


@pytest.mark.parametrize("arch", ["lenet", "resnet20", "densenet"])
def test_eval_mode_models_work_with_torch_func_per_sample_grads(arch):
    """Per-sample gradients (torch.func.vmap over grad) need forward passes free of data-dependent control flow."""
    from torch.func import functional_call, grad, vmap

    model = build_model(arch, (1, 8, 8), 4, "batch").eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())

    def loss(p, x, y):
        return F.cross_entropy(functional_call(model, (p, buffers), (x[None],)), y[None])

    x, y = torch.randn(3, 1, 8, 8), torch.tensor([0, 1, 2])
    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    # Oracle: a slow loop of ordinary backward passes.
    for i in range(3):
        model.zero_grad()
        F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(grads[name][i], p.grad, rtol=1e-4, atol=1e-6)
