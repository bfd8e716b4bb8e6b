"""Mitigation: the γ/σ regularizer cuts memorization of flipped labels at no cost in test accuracy."""

import json

import numpy as np
import pytest
from pydantic import ValidationError

from bnmem.config import DataConfig, TrainConfig
from bnmem.lenses.mitigate import MitigateConfig, run_mitigate, summary_table


@pytest.fixture(scope="module")
def claim_run(tmp_path_factory):
    # The recipe of the measured numbers: digits, 5% label noise, LeNet, SGD lr 0.05 momentum 0.9, batch 64.
    cfg = MitigateConfig(
        data=DataConfig(dataset="digits", label_noise=0.05, seed=0),
        arch="lenet",
        norms=["batch", "none"],
        seeds=[0],
        train=TrainConfig(epochs=10, lr=0.05, momentum=0.9, batch_size=64, gs_tau=1.0),
        lambdas=[1.0],
        fixed_epoch=10,
    )
    out = tmp_path_factory.mktemp("mit")
    return out, cfg, run_mitigate(cfg, out, progress=False)


def test_regularizer_halves_memorization_keeps_accuracy(claim_run):
    """Done criterion: with fixed seeds, λ=1 (τ=1) cuts noisy-subset accuracy at a fixed epoch by at
    least half while clean test accuracy stays within 1 point of plain BN (or better).
    Measured (seed 0, epoch 10): BN noisy 0.600 / test 0.918; BN+γ/σ λ=1 noisy 0.089 / test 0.942."""
    _, _, res = claim_run
    bn, reg = res["batch"], res["batch+gs1"]
    assert reg["fixed_epoch"]["noisy_acc"]["mean"] <= 0.5 * bn["fixed_epoch"]["noisy_acc"]["mean"]
    assert reg["fixed_epoch"]["test_acc"]["mean"] >= bn["fixed_epoch"]["test_acc"]["mean"] - 0.01
    assert bn["fixed_epoch"]["noisy_acc"]["mean"] > 0.4  # plain BN does memorize here
    assert res["batch+gs1"]["relative_to_bn"]["noisy_acc_fixed_epoch_vs_bn"] <= 0.5


def test_regularizer_pulls_gamma_over_sigma_down(claim_run):
    _, _, res = claim_run
    bn = res["batch"]["gamma_sigma"]["final"]["running"]
    reg = res["batch+gs1"]["gamma_sigma"]["final"]["running"]
    assert reg["frac_above_1"] < bn["frac_above_1"]
    for layer in ("norm3", "norm4"):  # the FC layers, where plain BN amplifies most
        assert bn["layers"][layer]["median_ratio"] > 1 > reg["layers"][layer]["median_ratio"]
    assert res["none"]["gamma_sigma"]["final"] is None


def test_outputs_and_conditions(claim_run):
    out, cfg, res = claim_run
    for f in ("config.json", "metrics.json", "privacy_utility.png"):
        assert (out / f).exists(), f
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["variants"] == ["batch", "batch+gs1", "none"]
    assert (out / "batch_gs1" / "seed0" / "DONE").exists()
    cond = saved["conditions"]
    assert cond["dataset"] == "digits" and cond["arch"] == "lenet" and cond["seeds"] == [0]
    assert cond["gs_tau"] == 1.0 and cond["lambdas"] == [1.0] and cond["fixed_epoch"] == 10
    assert cond["bn_mode_at_query"] == "eval" and cond["lira_models"] == 0
    m = saved["batch+gs1"]
    assert m["gs_reg"] == 1.0 and m["fixed_epoch"]["epoch"] == 10 and m["final"]["epoch"] == 10
    assert len(m["mean"]["noisy_acc"]) == 10
    assert "lira" not in m
    table = summary_table(res)
    assert "batch+gs1" in table and "noisy@ep10" in table


