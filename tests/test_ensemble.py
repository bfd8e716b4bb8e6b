"""The ensemble trainer against its oracle: the same K models trained one by one
with the plain ``train_model`` (same seeds, initialization and batches).

Tolerances and why:

- float64, 2 epochs: 1e-9 on every parameter, BN running statistic and eval
  logit (num_batches_tracked exactly). The two ways differ only in the
  summation order inside kernels (~1e-16), which training amplifies a little.
- float32, one step: 1e-5 (measured ~3e-7). Over more float32 steps rounding
  differences grow fast at lr 0.05 with BN: the plain trainer restarted from
  an init perturbed by 1e-7 drifts by ~1e-5 within 6 steps, and the
  ensemble-vs-plain gap reached 1e-3 for one of three models after 6 steps.
  So multi-step checks run in float64.
- Adam multiplies gradient noise below its eps=1e-8 by lr/eps. The biases in
  front of a BN layer have a mathematically zero gradient, so their rounding
  noise moves them by ~lr*noise/eps per step, in the plain trainer as much as
  here: in float32 that is an lr-sized step, so Adam is checked in float64
  only, where it adds up to ~2e-9 over two epochs at lr 1e-3. Those biases,
  the running means that absorb them and the eval logits get 1e-8 with Adam
  and BN; everything else keeps 1e-9. With norm_weight_decay > 0, a BN β whose
  loss gradient vanishes (its channel always passes the ReLU and BN follows)
  is moved by the L2 decay alone, and Adam's effective step lr*wd/eps ≈ 600
  per unit β is unstable: β's rounding noise grows ~600x per step in *both*
  trainers. So the two-epoch Adam check uses norm_weight_decay=0, and
  norm_weight_decay > 0 is checked over one step.

IN sets have different sizes with different numbers of full batches, so the
skipped-step masking is exercised in every multi-epoch check.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import bnmem.train.ensemble as ensemble
from bnmem.config import ModelConfig, TrainConfig
from bnmem.models import LeNet
from bnmem.train import seeded_model, train_model
from bnmem.train.batching import epoch_batches
from bnmem.train.ensemble import resolve_method, train_models, train_models_parallel
from bnmem.train.ensemble_optim import StackedOptimizer, weight_decay_by_name
from bnmem.train.optim import build_optimizer

SEEDS = [3, 5, 8]
BATCH = 16


def _in_sets(sizes: tuple[int, ...], seed: int = 0, pool: int = 300) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.sort(rng.permutation(pool)[:n]) for n in sizes]


# 80, 67 and 90 examples: 5, 4 and 5 full batches of 16 per epoch.
UNEQUAL = (80, 67, 90)


def _sgd(**kw) -> TrainConfig:
    base = dict(epochs=2, batch_size=BATCH, lr=0.05, momentum=0.9, weight_decay=1e-3, norm_weight_decay=2e-3,
                gs_reg=0.5, gs_tau=0.5, schedule="cosine")
    return TrainConfig(**{**base, **kw})


def _adam(**kw) -> TrainConfig:
    base = dict(optimizer="adam", epochs=2, batch_size=BATCH, lr=1e-3, weight_decay=1e-3, norm_weight_decay=0.0,
                gs_reg=0.5, gs_tau=0.5)
    return TrainConfig(**{**base, **kw})


def _oracle(mc: ModelConfig, ds, cfg: TrainConfig, seeds: list[int], idx: list[np.ndarray],
            init_states: list[dict] | None = None) -> list[torch.nn.Module]:
    """The slow, obviously-correct way: train_model on each model, in ds's dtype."""
    out = []
    for k, seed in enumerate(seeds):
        model = seeded_model(mc, ds, seed).to(ds.x_train.dtype)
        if init_states is not None:
            model.load_state_dict(init_states[k])
        out.append(train_model(model, ds, cfg, seed, train_idx=idx[k], measure=False, progress=False).model)
    return out


@torch.no_grad()
def _eval_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    was = model.training
    model.eval()
    out = model(x.contiguous(memory_format=torch.channels_last))
    model.train(was)
    return out


# Biases of the layers a BN layer follows: their loss gradient is exactly zero
# (BN subtracts the batch mean), so under Adam they random-walk on rounding
# noise (see the module docstring), and the running means and eval logits
# carry that walk along. Only these get the looser tolerance, and only for Adam.
PRE_BN = ("conv1.bias", "conv2.bias", "fc1.bias", "fc2.bias", "running_mean", "logits")


