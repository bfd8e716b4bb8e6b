"""The audit's answer: a headline from measured leakage, calibrated shadow copies, advice that can be followed.

The scenario of issue 22 at test size (tests/audit_scenario.py): a small CNN with three BatchNorm2d layers,
trained in plain PyTorch through torchvision's ImageFolder on a PNG folder with 24 of 360 training files
deliberately mislabeled, audited with `bnmem audit --model … --data-folder … --mislabeled … --shadow-models 4`.
"""

from __future__ import annotations

import copy
import importlib
import json
import re

import numpy as np
import pytest
import typer
from audit_scenario import EPOCHS, write_scenario
from sklearn.metrics import roc_auc_score

from bnmem.attacks.metrics import roc, tpr_at_fpr
from bnmem.auditing.calibration import ACCURACY_MARGIN, calibration
from bnmem.auditing.leakage import FPRS, PooledScores, group_metrics
from bnmem.auditing.report import risk_summary
from bnmem.cli import main
from bnmem.cli.app import app


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return write_scenario(tmp_path_factory.mktemp("hospital"))


def run_audit(scenario, out, *extra: str) -> dict:
    code = main(["audit", "--quiet", *scenario["flags"], "--shadow-models", "4", *extra, "--out", str(out)])
    assert code == 0
    return json.loads((out / "audit.json").read_text())


@pytest.fixture(scope="module")
def audited(scenario, tmp_path_factory):
    """The issue's command, with the user's own recipe (40 epochs) for the shadow copies."""
    out = tmp_path_factory.mktemp("audit")
    return run_audit(scenario, out), (out / "audit.md").read_text()


def test_the_headline_rests_on_the_measured_attacks_and_names_the_mislabeled_files(audited):
    res, md = audited
    risk = res["risk"]
    groups = {g["group"]: g for g in risk["groups"]}
    # The mislabeled files are the identifiable group, with the interval the level is read from.
    outliers = groups["outliers"]
    assert outliers["name"] == "the 24 files listed as mislabeled" and outliers["words"] == "identifiable"
    assert outliers["auc_ci"][0] >= 0.8 and outliers["level"] == "elevated"
    assert risk["headline"].startswith("Who is identifiable: the 24 files listed as mislabeled, identifiable (AUC")
    assert risk["level"] == "elevated" and risk["basis"].startswith("membership attacks over 4 shadow copies")
    # Typical examples leak less than the mislabeled ones (measured: whole-set AUC 0.73 vs 1.00 here).
    assert groups["all"]["auc"] < outliers["auc"] - 0.1
    # The level is the attacks': removing every BN/gradient/accuracy signal leaves it unchanged...
    bare = copy.deepcopy(res)
    bare["gamma_sigma"], bare["norm_layers"] = None, []
    bare["gradient_norms"]["masks"], bare["accuracy"] = None, {"train_acc": None, "test_acc": None, "gap": None}
    assert risk_summary(bare)["level"] == risk["level"]
    # ...and without the attacks nothing is measured, whatever the signals say.
    assert risk_summary({**res, "membership": None})["level"] == "not measured"
    # Per-finding levels and the intervals are in the markdown, as in the JSON.
    assert "| **elevated** | measured | The 24 files listed as mislabeled: identifiable." in md
    assert "| outliers | 24 | online LiRA |" in md and "### Cautions" in md


def test_few_shadow_models_caution_the_low_fpr_metrics(audited):
    res, _ = audited
    cautions = " ".join(res["risk"]["cautions"])
    # 4 shadow models, 180 non-members per target: TPR at 0.1% FPR rests on 720 scores, under 1 false positive.
    assert "TPR at 1% and 0.1% FPR from 720 non-member scores (180 per target × 4 targets" in cautions
    assert "Some of these numbers rest on few scores" in res["risk"]["headline"]


def test_bn_signals_explain_the_level(audited):
    res, _ = audited
    risk = res["risk"]
    explains = [f for f, k in zip(risk["findings"], risk["finding_kinds"]) if k == "explains"]
    assert any(f.startswith("BN present (3 layers)") for f in explains)
    assert "BN plausibly amplifies it" in risk["headline"] and "--compare-gs-reg 0.1 measures it" in risk["headline"]


def test_shadow_accuracy_beside_the_model_and_the_recipe_printed(audited):
    res, md = audited
    cal = res["risk"]["calibration"]
    assert cal["model_train"] == res["accuracy"]["train_acc"] and cal["shadow_train"] is not None
    assert abs(cal["train_gap"]) <= ACCURACY_MARGIN and cal["warning"] is None  # the user's own recipe
    assert f"Recipe used: epochs {EPOCHS}, lr 0.05, batch_size 32" in md and "| your model |" in md


