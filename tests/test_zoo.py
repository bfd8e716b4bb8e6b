"""The torchvision zoo through the audit: per-sample gradient norms equal the loop oracle (float64), the
ghost path covers every model, and the whole audit runs under a memory budget.

Random weights, ``num_classes=10``, 32x32 inputs (``vit_b_16`` built with ``image_size=32``: 4 patches
of 16x16 plus the class token), a handful of examples.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torchvision.models as tvm

import bnmem
from bnmem.measure.ghost import ghost_sq_norms
from bnmem.measure.gradnorms import eval_sq_norms, float64_copy, loop_sq_norms, per_sample_grad_norms

from test_ghost_layers import loop_per_param

ZOO = {
    "resnet18": lambda: tvm.resnet18(num_classes=10),
    "densenet121": lambda: tvm.densenet121(num_classes=10),
    "mobilenet_v2": lambda: tvm.mobilenet_v2(num_classes=10),
    "efficientnet_b0": lambda: tvm.efficientnet_b0(num_classes=10),
    "convnext_tiny": lambda: tvm.convnext_tiny(num_classes=10),
    "vit_b_16": lambda: tvm.vit_b_16(image_size=32, num_classes=10),
}
# vit_b_16 has 86 M parameters: each loop-oracle example is a full 86 M backward (~5 s here), so it gets 2.
N_EXAMPLES = {"vit_b_16": 2}
BUDGET = "3GB"


def _data(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def as_if_trained(model: torch.nn.Module) -> torch.nn.Module:
    """Norm affines and BN running statistics drawn away from their init (γ=1, β=0, μ=0, σ²=1).

    At init, mobilenet_v2's logits on these inputs vary by ~1e-10 across classes and the
    classifier bias holds nearly all of the gradient, which would make agreement trivial; after
    this, every parameter carries gradient (the head holds 2-59% of the squared norm). vit_b_16's
    zero-initialized head gets random weights for the same reason.
    """
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.GroupNorm, torch.nn.LayerNorm)):
                if m.weight is not None:
                    m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                    m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    m.running_var.copy_(0.3 + 0.4 * torch.rand(m.running_var.shape, generator=g))
            if isinstance(m, torch.nn.Linear) and not m.weight.any():
                # vit_b_16's head starts at zero, which leaves every other parameter without gradient
                m.weight.copy_(0.05 * torch.randn(m.weight.shape, generator=g))
    return model


def _model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return as_if_trained(ZOO[name]()).eval()


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_audit_ghost_norms_equal_the_loop(name, tmp_path):
    model = _model(name)
    n = N_EXAMPLES.get(name, 3)
    x, y = _data(n)
    xt, yt = _data(2, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fallback to vmap would warn: it must not happen
        warnings.filterwarnings("ignore", message=".*enable_nested_tensor.*")
        result = bnmem.audit(model, (x, y), (xt, yt), top_k=2, max_examples=None, out=tmp_path, max_memory=BUDGET)
    gn = result.data["gradient_norms"]
    assert gn["method"] == "ghost" and gn["max_memory"] == "3.0 GB"
    # per parameter, then the total the audit wrote
    m64 = float64_copy(model).eval()
    oracle = loop_per_param(m64, x.double(), y)
    ghost = ghost_sq_norms(m64, x.double(), y)
    assert set(ghost) == set(oracle)
    for pname, want in oracle.items():
        assert bool((want > 0).all()), pname
        torch.testing.assert_close(ghost[pname], want, rtol=1e-9, atol=0, msg=pname)
    total = torch.stack(list(oracle.values())).sum(0).sqrt().numpy()
    np.testing.assert_allclose(np.load(tmp_path / "gradient_norms.npy"), total, rtol=1e-9)
    risk = result.data["risk"]  # no shadow models: nothing measured, the signals still rated
    assert risk["level"] == "not measured" and risk["indicator_level"] in ("low", "moderate", "elevated")
    assert ("## BN |γ|/σ per layer" in result.markdown) == (name in ("resnet18", "densenet121", "mobilenet_v2",
                                                                         "efficientnet_b0"))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_vmap_agrees_with_ghost(name):
    """The fallback path on the same models: vmap equals ghost equals the loop."""
    m64 = float64_copy(_model(name))
    x, y = _data(2)
    x = x.double()
    ghost, used = eval_sq_norms(m64, x, y, "ghost")
    vm, _ = eval_sq_norms(m64, x, y, "vmap", max_memory=8 * 2**30)
    assert used == "ghost"
    torch.testing.assert_close(vm, ghost, rtol=1e-9, atol=0)


def test_resnet18_digits_stem_inplace_relu_is_ghost():
    """The issue's model: torchvision resnet18 with a 1-channel 3x3 stem on 8x8 digits, ReLU(inplace=True)."""
    torch.manual_seed(0)
    model = tvm.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    model.eval()
    x, y = torch.randn(5, 1, 8, 8), torch.randint(0, 10, (5,))
    r = per_sample_grad_norms(model, x, y, max_memory="2GB")
    assert r.method == "ghost" and r.chunk_size >= 5
    np.testing.assert_allclose(r.norms, loop_sq_norms(float64_copy(model), x.double(), y).sqrt().numpy(), rtol=1e-9)


@pytest.mark.parametrize("name", ["mobilenet_v2", pytest.param("vit_b_16", marks=pytest.mark.slow)])
def test_zoo_shadow_models_with_cost_printed_first(name, capsys):
    """--shadow-models on a zoo architecture: fresh copies (reset_parameters) train and are attacked."""
    model = _model(name)
    x, y = _data(24)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*enable_nested_tensor.*")
        result = bnmem.audit(model, (x, y), _data(4, seed=1), top_k=2, max_examples=4, shadow_models=4,
                             train={"epochs": 1, "batch_size": 8, "lr": 0.01}, progress=True,
                             match_steps=False)  # the copies train 1 epoch as given (not the model's steps)
    mem = result.data["membership"]
    err = capsys.readouterr().err
    first = err.index("membership: training 4 of 4 shadow copies")
    assert first < err.index("shadow 0")  # the cost comes before the first copy trains
    # 12 examples per copy in batches of 8: one full batch per epoch (the trainer drops the partial one)
    assert mem["cost"]["steps"] == 4 * 1 * 1 and mem["cost"]["estimated_seconds"] > 0
    n_tensors = len(list(model.parameters()))
    reset, total = (int(v) for v in mem["reinitialized_parameters"].split(" parameter")[0].split(" of "))
    assert total == n_tensors and 0 < reset <= total
    assert 0 <= mem["attacks"]["online"]["all"]["auc"] <= 1