def _assert_match(refs: list, models: list, ds, tol: float, loose: tuple[str, ...] = (),
                  loose_tol: float = 1e-8) -> None:
    """Every parameter, buffer and eval logit of model k within ``tol`` of the oracle's
    (``loose_tol`` for names ending in one of ``loose``); num_batches_tracked exactly."""

    def limit(name: str) -> float:
        return loose_tol if name.endswith(loose) and loose else tol

    x = ds.x_test[:256]
    for k, (ref, got) in enumerate(zip(refs, models)):
        assert type(got) is type(ref)
        sa, sb = ref.state_dict(), got.state_dict()
        assert sa.keys() == sb.keys()
        for name, a in sa.items():
            b = sb[name]
            assert b.dtype == a.dtype, (k, name)
            if not a.is_floating_point():  # num_batches_tracked
                assert torch.equal(a, b), (k, name, a, b)
            else:
                err = (a - b).abs().max().item()
                assert err <= limit(name), f"model {k} {name}: max |diff| {err:.3g} > {limit(name)}"
        err = (_eval_logits(ref, x) - _eval_logits(got, x)).abs().max().item()
        assert err <= limit("logits"), f"model {k} eval logits: max |diff| {err:.3g} > {limit('logits')}"


def _assert_bitwise(a: list, b: list) -> None:
    for k, (ma, mb) in enumerate(zip(a, b)):
        for (name, ta), tb in zip(ma.state_dict().items(), mb.state_dict().values()):
            assert torch.equal(ta, tb), (k, name)


# ---------------------------------------------------------------- the oracle


@pytest.mark.parametrize("method", ["grouped", "vmap"])
@pytest.mark.parametrize("norm", ["batch", "none"])
@pytest.mark.parametrize("recipe", ["sgd", "adam"])
def test_float64_two_epochs_match_sequential(ds64, method, norm, recipe):
    cfg = _sgd() if recipe == "sgd" else _adam()
    mc = ModelConfig(arch="lenet", norm=norm)
    idx = _in_sets(UNEQUAL)
    assert len({len(epoch_batches(len(i), BATCH, s, 0)) for i, s in zip(idx, SEEDS)}) > 1  # masking exercised
    models = train_models(mc, ds64, cfg, SEEDS, idx, method=method, progress=False)
    loose = PRE_BN if recipe == "adam" and norm == "batch" else ()
    _assert_match(_oracle(mc, ds64, cfg, SEEDS, idx), models, ds64, 1e-9, loose=loose)


# Flips are refused on digits (a mirrored digit is another input); the engines'
# pixel copies do not care which images they flip, so the crop-flip check runs
# on the digits tensors under a CIFAR name.
@pytest.mark.parametrize("method", ["grouped", "vmap"])
@pytest.mark.parametrize("norm", ["batch", "none"])
@pytest.mark.parametrize("aug", [("shift", "reflect"), ("crop-flip", "zero")])
def test_float64_augmented_training_matches_sequential(ds64, method, norm, aug):
    kind, padding = aug
    data = dataclasses.replace(ds64, name="cifar10") if kind == "crop-flip" else ds64
    cfg = _sgd(augment=kind, augment_padding=padding, augment_pad=2)
    mc = ModelConfig(arch="lenet", norm=norm)
    idx = _in_sets(UNEQUAL)
    models = train_models(mc, data, cfg, SEEDS, idx, method=method, progress=False)
    refs = _oracle(mc, data, cfg, SEEDS, idx)
    _assert_match(refs, models, data, 1e-9)
    # The augmentation is live: without it the oracle ends elsewhere.
    plain = _oracle(mc, data, _sgd(), SEEDS[:1], idx[:1])[0]
    assert (plain.conv1.weight - refs[0].conv1.weight).abs().max() > 1e-3


@pytest.mark.parametrize("norm", ["batch", "none"])
def test_augmented_grouped_is_bitwise_independent_of_the_other_models(ds, norm):
    mc, cfg = ModelConfig(arch="lenet", norm=norm), _sgd(augment="shift")
    seeds, idx = list(range(8)), _in_sets((80, 67, 90, 75, 64, 81, 70, 96), seed=1)
    eight = train_models(mc, ds, cfg, seeds, idx, method="grouped", progress=False)
    four = train_models(mc, ds, cfg, seeds[4:], idx[4:], method="grouped", progress=False)
    _assert_bitwise(eight[4:], four)