def test_undertrained_shadow_copies_warn_and_match_accuracy_reaches_the_model(scenario, tmp_path):
    short = run_audit(scenario, tmp_path / "short", "--epochs", "2")
    warning = short["risk"]["calibration"]["warning"]
    assert warning and warning.startswith("The shadow copies reach") and "--match-accuracy" in warning
    matched = run_audit(scenario, tmp_path / "matched", "--epochs", "2", "--match-accuracy", "--max-epochs", "16")
    m = matched["membership"]["matched"]
    assert [t["epochs"] for t in m["trail"]][0] == 2 and m["reached"]
    assert matched["membership"]["train"]["epochs"] == m["epochs"] > 2
    assert m["trail"][-1]["train_acc"] >= matched["accuracy"]["train_acc"] - ACCURACY_MARGIN
    assert matched["membership"]["shadow_accuracy"]["train_in"] > short["membership"]["shadow_accuracy"]["train_in"]
    md = (tmp_path / "matched" / "audit.md").read_text()
    assert "--match-accuracy (one probe copy on its half): 2 epochs →" in md


def test_compare_gs_reg_shows_auc_and_accuracy_side_by_side(scenario, tmp_path):
    res = run_audit(scenario, tmp_path / "cmp", "--epochs", "8", "--compare-gs-reg", "1")
    cmp = res["gs_reg_comparison"]
    assert cmp["without"]["gs_reg"] == 0 and cmp["with"]["gs_reg"] == 1
    assert cmp["membership"]["train"]["gs_reg"] == 1 and res["membership"]["train"]["gs_reg"] == 0
    for arm in ("without", "with"):
        assert set(cmp[arm]["auc"]["online"]) == {"all", "outliers", "most_exposed"}
        assert 0 <= cmp[arm]["shadow_accuracy"]["test"] <= 1
    assert cmp["gain"]["online"]["all"] == pytest.approx(cmp["without"]["auc"]["online"]["all"]["auc"]
                                                         - cmp["with"]["auc"]["online"]["all"]["auc"])
    md = (tmp_path / "cmp" / "audit.md").read_text()
    assert "| | without (λ = 0) | with (λ = 1) |" in md and "| shadow test accuracy |" in md
    assert "with the γ/σ regularizer (λ = 1), online LiRA's outliers AUC goes" in res["risk"]["headline"]


# ---- every recommendation names something that exists ----

def audit_options() -> set[str]:
    command = typer.main.get_command(app).commands["audit"]
    return {opt for p in command.params for opt in p.opts}


def check_named(text: str) -> list[str]:
    """Every backticked span and every --flag in ``text`` that does not exist (empty when all do)."""
    command = typer.main.get_command(app)
    options, missing = audit_options(), []
    for flag in re.findall(r"(?<![\w`-])(--[a-z][a-z0-9-]*)", re.sub(r"`[^`]*`", "", text)):
        if flag not in options:
            missing.append(flag)
    for span in re.findall(r"`([^`]+)`", text):
        if span.startswith("bnmem "):
            words = span.split()
            sub = command.commands.get(words[1])
            opts = {o for p in sub.params for o in p.opts} if sub else set()
            missing += [w for w in words[1:2] if sub is None] + [w for w in words if w.startswith("--")
                                                                 and w not in opts]
        elif span.startswith("from "):
            module, _, names = span.removeprefix("from ").partition(" import ")
            mod = importlib.import_module(module)
            missing += [n for n in names.split(", ") if not hasattr(mod, n)]
        else:
            module, _, name = span.rpartition(".")
            try:
                if not hasattr(importlib.import_module(module), name):
                    missing.append(span)
            except ImportError:
                missing.append(span)
    return missing


def test_the_checker_can_fail():
    assert check_named("rerun with --gs-reg 1 or `bnmem audit --compare-gs-reg 1`") == []
    assert check_named("use --no-such-flag, `bnmem mitigate --data-folder x`, `from bnmem import Nope`, "
                       "`torch.nn.NoSuchNorm`") == ["--no-such-flag", "--data-folder", "Nope", "torch.nn.NoSuchNorm"]


def test_every_recommendation_names_a_command_or_api_that_exists(audited, tmp_path):
    res, _ = audited
    variants = [res, {**res, "membership": None}]
    short = copy.deepcopy(res)
    short["membership"]["shadow_accuracy"]["train_in"] = 0.3  # far below the model: the warning appears
    variants.append(short)
    texts = []
    for v in variants:
        risk = risk_summary(v)
        texts += risk["recommendations"] + [risk["headline"], (calibration(v) or {}).get("warning") or ""]
    assert any("GammaSigmaPenalty" in t for t in texts) and any("--match-accuracy" in t for t in texts)
    for t in texts:
        assert check_named(t) == [], t


