"""Tests that check what the code used, not what it recorded.

Each of these was a planted bug that the rest of the suite missed, because the
fixture could not tell the right behaviour from the wrong one (a zero-width
interval) or the test compared a value with the record the same code wrote.
Here the behaviour is recomputed or observed:

* claim 6's cost bound: a drop interval of real width, [−1.7, +5.7] points;
* recipe selection: validation accuracy recomputed from each candidate's saved
  model on the validation split;
* DP-SGD's clipping norm: read from the optimizer Opacus built.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bnmem.analysis_plan import DIRECTION_ONLY
from bnmem.names import MITIGATE
from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.report.claims import claim6, evaluate_rule
from bnmem.report.rundata import CellOutput, LensOutput, RunData


def _mitigate_cell(r: int, drop_per_seed: list[float]) -> CellOutput:
    """A mitigate replicate: BN memorizes 60%, the regularizer (λ=1) about 10%, at the given test drops."""
    def stat(values):
        return {"mean": float(np.mean(values)), "per_seed": [float(v) for v in values]}

    bn_test = [0.95, 0.95, 0.95]
    doc = {"variants": ["batch", "batch+gs1"], "selection": {"val_acc": {"batch": 0.93, "batch+gs1": 0.93}},
           "batch": {"norm": "batch", "gs_reg": 0.0, "final": {"noisy_acc": stat([0.6, 0.62, 0.58]),
                                                             "test_acc": stat(bn_test)}},
           "batch+gs1": {"norm": "batch", "gs_reg": 1.0, "final": {
               "noisy_acc": stat([0.1 + 0.002 * r, 0.11, 0.09]),
               "test_acc": stat([t - d for t, d in zip(bn_test, drop_per_seed)])}},
           "conditions": {"norms": ["batch", "none"], "label_noise": 0.05},
           "dataset": {"dataset": "digits", "n_noisy": 10, "n_ood": 0}}
    cond = {"dataset": "digits", "arch": "lenet", "norms": ["batch", "none"], "label_noise": 0.05, "ood": 0.0,
            "replicate": r, "seeds": [3 * r, 3 * r + 1, 3 * r + 2]}
    cell = CellOutput(f"m-r{r}", cond)
    cell.lenses[MITIGATE] = LensOutput(MITIGATE, Path(f"/synthetic/m-r{r}/mitigate"), doc)
    return cell


def test_claim_6_reads_the_upper_end_of_a_real_drop_interval():
    """Replicate 0 selects; replicates 1 and 2 are evaluated: mean drops 1.71 and 2.29 points, so the t(1)
    interval of the drop is about [−1.7, +5.7] points. A non-inferiority test at 1 point must not pass it."""
    drops = {0: [0.0] * 3, 1: [0.0171 - 0.001, 0.0171, 0.0171 + 0.001], 2: [0.0229 - 0.001, 0.0229, 0.0229 + 0.001]}
    run = RunData(Path("/synthetic"), "study", "s", [_mitigate_cell(r, d) for r, d in drops.items()], None, None)
    claim = evaluate_rule(claim6, run)[0]
    d = claim.decisive
    assert d.ci_low >= 0.5  # the cut itself is far above half
    assert "evaluated on replicates [1, 2]" in d.note
    lo, hi = [float(x) for x in d.note.split("test-accuracy drop ")[1].split("[")[1].split("]")[0].split(",")]
    assert lo == pytest.approx(-1.7, abs=0.05) and hi == pytest.approx(5.7, abs=0.05)  # points
    assert claim.status == DIRECTION_ONLY  # the drop's upper end is above 1 point
    assert claim.previous_status == DIRECTION_ONLY  # plan 3.0: the same non-inferiority rule


@pytest.fixture(scope="module")
def val_ds():
    return load_dataset(DataConfig(dataset="digits", label_noise=0.05, val_fraction=0.2, train_size=240, seed=0))


def _accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def test_recipe_selection_scores_validation_accuracy_of_the_trained_models(val_ds, tmp_path, monkeypatch):
    """Recompute each candidate's validation accuracy after every epoch from the states the ensemble engine
    hands out and from the models it returns; the selection must match those numbers (and they must differ
    from test accuracy somewhere, or the test could not tell the two apart)."""
    import bnmem.train.ensemble as ensemble
    from bnmem.train import seeded_model
    from bnmem.train.recipe import pick, plateau_score, select_lr

    trained: list = []
    per_epoch: dict[float, list[float]] = {}
    original = ensemble.train_candidates
    model_cfg = ModelConfig(arch="lenet", norm="batch")

    def observed(model_cfg_, ds, train, lrs, seeds, idx, method="auto", on_epoch=None):
        def watch(epoch, members, states):
            for k, state in zip(members, states):
                m = seeded_model(model_cfg, ds, seeds[k])
                m.load_state_dict({n: t.clone() for n, t in state.items()})
                per_epoch.setdefault(lrs[k], []).append(_accuracy(m, ds.x_val, ds.y_val))
            on_epoch(epoch, members, states)

        models = original(model_cfg_, ds, train, lrs, seeds, idx, method, on_epoch=watch)
        trained.extend(zip(lrs, models))
        return models

    monkeypatch.setattr(ensemble, "train_candidates", observed)
    train = TrainConfig(epochs=2, lr=0.05, batch_size=32)
    res = select_lr(model_cfg, val_ds, train, [0], tmp_path, grid=[0.005, 0.05, 0.5])
    assert sorted(lr for lr, _ in trained) == [0.005, 0.05, 0.5]
    val, test = {}, {}
    for lr, model in trained:
        assert model is not None
        val[lr] = _accuracy(model, val_ds.x_val, val_ds.y_val)
        test[lr] = _accuracy(model, val_ds.x_test, val_ds.y_test)
    for row in res["candidates"]:
        lr = row["lr"]
        assert row["epochs"] == 4 == len(per_epoch[lr])  # the cap (2 x 2 epochs), below the minimum epochs
        assert row["val_acc"] == pytest.approx(val[lr], abs=1e-6), lr  # the stopping (last) epoch's model
        assert row["curve"] == pytest.approx(per_epoch[lr], abs=1e-6), lr
        assert row["score"] == pytest.approx(plateau_score(per_epoch[lr], 4), abs=1e-6), lr
    assert any(abs(val[lr] - test[lr]) > 1e-3 for lr in val)  # validation and test disagree somewhere
    assert res["lr"] == pick({lr: plateau_score(c, 4) for lr, c in per_epoch.items()}, train.lr)


def test_dp_sgd_hands_opacus_the_configured_clipping_norm(val_ds, monkeypatch):
    """Observe the clipping norm on the optimizer Opacus built, for two values of C."""
    pytest.importorskip("opacus")
    from opacus import PrivacyEngine

    from bnmem.train.dp import DPConfig, train_dp_model
    from bnmem.train.trainer import seeded_model

    seen = []
    original = PrivacyEngine.make_private_with_epsilon

    def observed(self, *args, **kwargs):
        module, optimizer, loader = original(self, *args, **kwargs)
        seen.append(float(optimizer.max_grad_norm))
        return module, optimizer, loader

    monkeypatch.setattr(PrivacyEngine, "make_private_with_epsilon", observed)
    model_cfg = ModelConfig(arch="lenet", norm="none")
    train = TrainConfig(epochs=1, lr=0.05, batch_size=64)
    for c in (0.37, 2.5):
        res = train_dp_model(seeded_model(model_cfg, val_ds, 0), val_ds, train,
                             DPConfig(target_epsilon=50.0, max_grad_norm=c), seed=0)
        assert res.accounting.max_grad_norm == c
    assert seen == [0.37, 2.5]


def test_penalty_activity_is_recorded_from_training(val_ds, tmp_path):
    """The regularizer's reach (channels above τ) and its share of the loss come from the training steps,
    and grow with λ: a penalty that never engages reads as inert (share ≈ 0), not as 'no effect'."""
    from bnmem.train.trainer import seeded_model, train_model

    model_cfg = ModelConfig(arch="lenet", norm="batch")
    shares = {}
    for lam, tau in ((0.0001, 1000.0), (10.0, 0.5)):
        train = TrainConfig(epochs=1, lr=0.05, batch_size=32, gs_reg=lam, gs_tau=tau)
        hist = train_model(seeded_model(model_cfg, val_ds, 0), val_ds, train, 0).history
        shares[tau] = (hist[-1]["extra_loss_share"], hist[-1]["gs_frac_above_tau"])
    assert shares[1000.0] == (0.0, 0.0)  # τ far above every ratio: the penalty never acts
    assert shares[0.5][0] > 0.0 and shares[0.5][1] > 0.0
