"""The accelerator options of a recipe on the CPU: bf16 autocast is live in the plain trainer and in every
engine, and the engines' bf16 steps agree with one-by-one bf16 training to bfloat16's rounding; channels_last
off gives the same training as on (float64). The float32 default is what every other oracle test checks."""

from __future__ import annotations

import pytest
import torch

from bnmem.config import ModelConfig, TrainConfig
from bnmem.train import seeded_model, train_model
from bnmem.train.ensemble import train_models
from test_ensemble import _in_sets, _oracle, _sgd

SEEDS = [3, 5]


def _max_diff(a: list, b: list) -> float:
    return max((pa.double() - pb.double()).abs().max().item() for ma, mb in zip(a, b)
               for pa, pb in zip(ma.state_dict().values(), mb.state_dict().values()) if pa.is_floating_point())


def test_precision_defaults_to_float32_and_refuses_others():
    assert TrainConfig().precision == "float32" and TrainConfig().channels_last == "auto"
    with pytest.raises(ValueError):
        TrainConfig(precision="fp16")


@pytest.mark.parametrize("method", ["vmap", "grouped"])
def test_bf16_engine_step_matches_one_by_one_bf16(ds, method):
    """One step of the fast pair's BN twin (float32 data, bf16 forward): the engine against the plain trainer
    under the same autocast within 2e-3, and the engine's bf16 step more than 1e-4 from its float32 step (the
    autocast is live there). Measured: grouped 1.5e-5 from one by one, vmap 1.2e-3 (its norm layers run in
    float32, the plain trainer's in bfloat16: ``VmapEnsemble``); bf16 vs float32 1.7e-3 (bfloat16 keeps 8
    bits; float32's own engine gap is ~3e-7, tests/test_ensemble.py)."""
    mc, idx = ModelConfig(arch="fastnet", norm="batch"), _in_sets((16, 17))
    f32 = _sgd(epochs=1, gs_reg=0.0)
    bf16 = f32.model_copy(update={"precision": "bf16"})
    got = train_models(mc, ds, bf16, SEEDS, idx, method=method, progress=False)
    engine_gap = _max_diff(got, _oracle(mc, ds, bf16, SEEDS, idx))
    live = _max_diff(got, train_models(mc, ds, f32, SEEDS, idx, method=method, progress=False))
    assert engine_gap < 2e-3 and live > 1e-4, (engine_gap, live)


def test_channels_last_off_trains_the_same(ds64):
    mc, cfg, idx = ModelConfig(arch="resnet20", norm="batch"), _sgd(epochs=1), _in_sets((40,))
    on = train_model(seeded_model(mc, ds64, 3).double(), ds64, cfg, 3, train_idx=idx[0], measure=False,
                     progress=False).model
    off_cfg = cfg.model_copy(update={"channels_last": "off"})
    off = train_model(seeded_model(mc, ds64, 3).double(), ds64, off_cfg, 3, train_idx=idx[0], measure=False,
                      progress=False).model
    w_on, w_off = on.layer1[0].conv1.weight, off.layer1[0].conv1.weight  # (C > 1: the layouts differ)
    assert w_on.is_contiguous(memory_format=torch.channels_last)
    assert w_off.is_contiguous() and not w_off.is_contiguous(memory_format=torch.channels_last)
    assert _max_diff([on], [off]) < 1e-12
    vmap = train_models(mc, ds64, off_cfg, [3], idx, method="vmap", progress=False)
    assert _max_diff([on], vmap) < 1e-9


@pytest.mark.parametrize("method", ["sequential", "vmap", "grouped"])
def test_compiled_training_is_the_same_training(ds64, method, monkeypatch):
    """``train.compile`` wraps each path's training forward in torch.compile; traced with dynamo's eager backend
    (inductor's code generation takes minutes on this CPU; benchmarks/gpu_check.py --compile measures it on a GPU),
    two float64 epochs give the uncompiled models to 1e-12, BN running statistics included."""
    import torch._dynamo

    import bnmem.train.precision as precision

    monkeypatch.setattr(precision, "COMPILE_BACKEND", "eager")
    torch._dynamo.reset()
    traced: list[int] = []
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: traced.append(1) or real(fn, **kw))
    mc, idx = ModelConfig(arch="lenet", norm="batch"), _in_sets((40, 35))
    plain = _sgd(epochs=2)
    on = plain.model_copy(update={"compile": "default"})
    got = train_models(mc, ds64, on, SEEDS, idx, method=method, progress=False)
    assert traced  # the compiled path ran
    assert _max_diff(got, train_models(mc, ds64, plain, SEEDS, idx, method=method, progress=False)) < 1e-12


@pytest.mark.parametrize("update", [{"precision": "bf16"}, {"compile": "default"}])
def test_dp_sgd_refuses_what_it_would_not_apply(ds, update):
    """Opacus's loop applies neither bf16 nor compilation: a DP run asking for them fails in one line rather than
    recording a precision it did not use."""
    from bnmem.errors import BnmemError
    from bnmem.train.dp import DPConfig, train_dp_model

    model = seeded_model(ModelConfig(arch="lenet", norm="none"), ds, 0)
    with pytest.raises(BnmemError, match="DP-SGD training runs in float32"):
        train_dp_model(model, ds, _sgd(epochs=1, gs_reg=0.0).model_copy(update=update), DPConfig(), 0)
