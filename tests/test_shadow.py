"""The shadow-model engine (bnmem.shadow): its place in the layers, its query against an oracle, its copies."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from bnmem.attacks import keep_matrix
from bnmem.config import DataConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.shadow.copies import copy_views, fresh_copy, query_copies
from bnmem.shadow.query import QueryOptions, query_model


@pytest.fixture(scope="module")
def ds():
    return load_dataset(DataConfig(dataset="digits", label_noise=0.1, train_size=60))


def test_engine_imports_no_lens_audit_study_or_cli():
    """bnmem.shadow sits below the lenses: importing it pulls in no lens, audit, study, report or CLI module."""
    code = ("import sys, bnmem.shadow, bnmem.shadow.copies, bnmem.shadow.dp, bnmem.shadow.work; "
            "print(sorted({m for m in sys.modules if m.startswith(('bnmem.lenses', 'bnmem.auditing', "
            "'bnmem.study', 'bnmem.report', 'bnmem.cli'))}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def _phi_oracle(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """φ = log p_y − log Σ_{y'≠y} p_{y'} in float64, one example at a time."""
    z = logits.astype(np.float64)
    out = np.empty(z.shape[:-1])
    for i in range(z.shape[0]):
        for v in range(z.shape[1]):
            others = np.delete(z[i, v], y[i])
            out[i, v] = z[i, v, y[i]] - (others.max() + np.log(np.exp(others - others.max()).sum()))
    return out


def test_query_model_matches_a_plain_forward_pass(ds):
    """query_model's logits, φ and predictions equal an eval-mode forward pass per view and the φ formula."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))
    net(ds.x_train)  # training-mode pass: running statistics move away from their initial values
    views = [("identity", lambda x: x), ("negated", lambda x: -x)]
    q = query_model(net, ds, views, QueryOptions())
    net.eval()
    with torch.no_grad():
        expect = torch.stack([net(fn(ds.x_train)) for _, fn in views], dim=1).numpy()
    np.testing.assert_allclose(q.logits, expect, rtol=1e-5, atol=1e-6)
    y = ds.y_train.numpy()
    np.testing.assert_allclose(q.phi, _phi_oracle(q.logits, y), rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(q.pred, q.logits[:, 0].argmax(-1))
    keep = np.zeros(ds.n_train, dtype=bool)
    keep[::2] = True
    acc = q.accuracy(ds, keep)
    assert acc["train_in"] == pytest.approx(float((q.pred[keep] == y[keep]).mean()))
    assert acc["train_out"] == pytest.approx(float((q.pred[~keep] == y[~keep]).mean()))
    assert acc["test"] == pytest.approx(float((q.test_pred == ds.y_test.numpy()).mean()))
    assert q.population_phi.shape == (ds.y_test.shape[0], 2)


def test_copies_are_reset_trained_on_their_half_and_resume(ds, tmp_path, monkeypatch):
    """query_copies: copy m is fresh_copy(model, m) trained on keep row m; a rerun loads the same copies."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 10))
    keep = keep_matrix(4, ds.n_train, 0)
    train = TrainConfig(epochs=1, batch_size=16)
    first = query_copies(model, ds, keep, train, tmp_path)

    def no_training(*args, **kwargs):
        raise AssertionError("a finished copy was trained again")

    monkeypatch.setattr("bnmem.train.train_model", no_training)
    again = query_copies(model, ds, keep, train, tmp_path)  # every copy DONE: loaded, not retrained
    np.testing.assert_array_equal(first.phi, again.phi)
    assert first.phi.shape == (4, ds.n_train, 1) and first.views == [v for v, _ in copy_views(train, ds)]
    assert first.reset == (4, 4)
    a, _, _ = fresh_copy(model, seed=0)
    b, _, _ = fresh_copy(model, seed=1)
    assert not torch.equal(a[1].weight, b[1].weight)  # seeded per copy
    assert not torch.equal(a[1].weight, model[1].weight)  # re-initialized, not the given weights


def test_the_cost_line_counts_the_steps_the_trainer_takes(ds):
    """bnmem's trainer drops each epoch's last partial batch (bnmem.train.batching.epoch_batches): the cost counts
    those steps, not ceil(n / batch) (issue 48: 760 counted for the 608 taken), and says how many copies are reused."""
    from bnmem.attacks import paired_keep_matrix
    from bnmem.shadow.copies import copy_cost
    from bnmem.train.batching import epoch_batches

    keep = paired_keep_matrix(4, 101, 0)  # copies of 50 and 51 examples
    train = TrainConfig(epochs=3, batch_size=16)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    taken = sum(len(epoch_batches(int(keep[m].sum()), 16, m, e)) for m in (1, 2, 3) for e in range(3))
    cost = copy_cost(model, ds, keep, train, pending=[1, 2, 3])
    assert cost["steps"] == taken == 3 * 3 * 3  # 50 // 16 = 51 // 16 = 3 (ceil would say 4)
    assert cost["reused"] == 1 and "training 3 of 4 shadow copies" in cost["text"] and "1 reused" in cost["text"]
