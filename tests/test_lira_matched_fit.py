"""Row 3c's measurement (the lira lens's ``matched_fit`` option): the engine's per-epoch states hook, the
threshold fitted on each target's references only, the per-epoch queries against the final query, and the
block the report reads, on a tiny real run.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnmem.analysis_plan import MATCHED_FIT_OPTION, NOT_RUN
from bnmem.attacks.keep import keep_matrix, split_references
from bnmem.attacks.lira import lira_online
from bnmem.attacks.shadow_operating_point import shadow_operating_points
from bnmem.attacks.shadow_threshold import rates_at, shadow_threshold
from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.errors import BnmemError
from bnmem.lenses.lira import LiraConfig, run_lira
from bnmem.lenses.lira.matched_fit import MATCHED_DIR, train_matched_chunk
from bnmem.names import LIRA
from bnmem.report.claims import claim3c, evaluate_rule
from bnmem.shadow.training import ShadowChunk
from bnmem.train.ensemble import train_models

from synthetic_runs import make_cell, make_run


# ---------------------------------------------------------------- the engine's per-epoch hook


def _states(models) -> list[dict[str, torch.Tensor]]:
    return [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in models]


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].contiguous(), b[k].contiguous()) for k in a)


@pytest.mark.parametrize("method", ["grouped", "vmap", "sequential"])
def test_states_hook_reports_every_epoch_as_a_shorter_run_ends_and_changes_nothing(method):
    """The states the hook sees after epoch e are those of the same models trained for e epochs (constant
    learning rate: the first e epochs are the same run), every (epoch, model) once; training with the hook
    ends bitwise where training without it ends. Three models: the grouped network pads with a twin,
    which must not be reported."""
    ds = load_dataset(DataConfig(dataset="digits", train_size=120))
    cfg = TrainConfig(epochs=2, batch_size=32, threads=1)
    model_cfg, seeds = ModelConfig(arch="lenet", norm="batch"), [3, 4, 5]
    idx = [np.arange(k, 120, 2) for k in range(3)]
    seen: dict[tuple[int, int], dict[str, torch.Tensor]] = {}

    def hook(epoch, indices, states):
        for k, state in zip(indices, states):
            assert (epoch, k) not in seen
            seen[(epoch, k)] = {n: t.detach().clone() for n, t in state.items()}

    hooked = _states(train_models(model_cfg, ds, cfg, seeds, idx, method, progress=False, on_epoch=hook))
    plain = _states(train_models(model_cfg, ds, cfg, seeds, idx, method, progress=False))
    one = _states(train_models(model_cfg, ds, cfg.model_copy(update={"epochs": 1}), seeds, idx, method,
                               progress=False))
    assert set(seen) == {(e, k) for e in (1, 2) for k in range(3)}
    for k in range(3):
        assert _equal(hooked[k], plain[k])  # the hook changed nothing
        assert _equal(seen[(2, k)], plain[k])  # the last epoch's states are the returned models'
        assert _equal(seen[(1, k)], one[k])  # epoch 1 is where a one-epoch run ends
        assert not _equal(seen[(1, k)], seen[(2, k)])


# ---------------------------------------------------------------- the threshold fitted on references only


def _oracle_scores(phi: np.ndarray, keep: np.ndarray, target: int, refs: np.ndarray) -> np.ndarray:
    """Online LiRA of ``target`` against the models ``refs``, reference sets truncated as the LiRA code does."""
    idx_in, idx_out = split_references(keep[refs])
    cols = np.arange(keep.shape[1])
    ins, outs = phi[refs][idx_in, cols[None, :]], phi[refs][idx_out, cols[None, :]]
    return lira_online(phi[target], ins, outs)


def test_shadow_operating_points_match_a_per_target_oracle():
    """Per target t: every other model r scored against the models other than t and r, their non-member
    scores pooled for the threshold; t scored against all others, read at it; the streaming evaluator's
    leave-one-out on subsets gives the same as explicit per-target references."""
    rng = np.random.default_rng(0)
    m, n = 10, 120
    keep = keep_matrix(m, n, 3)
    phi = rng.normal(0, 1, (1, n, 1)) + rng.normal(0, 0.5, (m, n, 2)) + keep[:, :, None]
    got = shadow_operating_points(phi, keep, fpr=0.05)
    for t in range(m):
        others = np.array([r for r in range(m) if r != t])
        z = np.concatenate([_oracle_scores(phi, keep, r, others[others != r])[~keep[r]] for r in others])
        threshold = shadow_threshold(z, 0.05)
        tpr, fpr = rates_at(_oracle_scores(phi, keep, t, others), keep[t], threshold)
        assert got["threshold"][t] == pytest.approx(threshold, rel=1e-9)
        assert got["tpr_at_shadow_threshold"][t] == tpr and got["fpr_at_shadow_threshold"][t] == fpr
    assert np.mean(got["tpr_at_shadow_threshold"]) > 0.05  # a real signal is found at this FPR
    # the target's own scores never move its threshold (they move the other targets')
    moved = phi.copy()
    moved[0] += rng.normal(0, 3, moved[0].shape)
    again = shadow_operating_points(moved, keep, fpr=0.05)
    assert again["threshold"][0] == got["threshold"][0]
    assert again["threshold"][1:] != got["threshold"][1:]


def test_few_reference_models_make_the_shadow_threshold_conservative():
    """With M = 6 each reference is scored against 1 IN and 1 OUT model (M/2 − 2 per side): its per-example
    spread is near 0 and its non-member scores reach far, so the threshold sits above the target's scores,
    which have one more reference per side (what the lens reports then: TPR 0 at FPR 0, "nothing flagged")."""
    rng = np.random.default_rng(0)
    keep = keep_matrix(6, 400, 3)
    phi = rng.normal(0, 1, (1, 400, 1)) + rng.normal(0, 0.5, (6, 400, 2)) + keep[:, :, None]
    got = shadow_operating_points(phi, keep, fpr=0.05)
    assert np.mean(got["auc_per_target"]) > 0.65 and max(got["fpr_at_shadow_threshold"]) < 0.01


# ---------------------------------------------------------------- a tiny real run


def tiny_config(**kw) -> LiraConfig:
    return LiraConfig(data=DataConfig(dataset="digits", label_noise=0.05, train_size=200), norms=["batch", "none"],
                      shadow_models=6, chunk_size=4, views=["identity"],
                      train=TrainConfig(epochs=3, threads=1), **kw)


@pytest.fixture(scope="module")
def matched_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("matched") / "lira"
    return out, run_lira(tiny_config(matched_fit=True), out, progress=False)


def test_the_last_epochs_queries_are_the_final_query(matched_run):
    out, result = matched_run
    block = result[MATCHED_FIT_OPTION]
    assert block["epochs"] == [1, 2, 3]
    for norm in ("batch", "none"):
        final_hi, final_lo = np.load(out / norm / "phi.npy"), np.load(out / norm / "phi_lo.npy")
        for name, models in (("models_0000-0003", slice(0, 4)), ("models_0004-0005", slice(4, 6))):
            hi = np.load(out / norm / MATCHED_DIR / f"{name}.phi.npy")
            lo = np.load(out / norm / MATCHED_DIR / f"{name}.phi_lo.npy")
            assert hi.shape[0] == 3 and np.array_equal(hi[-1], final_hi[models])
            assert np.array_equal(lo[-1], final_lo[models])
            assert not np.array_equal(hi[0], final_hi[models])  # epoch 1 is another model
        mine = block[norm]
        assert mine["test_acc"][-1] == result["accuracy"][norm]["test"]["per_model"]
        assert mine["train_acc"][-1] == result["accuracy"][norm]["train_in"]["per_model"]
        # the same φ and the same leave-one-out: the last epoch's AUCs are the lens's final ones
        assert mine["online"]["auc_per_target"][-1] == result[norm]["online"]["all"]["auc_per_target"]


def test_the_block_is_what_row_3c_reads(matched_run):
    _, result = matched_run
    block = result[MATCHED_FIT_OPTION]
    for norm in ("batch", "none"):
        grids = [block[norm]["test_acc"]] + [block[norm]["online"][k] for k in
                                             ("auc_per_target", "tpr_at_0.1pct_fpr_shadow", "fpr_at_shadow_threshold")]
        for g in grids:
            assert np.array(g, dtype=float).shape == (3, 6)
        fpr = np.array(block[norm]["online"]["fpr_at_shadow_threshold"], dtype=float)
        assert np.all((fpr >= 0) & (fpr <= 1))
    rep = claim3c._replicate(result, "none")
    assert isinstance(rep, dict), rep  # matched (or the row would say why not)
    assert {"tpr_bn", "fpr_bn", "tpr_other", "fpr_other"} <= set(rep)
    # through the report's own evaluation, two replicates of the real block: a decided or inconclusive row
    cells = [make_cell("digits-lenet-noise", r, {LIRA: result}) for r in range(2)]
    row = evaluate_rule(claim3c, make_run(cells))[0]
    assert row.status != NOT_RUN and row.decisive.n == 2
    assert "TPR" in row.decisive.note and "precision at a 1% member prior" in row.decisive.note


def test_off_leaves_config_and_results_as_before(tmp_path):
    cfg = tiny_config()
    assert MATCHED_FIT_OPTION not in cfg.model_dump(mode="json")  # config.json and its hash as before the option
    assert tiny_config(matched_fit=True).model_dump(mode="json")[MATCHED_FIT_OPTION] is True
    assert LiraConfig.model_validate(tiny_config(matched_fit=True).model_dump(mode="json")).matched_fit


def test_matched_fit_needs_six_models_and_refuses_chunks_trained_without_it(tmp_path):
    from bnmem.lenses.registry import get

    with pytest.raises(BnmemError, match="matched_fit needs at least 6 shadow models"):
        get(LIRA).validate({"shadow_models": 4, MATCHED_FIT_OPTION: True}, "lenses.lira")
    cfg = tiny_config()
    out = tmp_path / "lira"
    run_lira(cfg.model_copy(update={"norms": ["none"], "train": cfg.train.model_copy(update={"epochs": 1})}),
             out, progress=False)
    chunk = ShadowChunk.of(cfg.model_copy(update={"train": cfg.train.model_copy(update={"epochs": 1})}), "none",
                           out / "none", [0, 1, 2, 3])
    with pytest.raises(BnmemError, match="trained without the per-epoch queries"):
        train_matched_chunk(chunk)
    assert not (out / "none" / MATCHED_DIR).exists()


@pytest.mark.slow
def test_a_real_study_with_the_option_gives_row_3c(tmp_path):
    """`bnmem run` with lenses.lira.matched_fit, then the report: row 3c is measured, not "not run"."""
    from bnmem.cli import main
    from bnmem.report.rundata import load_run

    (tmp_path / "tiny.yaml").write_text(
        "name: tiny3c\n"
        "data: {dataset: digits, train_size: 200}\n"
        "train: {epochs: 3, lr: 0.05, threads: 1}\n"
        "grid: {norms: [batch, none], seeds: [0], replicates: 2, outliers: [{label_noise: 0.05}]}\n"
        "lenses:\n"
        "  lira: {shadow_models: 6, chunk_size: 4, matched_fit: true}\n")
    out = tmp_path / "run"
    assert main(["run", str(tmp_path / "tiny.yaml"), "--out", str(out), "--quiet", "--workers", "1"]) == 0
    row = evaluate_rule(claim3c, load_run(out))[0]
    assert row.status != NOT_RUN and row.decisive.n == 2, row.not_run_reason()