@pytest.mark.parametrize("norm", ["group", "layer"])
def test_float64_group_and_layer_norm_grouped(ds64, norm):
    cfg, mc, idx = _sgd(), ModelConfig(arch="lenet", norm=norm), _in_sets(UNEQUAL)
    models = train_models(mc, ds64, cfg, SEEDS, idx, method="grouped", progress=False)
    _assert_match(_oracle(mc, ds64, cfg, SEEDS, idx), models, ds64, 1e-9)


@pytest.mark.parametrize("method", ["grouped", "vmap"])
def test_float64_adam_one_step_with_norm_decay(ds64, method):
    cfg = _adam(epochs=1, norm_weight_decay=2e-3)
    mc = ModelConfig(arch="lenet", norm="batch")
    idx = _in_sets((BATCH, BATCH + 3, BATCH + 1))  # one full batch each
    models = train_models(mc, ds64, cfg, SEEDS, idx, method=method, progress=False)
    _assert_match(_oracle(mc, ds64, cfg, SEEDS, idx), models, ds64, 1e-9)


@pytest.mark.parametrize("method", ["grouped", "vmap"])
@pytest.mark.parametrize("norm", ["batch", "none"])
def test_float32_one_step_matches_sequential(ds, method, norm):
    cfg = _sgd(epochs=1)
    mc = ModelConfig(arch="lenet", norm=norm)
    idx = _in_sets((BATCH, BATCH + 5, BATCH + 2))
    models = train_models(mc, ds, cfg, SEEDS, idx, method=method, progress=False)
    _assert_match(_oracle(mc, ds, cfg, SEEDS, idx), models, ds, 1e-5)


def test_vmap_other_architecture_matches_sequential(ds64):
    cfg, mc, idx = _sgd(epochs=1), ModelConfig(arch="mlp", norm="batch"), _in_sets(UNEQUAL)
    models = train_models(mc, ds64, cfg, SEEDS, idx, method="vmap", progress=False)
    _assert_match(_oracle(mc, ds64, cfg, SEEDS, idx), models, ds64, 1e-9)


def test_init_states_replace_the_seeded_init(ds64):
    mc, cfg, idx = ModelConfig(arch="lenet", norm="batch"), _sgd(epochs=1), _in_sets(UNEQUAL)
    # Initial states that are not what the seeds give, with non-trivial BN buffers.
    states = []
    for k in range(len(SEEDS)):
        m = seeded_model(mc, ds64, 100 + k).double()
        m.norm1.running_mean.fill_(0.25 * k)
        m.norm1.num_batches_tracked.fill_(7)
        states.append(m.state_dict())
    models = train_models(mc, ds64, cfg, SEEDS, idx, method="grouped", progress=False, init_states=states)
    _assert_match(_oracle(mc, ds64, cfg, SEEDS, idx, init_states=states), models, ds64, 1e-9)
    assert int(models[0].norm1.num_batches_tracked) == 7 + len(epoch_batches(len(idx[0]), BATCH, SEEDS[0], 0))


def test_sequential_method_is_the_plain_loop(ds):
    mc, cfg, idx = ModelConfig(arch="lenet", norm="batch"), _sgd(epochs=1), _in_sets((40, 37))
    models = train_models(mc, ds, cfg, SEEDS[:2], idx, method="sequential", progress=False)
    _assert_bitwise(_oracle(mc, ds, cfg, SEEDS[:2], idx), models)


# ------------------------------------------- independence of the model split


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("norm", ["batch", "none"])
def test_grouped_result_does_not_depend_on_the_other_models(ds, dtype, norm):
    data = dataclasses.replace(ds, x_train=ds.x_train.to(dtype), x_test=ds.x_test.to(dtype))
    mc, cfg = ModelConfig(arch="lenet", norm=norm), _sgd()
    seeds = list(range(8))
    idx = _in_sets((80, 67, 90, 75, 64, 81, 70, 96), seed=1)
    eight = train_models(mc, data, cfg, seeds, idx, method="grouped", progress=False)
    four = train_models(mc, data, cfg, seeds[2:6], idx[2:6], method="grouped", progress=False)
    _assert_bitwise(eight[2:6], four)
    three = train_models(mc, data, cfg, seeds[5:], idx[5:], method="grouped", progress=False)
    _assert_bitwise(eight[5:], three)