# ---- the pooled metrics against slow, obviously-correct oracles ----

def oracle(scores: np.ndarray, members: np.ndarray) -> dict[str, float]:
    """Pooled metrics the obvious way: sklearn's AUC and the ROC module's TPR at FPR on the flattened scores."""
    fpr, tpr = roc(scores.ravel(), members.ravel())
    return {"auc": roc_auc_score(members.ravel(), scores.ravel()),
            **{k: tpr_at_fpr(fpr, tpr, f) for k, f in FPRS.items()}}


@pytest.mark.parametrize("ties", [False, True])
def test_pooled_metrics_and_every_resample_match_the_oracle(ties):
    rng = np.random.default_rng(0)
    members = rng.random((4, 500)) < 0.5
    scores = rng.normal(size=(4, 500)) + 0.8 * members
    if ties:  # rounded scores: many ties, as clamped or saturated attack scores give
        scores = np.round(scores, 1)
    pooled = PooledScores(scores, members)
    for k, v in oracle(scores, members).items():
        assert pooled.metrics(np.ones(500))[k] == pytest.approx(v, abs=1e-12), k
    for draw in range(3):  # a bootstrap resample = the explicit resampled columns
        cols = np.random.default_rng(draw).integers(0, 500, 500)
        want = oracle(scores[:, cols], members[:, cols])
        got = pooled.metrics(np.bincount(cols, minlength=500))
        for k in want:
            assert got[k] == pytest.approx(want[k], abs=1e-12), (draw, k)


def test_group_intervals_cover_the_point_and_cautions_follow_the_counts():
    rng = np.random.default_rng(1)
    members = rng.random((4, 60)) < 0.5
    g = group_metrics(rng.normal(size=(4, 60)) + 2.0 * members, members)
    assert g["ci"]["auc"][0] <= g["auc"] <= g["ci"]["auc"][1] and g["ci"]["auc"][1] - g["ci"]["auc"][0] > 0.01
    assert any(c.startswith("TPR at 1% and 0.1% FPR from") for c in g["cautions"])
    big = rng.random((16, 2000)) < 0.5
    assert group_metrics(rng.normal(size=(16, 2000)) + big, big, n_boot=20)["cautions"] == []


def test_an_empirical_epsilon_appears_in_the_headline_when_the_attacks_report_one(audited):
    res, _ = audited
    eps = res["membership"]["attacks"]["online"]["all"]["eps_lb"]  # the attack evaluation reports it
    assert f"Empirical ε lower bound {eps:.2f}" in res["risk"]["headline"]
    without = copy.deepcopy(res)
    del without["membership"]["attacks"]["online"]["all"]["eps_lb"]
    assert "ε" not in risk_summary(without)["headline"]


def test_the_level_is_read_off_the_lower_bound_and_the_earlier_rule_is_kept_beside_it(audited):
    """A group whose point AUC is past the elevated threshold but whose interval reaches below it is
    'elevated' under the earlier rule (point AUC) and lower under the current one; both are recorded."""
    res, _ = audited
    wide = copy.deepcopy(res)
    for attack in wide["membership"]["leakage"].values():
        for g in attack.values():
            if isinstance(g, dict) and "auc" in g:
                g["auc"], g["ci"]["auc"] = 0.65, [0.52, 0.78]
    risk = risk_summary(wide)
    assert risk["level"] == "low" and risk["level_point_auc"] == "elevated"
    assert all(g["level"] == "low" and g["level_point_auc"] == "elevated" for g in risk["groups"])
    assert "the earlier rule: elevated" in risk["basis"]


def test_the_markdown_lists_the_most_memorized_files_and_they_are_the_mislabeled_ones(audited, scenario):
    """The memorization scores over the shadow copies reach the markdown, by file name; in this scenario the
    most-memorized examples are mostly the files listed as mislabeled (a descriptive section, not the level)."""
    res, md = audited
    scores = res["membership"]["memorization_scores"]
    top = scores["top_memorized"]
    assert len(top["file"]) == len(top["index"]) == 10
    assert "## Per-example memorization scores (shadow copies)" in md
    assert all(f"(`{f}`)" in md for f in top["file"])
    listed = {row.split(",")[0].strip() for row in scenario["mislabeled"].read_text().splitlines()[1:]}
    hits = sum(any(f.endswith(name) or name.endswith(f) for name in listed) for f in top["file"])
    assert hits >= 7, (top["file"], sorted(listed)[:5])
    assert scores["by_subset"]["outliers"]["mean"] > scores["by_subset"]["inliers"]["mean"] + 0.3
