"""The single-model trainer: determinism, resume, optimizer groups, schedules, BN query modes."""

import numpy as np
import pytest
import torch

from bnmem import io
from bnmem.config import ModelConfig, TrainConfig
from bnmem.measure.predict import predict_logits
from bnmem.train import seeded_model, train_model
from bnmem.train.batching import epoch_batches
from bnmem.train.optim import build_optimizer, lr_at


def _train(ds, norm="batch", epochs=2, run_dir=None, on_epoch=None, seed=0, **kw):
    cfg = TrainConfig(epochs=epochs, lr=0.05, **kw)
    model = seeded_model(ModelConfig(arch="lenet", norm=norm), ds, seed)
    return train_model(model, ds, cfg, seed, run_dir=run_dir, on_epoch=on_epoch, progress=False)


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_same_config_twice_gives_identical_weights(ds):
    a, b = _train(ds), _train(ds)
    for k, v in _state(a.model).items():
        assert torch.equal(v, b.model.state_dict()[k]), k
    assert a.history == b.history or [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]


def test_different_seed_gives_different_weights(ds):
    a, b = _train(ds, seed=0), _train(ds, seed=1)
    assert not torch.equal(a.model.conv1.weight, b.model.conv1.weight)


def test_same_seed_same_init_across_norms(ds):
    a = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 3)
    b = seeded_model(ModelConfig(arch="lenet", norm="none"), ds, 3)
    assert torch.equal(a.conv1.weight, b.conv1.weight)
    assert torch.equal(a.fc3.weight, b.fc3.weight)


class _Killed(Exception):
    pass


def test_resume_after_interruption_matches_uninterrupted(ds, tmp_path):
    full = _train(ds, epochs=4)

    def die(epoch, model):
        if epoch == 3:
            raise _Killed

    with pytest.raises(_Killed):
        _train(ds, epochs=4, run_dir=tmp_path, on_epoch=die)
    assert (tmp_path / "checkpoint.pt").exists() and not io.is_done(tmp_path)
    assert io.load_torch(tmp_path / "checkpoint.pt")["epoch"] == 2
    resumed = _train(ds, epochs=4, run_dir=tmp_path)
    assert io.is_done(tmp_path) and not (tmp_path / "checkpoint.pt").exists()
    assert len(resumed.history) == 4
    for k, v in _state(full.model).items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    assert [h["noisy_acc"] for h in resumed.history] == [h["noisy_acc"] for h in full.history]


def test_history_has_subset_curves(ds):
    res = _train(ds, epochs=1)
    h = res.history[0]
    for key in ("clean_acc", "noisy_acc", "noisy_orig_acc", "test_acc", "train_loss"):
        assert h[key] is not None
    assert h["ood_acc"] is None  # no OOD injected: the subset is empty


def test_param_groups_separate_norm_decay(ds):
    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0)
    opt = build_optimizer(model, TrainConfig(weight_decay=1e-3, norm_weight_decay=7e-4))
    by_decay = {g["weight_decay"]: {id(p) for p in g["params"]} for g in opt.param_groups}
    assert id(model.conv1.weight) in by_decay[1e-3]
    assert id(model.norm1.weight) in by_decay[7e-4] and id(model.norm1.bias) in by_decay[7e-4]
    assert id(model.conv1.bias) in by_decay[0.0]
    n_params = sum(1 for _ in model.parameters())
    assert sum(len(s) for s in by_decay.values()) == n_params


def test_lr_schedules():
    cfg = TrainConfig(lr=0.1, epochs=8, schedule="step")
    assert [round(lr_at(cfg, e), 6) for e in range(8)] == [0.1] * 4 + [0.01] * 2 + [0.001] * 2
    cos = TrainConfig(lr=0.1, epochs=4, schedule="cosine")
    assert lr_at(cos, 0) == pytest.approx(0.1) and lr_at(cos, 2) == pytest.approx(0.05)


def test_epoch_batches_are_full_deterministic_and_distinct():
    b1 = epoch_batches(100, 32, seed=0, epoch=0)
    assert [len(b) for b in b1] == [32, 32, 32]
    flat = torch.cat(b1)
    assert len(set(flat.tolist())) == 96 and flat.max() < 100
    assert all(torch.equal(x, y) for x, y in zip(b1, epoch_batches(100, 32, seed=0, epoch=0)))
    assert not torch.equal(torch.cat(b1), torch.cat(epoch_batches(100, 32, seed=0, epoch=1)))
    assert not torch.equal(torch.cat(b1), torch.cat(epoch_batches(100, 32, seed=1, epoch=0)))


def test_train_idx_restricts_training_examples(ds):
    # A model trained on half the data sees only those examples: the loss on them drops more.
    idx = np.arange(0, ds.n_train, 2)
    cfg = TrainConfig(epochs=1, lr=0.05)
    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0)
    res = train_model(model, ds, cfg, 0, train_idx=idx, progress=False)
    assert res.history[0]["epoch"] == 1
    bs = cfg.batch_size
    assert len(epoch_batches(len(idx), bs, 0, 0)) == len(idx) // bs


def test_bn_query_modes_differ_and_leave_buffers_alone(ds):
    model = _train(ds, epochs=1).model
    before = _state(model)
    x = ds.x_train[:200]
    eval_logits = predict_logits(model, x, bn_mode="eval")
    batch_logits = predict_logits(model, x, bn_mode="batch")
    assert not torch.allclose(eval_logits, batch_logits)
    for k, v in before.items():
        assert torch.equal(v, model.state_dict()[k]), k
    # batch mode normalizes with the query batch's own statistics
    model.train()
    with torch.no_grad():
        manual = model(x.contiguous(memory_format=torch.channels_last))
    model.load_state_dict(before)
    assert torch.allclose(batch_logits, manual, atol=1e-5)