def test_chunking_gives_the_same_models(ds, monkeypatch):
    mc, cfg = ModelConfig(arch="lenet", norm="batch"), _sgd(epochs=1)
    seeds, idx = list(range(5)), _in_sets((80, 67, 90, 75, 64), seed=2)
    whole = train_models(mc, ds, cfg, seeds, idx, method="grouped", progress=False)
    monkeypatch.setattr(ensemble, "CPU_CHUNK", 4)  # chunks of 4 and 1 (+3 throw-away twins) models
    chunked = train_models(mc, ds, cfg, seeds, idx, method="grouped", progress=False)
    _assert_bitwise(whole, chunked)
    alone = train_models(mc, ds, cfg, seeds[1:2], idx[1:2], method="grouped", progress=False)
    _assert_bitwise(whole[1:2], alone)


def test_models_smaller_than_a_batch_train_in_their_own_chunk(ds64):
    # 10 examples < batch 16: that model trains on one batch of 10 (as train_model does).
    mc, cfg = ModelConfig(arch="lenet", norm="batch"), _sgd(epochs=2)
    idx = _in_sets((40, 10, 35))
    models = train_models(mc, ds64, cfg, SEEDS, idx, method="grouped", progress=False)
    _assert_match(_oracle(mc, ds64, cfg, SEEDS, idx), models, ds64, 1e-9)


def test_worker_processes_give_the_same_models(ds):
    # Two spawned workers (8 models, and 2 padded with throw-away twins) vs one process: bitwise the same.
    mc, cfg = ModelConfig(arch="lenet", norm="batch"), _sgd(epochs=1)
    seeds, idx = list(range(10)), _in_sets((80, 67, 90, 75, 64, 81, 70, 96, 66, 88), seed=3)
    one = train_models(mc, ds, cfg, seeds, idx, progress=False)
    two = train_models_parallel(mc, ds, cfg, seeds, idx, progress=False, workers=2)
    assert [type(m) for m in two] == [LeNet] * 10
    _assert_bitwise(one, two)


# ------------------------------------------------- the optimizer on its own


@pytest.mark.parametrize("kind", ["sgd", "sgd-no-momentum", "adam"])
def test_stacked_optimizer_matches_torch_and_masks_exactly(ds, kind):
    # Bitwise equal to torch.optim stepping only the active models: a skipped
    # step leaves parameters and state (momentum, Adam moments and step count)
    # exactly as they were, or the later steps would differ.
    cfg = TrainConfig(optimizer="adam" if kind == "adam" else "sgd", lr=0.01, momentum=0.0 if "no-momentum" in kind else 0.9,
                      weight_decay=1e-3, norm_weight_decay=2e-3)
    models = [seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, s) for s in (0, 1)]
    params = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).clone()
              for n, _ in models[0].named_parameters()}
    opt = StackedOptimizer(params, weight_decay_by_name(models[0], cfg), cfg)
    torch_opts = [build_optimizer(m, cfg) for m in models]
    g = torch.Generator().manual_seed(0)
    for step in range(4):
        grads = {n: torch.randn(p.shape, generator=g) for n, p in params.items()}
        active = torch.tensor([True, step % 2 == 0])  # model 1 skips every other step
        before = {n: p[1].clone() for n, p in params.items()}
        opt.step(grads, cfg.lr, active)
        for k, (m, o) in enumerate(zip(models, torch_opts)):
            if not active[k]:
                continue
            for n, p in m.named_parameters():
                p.grad = grads[n][k].clone()
            o.step()
        for n, p in models[0].named_parameters():
            assert torch.equal(params[n][0], p.detach()), (kind, step, n)
        for n, p in models[1].named_parameters():
            assert torch.equal(params[n][1], p.detach()), (kind, step, n)
            if not active[1]:
                assert torch.equal(params[n][1], before[n])


# ------------------------------------------------------------ API details