def test_rerun_skips(claim_run):
    out, cfg, res = claim_run
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/seed*/model.pt")}
    assert len(stamps) == 3
    again = run_mitigate(MitigateConfig.model_validate(cfg.model_dump()), out, progress=False)
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/seed*/model.pt")} == stamps
    assert again["batch+gs1"]["final"] == res["batch+gs1"]["final"]


@pytest.mark.parametrize("kw, fragment", [
    ({"norms": ["none"]}, "must include 'batch'"),
    ({"lambdas": [0.0]}, "positive"),
    ({"fixed_epoch": 11}, "fixed_epoch 11"),
    ({"lira_models": 3}, "lira_models"),
    ({"train": TrainConfig(epochs=10, gs_reg=1.0)}, "use lambdas"),
])
def test_config_errors(kw, fragment):
    base = {"train": TrainConfig(epochs=10)}
    with pytest.raises(ValidationError, match=fragment):
        MitigateConfig(**{**base, **kw})


def test_cli(tmp_path, capsys):
    from bnmem.cli import main

    out = tmp_path / "m"
    code = main(["mitigate", "--epochs", "2", "--fixed-epoch", "1", "--n-seeds", "1", "--norms", "batch",
                 "--lambdas", "1", "--quiet", "--out", str(out)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "batch+gs1" in cap.out and (out / "privacy_utility.png").exists()
    code = main(["mitigate", "--lambdas", "a,b", "--quiet", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "--lambdas" in err and len(err.strip().splitlines()) == 1


def test_lira_option(tmp_path):
    """--lira-models wires bnmem.lenses.lira's shadow-model runner (when that module is present)."""
    pytest.importorskip("bnmem.lenses.lira")
    cfg = MitigateConfig(data=DataConfig(dataset="digits", label_noise=0.05, train_size=300), norms=["batch"],
                         seeds=[0], train=TrainConfig(epochs=2), lambdas=[1.0], fixed_epoch=1, lira_models=4)
    res = run_mitigate(cfg, tmp_path / "l", progress=False)
    from bnmem.attacks.streaming import evaluate_stream
    from bnmem.shadow.query import load_attack_inputs

    phis = {}
    for name, folder in (("batch", "batch"), ("batch+gs1", "batch_gs1")):
        lira = res[name]["lira"]
        assert lira["attack"] == "online" and lira["shadow_models"] == 4 and "outliers" in lira
        # The reported AUC is online LiRA on this variant's own shadow models, recomputed from their φ.
        arr = load_attack_inputs(tmp_path / "l" / folder / "lira")
        phi = arr["phi"].read(0, arr["phi"].shape[1])
        assert phi.shape[0] == 4
        want = evaluate_stream(phi, arr["keep"], attacks=["online"])
        assert lira["all"]["auc"] == pytest.approx(want["metrics"]["online"]["all"]["auc"], abs=1e-12)
        phis[name] = phi
    assert not np.array_equal(phis["batch"], phis["batch+gs1"])  # two recipes, two sets of shadow models
    assert "LiRA AUC" in summary_table(res)


# ------------------------------------------------ selection without the test set


def _rec(val, mem, test, lam=0.0, tau=None):
    def stat(v):
        return {"mean": v, "min": v, "max": v, "per_seed": [v]}

    return {"gs_reg": lam, "gs_tau": tau, "final": {"val_acc": stat(val), "noisy_acc": stat(mem), "test_acc": stat(test),
                                                   "train_acc": stat(0.99)}}


def test_selection_rule_uses_validation_and_memorization_only():
    from bnmem.lenses.mitigate import Variant, select_variant

    variants = [Variant("batch", "batch", 0.0), Variant("batch+gs1", "batch", 1.0), Variant("batch+gs10", "batch", 10.0),
                Variant("batch+gs100", "batch", 100.0)]
    metrics = {"batch": _rec(0.95, 0.6, 0.94), "batch+gs1": _rec(0.95, 0.3, 0.90, 1.0),
               "batch+gs10": _rec(0.945, 0.1, 0.80, 10.0), "batch+gs100": _rec(0.90, 0.0, 0.96, 100.0)}
    sel = select_variant(metrics, variants, "noisy_acc")
    # gs100 memorizes least and has the best test accuracy, but loses 5 points on validation: not eligible.
    assert sel["variant"] == "batch+gs10" and sel["eligible"] == ["batch+gs1", "batch+gs10"]
    # The test accuracies play no part.
    for rec in metrics.values():
        rec["final"]["test_acc"]["mean"] = 0.5
    assert select_variant(metrics, variants, "noisy_acc")["variant"] == "batch+gs10"
    # Nothing eligible: the best validation accuracy.
    for name in ("batch+gs1", "batch+gs10"):
        metrics[name]["final"]["val_acc"]["mean"] = 0.5
    assert select_variant(metrics, variants, "noisy_acc")["variant"] == "batch+gs100"
    # Clean data: the smallest train − validation gap among the eligible.
    metrics = {"batch": _rec(0.95, None, 0.9), "batch+gs1": _rec(0.95, None, 0.9, 1.0),
               "batch+gs10": _rec(0.96, None, 0.9, 10.0), "batch+gs100": _rec(0.5, None, 0.9, 100.0)}
    sel = select_variant(metrics, variants, None)
    assert sel["variant"] == "batch+gs10" and sel["criterion"] == "train_acc - val_acc"


def test_mitigate_carves_a_validation_split_and_reports_the_selection(claim_run):
    _, cfg, res = claim_run
    assert cfg.data.val_fraction == 0.1 and res["conditions"]["n_val"] == 90
    sel = res["selection"]
    assert sel["variant"] == "batch+gs1" and sel["rule"] == res["conditions"]["selection_rule"]
    tc = sel["test_acc_change"]
    bn, reg = res["batch"]["final"]["test_acc"]["per_seed"], res["batch+gs1"]["final"]["test_acc"]["per_seed"]
    assert tc["n"] == 1 and tc["mean"] == pytest.approx(reg[0] - bn[0])
    assert 0 < res["batch"]["final"]["val_acc"]["mean"] <= 1
    assert MitigateConfig(data={"val_fraction": 0.0}, train=TrainConfig(epochs=10)).data.val_fraction == 0.1
    assert MitigateConfig(data=DataConfig(val_fraction=0.2), train=TrainConfig(epochs=10)).data.val_fraction == 0.2


def test_lira_runs_for_plain_norms_and_the_selected_variant(tmp_path):
    cfg = MitigateConfig(data=DataConfig(dataset="digits", label_noise=0.05, train_size=300), norms=["batch", "none"],
                         seeds=[0, 1], train=TrainConfig(epochs=2), lambdas=[1.0, 10.0], fixed_epoch=1, lira_models=4)
    res = run_mitigate(cfg, tmp_path / "l", progress=False)
    chosen = res["selection"]["variant"]
    with_lira = {n for n in res["variants"] if "lira" in res[n]}
    assert with_lira == {"batch", "none", chosen}
    for n in with_lira:
        assert set(res[n]["lira"]["attacks"]) == {"online", "rmia"} and res[n]["lira"]["shadow_models"] == 4
    pairs = res["selection"]["lira_paired_auc"]
    assert set(pairs) == {f"{chosen}-batch", "batch-none", f"{chosen}-none"}
    p = pairs["batch-none"]["rmia"]["all"]
    per = (np.array(res["batch"]["lira"]["attacks"]["rmia"]["all"]["auc_per_target"])
           - np.array(res["none"]["lira"]["attacks"]["rmia"]["all"]["auc_per_target"]))
    np.testing.assert_allclose(p["per_target"], per)
    assert res["selection"]["test_acc_change"]["n"] == 2 and res["selection"]["test_acc_change"]["ci_low"] is not None
    assert "RMIA AUC" in summary_table(res) and "selected on the validation split" in summary_table(res)
