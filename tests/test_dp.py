"""DP-SGD training: BN refused, accounting equals Opacus's accountant, seeded runs reproducible."""

import numpy as np
import pytest
import torch

pytest.importorskip("opacus")

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.errors import BnmemError
from bnmem.train import seeded_model
from bnmem.train.dp import DPConfig, check_dp_norm, epsilon_for, train_dp_model

RECIPE = TrainConfig(epochs=2, batch_size=32, lr=0.1)


@pytest.fixture(scope="module")
def ds():
    return load_dataset(DataConfig(dataset="digits", label_noise=0.05))


def _idx(ds, n=256):
    return np.sort(np.random.default_rng(0).choice(ds.n_train, n, replace=False))


def test_dp_refuses_batchnorm_in_one_line(ds):
    with pytest.raises(BnmemError) as e:
        check_dp_norm("batch")
    assert "\n" not in str(e.value) and "BatchNorm" in str(e.value)
    model = seeded_model(ModelConfig(norm="batch"), ds, 0)
    with pytest.raises(BnmemError, match="group, layer or none"):
        train_dp_model(model, ds, RECIPE, DPConfig(target_epsilon=4.0), seed=0, train_idx=_idx(ds))
    for norm in ("group", "layer", "none"):
        check_dp_norm(norm)  # accepted


def test_dp_accounting_is_what_opacus_computes(ds):
    idx = _idx(ds)
    res = train_dp_model(seeded_model(ModelConfig(norm="group"), ds, 0), ds, RECIPE,
                         DPConfig(target_epsilon=3.0, max_grad_norm=0.7), seed=0, train_idx=idx)
    acc = res.accounting
    # The recorded quantities are the ones the run used.
    assert acc.n_train == idx.size and acc.delta == pytest.approx(1 / idx.size)
    assert acc.sample_rate == pytest.approx(1 / np.ceil(idx.size / RECIPE.batch_size))
    assert acc.steps == RECIPE.epochs * round(1 / acc.sample_rate)
    assert acc.max_grad_norm == 0.7 and acc.accountant == "prv"
    # An independent accountant fed the recorded (σ, q, steps) gives the reported ε ...
    from opacus.accountants import create_accountant

    fresh = create_accountant(mechanism="prv")
    fresh.history = [(acc.noise_multiplier, acc.sample_rate, acc.steps)]
    assert acc.epsilon == pytest.approx(fresh.get_epsilon(delta=acc.delta), rel=1e-9)
    assert acc.epsilon == pytest.approx(epsilon_for(acc.noise_multiplier, acc.sample_rate, acc.steps, acc.delta))
    # ... which sits at (just under) the target the noise was chosen for.
    assert 2.9 <= acc.epsilon <= 3.0 + 1e-6
    # And a lower noise would have overspent: σ is not simply huge.
    assert epsilon_for(0.9 * acc.noise_multiplier, acc.sample_rate, acc.steps, acc.delta) > 3.0


def test_dp_run_is_reproducible_with_a_fixed_seed(ds):
    idx, dp = _idx(ds), DPConfig(target_epsilon=4.0)

    def run(seed):
        model = seeded_model(ModelConfig(norm="none"), ds, 0)
        return train_dp_model(model, ds, RECIPE, dp, seed=seed, train_idx=idx)

    a, b, c = run(0), run(0), run(1)
    sa, sb, sc = a.model.state_dict(), b.model.state_dict(), c.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.history == b.history
    # Another seed draws other batches and other noise from the same initial weights.
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    # The saved model is a plain module (no Opacus wrapper or per-sample buffers).
    assert type(a.model).__name__ == "LeNet"
    assert not any(hasattr(p, "grad_sample") and p.grad_sample is not None for p in a.model.parameters())