def test_returned_models_are_ordinary_channels_last_modules(ds):
    mc, cfg = ModelConfig(arch="lenet", norm="batch"), _sgd(epochs=1)
    models = train_models(mc, ds, cfg, SEEDS[:2], _in_sets((40, 37)), progress=False)
    for m in models:
        assert type(m) is LeNet and m.training
        assert m.conv1.weight.is_contiguous(memory_format=torch.channels_last)
        assert m.conv1.weight.dtype == torch.float32 and m.conv1.weight.requires_grad
        assert int(m.norm1.num_batches_tracked) > 0


def test_auto_picks_grouped_for_lenet_and_by_device_otherwise(ds):
    lenet = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0)
    mlp = seeded_model(ModelConfig(arch="mlp", norm="batch"), ds, 0)
    assert resolve_method("auto", lenet) == "grouped"
    assert resolve_method("auto", seeded_model(ModelConfig(arch="lenet", norm="none"), ds, 0)) == "grouped"
    assert resolve_method("auto", mlp, "cpu") == "sequential"
    assert resolve_method("auto", mlp, "cuda") == "vmap"
    with pytest.raises(ValueError, match="grouped"):
        resolve_method("grouped", seeded_model(ModelConfig(arch="mlp", norm="batch"), ds, 0))
    with pytest.raises(ValueError, match="unknown ensemble method"):
        resolve_method("parallel", seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0))


def test_bad_inputs_are_rejected(ds):
    mc, cfg = ModelConfig(arch="lenet", norm="batch"), _sgd(epochs=1)
    with pytest.raises(ValueError, match="seeds"):
        train_models(mc, ds, cfg, [0, 1], [np.arange(20)], progress=False)
    with pytest.raises(ValueError, match="non-empty"):
        train_models(mc, ds, cfg, [0], [np.array([], dtype=np.int64)], progress=False)
    with pytest.raises(ValueError, match="outside"):
        train_models(mc, ds, cfg, [0], [np.array([0, ds.n_train])], progress=False)
    with pytest.raises(ValueError, match="init_states"):
        train_models(mc, ds, cfg, [0], [np.arange(20)], progress=False, init_states=[])


def test_divergence_is_reported_with_the_seed(ds):
    mc, cfg = ModelConfig(arch="lenet", norm="none"), _sgd(epochs=1, lr=1e20, gs_reg=0.0)
    with pytest.raises(FloatingPointError, match="seed"):
        train_models(mc, ds, cfg, SEEDS[:2], _in_sets((40, 37)), progress=False)


@pytest.mark.parametrize("augmented", [False, True])
def test_vmap_nchw_batches_give_the_channels_last_steps(ds64, augmented):
    """On accelerators the vmap engine hands each model an NCHW batch (CUDA's batch norm refuses a
    channels_last one under vmap); on the CPU it hands a channels_last view. Same step either way (float64)."""
    from bnmem.data import augment
    from bnmem.train.ensemble_vmap import VmapEnsemble

    mc = ModelConfig(arch="resnet20", norm="batch")
    models = [seeded_model(mc, ds64, s).to(torch.float64) for s in SEEDS]
    x, y = ds64.x_train, ds64.y_train
    sel = torch.as_tensor(np.stack(_in_sets((BATCH,) * len(SEEDS))))
    aug = None
    if augmented:
        spec = augment.spec_of(_sgd(epochs=1).model_copy(update={"augment": "shift"}), ds64.input_shape, ds64.name)
        aug = augment.epoch_params(spec, 1, BATCH * len(SEEDS), 0, 0)[0].view(len(SEEDS), BATCH, 3)
    out = {}
    for fmt in (True, False):
        engine = VmapEnsemble([m for m in models], x, y, channels_last=fmt)
        assert engine._inputs(sel, aug).is_contiguous() is (not fmt)
        losses, grads = engine.losses_and_grads(sel, aug)
        out[fmt] = (losses, grads, {k: v.clone() for k, v in engine.buffers.items()})
    (l1, g1, b1), (l2, g2, b2) = out[True], out[False]
    assert torch.allclose(l1, l2, rtol=0, atol=1e-12)
    for name in g1:
        assert torch.allclose(g1[name], g2[name], rtol=0, atol=1e-10), name
    for name in b1:
        assert torch.allclose(b1[name].double(), b2[name].double(), rtol=0, atol=1e-12), name
