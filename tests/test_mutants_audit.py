"""The audit's numbers beyond the level itself, on fixtures where the rule and a one-token slip of it disagree
(issue 39): the copies' length and the calibration gate (:mod:`bnmem.auditing.calibration`), the sentences that
carry the copies-to-narrow figure and the group that sets the level (:mod:`bnmem.auditing.report`), and
``bnmem.audit``'s defaults against ``bnmem audit``'s.

Every expectation is written by hand from the documented rule (module docstrings, docs/audit.md), not by calling
the code under test; nothing here trains a model (the probe copy of ``--match-accuracy`` is replaced by a table).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bnmem.auditing import calibration as cal
from bnmem.auditing import report
from bnmem.config import TrainConfig


# ------------------------------------------------------------------ the copies' length: steps per epoch

def _loader_batches(n: int, batch: int, drop_last: bool) -> int:
    """Batches a DataLoader yields over n examples, counted one by one (the batch never exceeds the data)."""
    batch = min(batch, max(n, 1))
    count, start = 0, 0
    while start < n:
        size = min(batch, n - start)
        if size == batch or not drop_last:
            count += 1
        start += batch
    return max(count, 1)


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 63, 64, 65, 100])
@pytest.mark.parametrize("batch", [1, 32, 64])
@pytest.mark.parametrize("drop_last", [False, True])
def test_steps_per_epoch_counts_batches_as_a_loader_does(n, batch, drop_last):
    assert cal.steps_per_epoch(n, batch, drop_last) == _loader_batches(n, batch, drop_last)


def test_step_matched_record_by_hand():
    # the model: 2 epochs of ceil(100 / 16) = 7 steps = 14; a copy: 50 examples, 50 // 16 = 3 full batches per
    # epoch, so ceil(14 / 3) = 5 epochs (15 steps); rounded down it would take 4 (12 steps, fewer than the model's)
    train = TrainConfig(epochs=2, batch_size=16, lr=0.01)
    copy, rec = cal.step_matched(train, 100)
    assert copy.epochs == 5 and copy.model_dump() == {**train.model_dump(), "epochs": 5}
    assert rec == {"model_epochs": 2, "model_steps": 14, "copy_examples": 50, "epochs": 5, "copy_steps": 15,
                   "text": "your 2 epochs on 100 examples (batch 16) are 14 steps; each copy trains on 50, so 5 "
                           "epochs give it 15 steps"}
    # odd n: a copy has n // 2 examples; fewer than a batch: one step per epoch, at least one epoch
    copy, rec = cal.step_matched(TrainConfig(epochs=1, batch_size=64), 5)
    assert (rec["model_steps"], rec["copy_examples"], rec["epochs"], rec["copy_steps"]) == (1, 2, 1, 1)


# ------------------------------------------------------------------ the calibration gate

def _result(model_train, shadow_train, model_test=0.7, shadow_test=0.6, matched=None, epochs=30):
    return {"accuracy": {"train_acc": model_train, "test_acc": model_test},
            "membership": {"shadow_accuracy": {"train_in": shadow_train, "test": shadow_test},
                           "matched": matched, "train": {"epochs": epochs}}}


def test_calibration_within_the_margin_is_assessed_with_every_number():
    assert cal.ACCURACY_MARGIN == 0.10
    got = cal.calibration(_result(0.75, 0.6875, model_test=0.5, shadow_test=0.4375))
    assert got == {"model_train": 0.75, "model_test": 0.5, "shadow_train": 0.6875, "shadow_test": 0.4375,
                   "train_gap": 0.6875 - 0.75, "margin": 0.10, "assessed": True, "warning": None}


@pytest.mark.parametrize("model, shadow, assessed", [
    (0.0, 0.1, True), (0.1, 0.0, True),  # a gap of exactly the margin, either way, is within it
    (0.5, 0.625, False), (0.625, 0.5, False),  # 12.5 points, either way, is not
    (0.5, 0.59375, True), (0.59375, 0.5, True),
])
def test_calibration_gate_is_two_sided_and_inclusive(model, shadow, assessed):
    got = cal.calibration(_result(model, shadow))
    assert got["assessed"] is assessed and got["train_gap"] == shadow - model
    assert (got["warning"] is None) is assessed


def test_copies_that_over_fit_are_not_assessed_and_get_the_over_fit_fix():
    got = cal.calibration(_result(0.75, 0.9375))
    assert not got["assessed"] and got["train_gap"] == 0.1875
    assert got["warning"] == (
        "The shadow copies reach 94% training accuracy on their half, 19 points above your model's 75% (declared "
        "margin 10): they fit their half more than your model fits its data; check that the recipe flags are your "
        "training's (--lr, --momentum, --weight-decay, --augment), or give --same-epochs to train the copies for "
        "--epochs as given rather than for your model's number of steps.")


def test_gap_points_are_a_hundred_times_the_gap():
    # 75 points: 101 x 0.75 would print 76
    got = cal.calibration(_result(0.1875, 0.9375))
    assert got["warning"].startswith("The shadow copies reach 94% training accuracy on their half, 75 points above "
                                      "your model's 19% (declared margin 10): they fit their half more")


def test_copies_that_under_fit_get_match_accuracy_then_a_larger_budget():
    got = cal.calibration(_result(0.875, 0.5, epochs=12))
    assert got["warning"] == (
        "The shadow copies reach 50% training accuracy on their half, 38 points below your model's 88% (declared "
        "margin 10): they under-fit at 12 epochs; rerun with --match-accuracy (it extends their training until a "
        "probe copy reaches your model's accuracy), and check the recipe flags are your training's.")
    tried = cal.calibration(_result(0.875, 0.5, matched={"max_epochs": 48}))
    assert tried["warning"].endswith(
        ": --match-accuracy stopped at 48 epochs without reaching it; rerun with a larger --max-epochs (e.g. 96), or "
        "check the recipe flags (--lr, --optimizer, --momentum) are your training's.")
    # a gap of exactly 0 is not over-fitting: the under-fit advice (never the over-fit one)
    assert "under-fit" in cal.calibration_fix({"matched": None, "train": {"epochs": 3}}, 0.0)


def test_calibration_without_copies_or_model_accuracy_is_none():
    assert cal.calibration({"accuracy": {"train_acc": 0.9}, "membership": None}) is None
    assert cal.calibration({"accuracy": {"train_acc": None}, "membership": _result(0.9, 0.9)["membership"]}) is None
    bare = _result(0.9, 0.85)
    del bare["accuracy"]["test_acc"], bare["membership"]["shadow_accuracy"]["test"]
    got = cal.calibration(bare)
    assert got["model_test"] is None and got["shadow_test"] is None and got["assessed"]


# ------------------------------------------------------------------ the model's own flags and what blocks a level

def _ds(labels, num_classes):
    y = torch.tensor(labels, dtype=torch.long)
    return SimpleNamespace(num_classes=num_classes, n_train=len(labels), y_train=y)


def test_chance_flag_at_the_largest_class_share_plus_the_margin():
    ds = _ds([0, 0, 1, 1], 3)  # the largest class holds 2 of 4: chance 50%, flagged up to 55% inclusive
    assert cal.CHANCE_MARGIN == 0.05
    (flag,) = cal.model_checks({"train_acc": 0.55}, ds, 3)
    assert flag == {"kind": "chance", "text": (
        "the model's training accuracy is 55%, no more than 5 points above chance (50%, always the largest class): "
        "it looks untrained, or the data are not read as in its training (--mean/--std, --channels, --image-size); "
        "no risk level is given for it")}
    assert cal.model_checks({"train_acc": 0.5625}, ds, 3) == []
    assert cal.model_checks({"train_acc": None}, ds, 3) == []
    # chance is the largest class's share, not the mean share (1/3 here) nor the smallest
    skewed = _ds([2, 2, 2, 0], 3)  # 75%
    (flag,) = cal.model_checks({"train_acc": 0.8}, skewed, 3)
    assert "is 80%, no more than 5 points above chance (75%, always the largest class)" in flag["text"]
    assert cal.model_checks({"train_acc": 0.8125}, skewed, 3) == []
    # an empty training set (the guard max(n, 1) is there for it): no chance flag, no crash
    assert cal.model_checks({"train_acc": None}, _ds([], 3), 3) == []
    # one training example: always answering its class is right every time (chance 100%, not 50%)
    assert [f["kind"] for f in cal.model_checks({"train_acc": 1.0}, _ds([1], 2), 2)] == ["chance"]


def test_outputs_flag_names_the_extra_outputs():
    (one,) = cal.model_checks({"train_acc": 1.0}, _ds([0, 1, 2], 3), 4)
    assert one["kind"] == "outputs" and one["text"].startswith(
        "the model outputs 4 scores per example but the data have 3 classes: output 3 is never a label here; ")
    (two,) = cal.model_checks({"train_acc": 1.0}, _ds([0, 1, 2], 3), 6)
    assert two["text"] == (
        "the model outputs 6 scores per example but the data have 3 classes: outputs 3–5 are never a label here; if "
        "the model was trained on more classes, audit it on the data it was trained on (every class folder), or its "
        "outputs and the labels may not correspond")
    assert cal.model_checks({"train_acc": 1.0}, _ds([0, 1, 2], 3), 3) == []
    both = cal.model_checks({"train_acc": 0.25}, _ds([0, 1, 2], 3), 5)
    assert [f["kind"] for f in both] == ["outputs", "chance"]


def test_level_blocker_chance_first_then_the_gate():
    chance = {"kind": "chance", "text": "the model's training accuracy is 10%"}
    over = cal.calibration(_result(0.5, 0.75))
    fine = cal.calibration(_result(0.5, 0.5))
    measured = {"membership": {"shadow_models": 4}, "warnings": [chance]}
    assert cal.level_blocker(measured, over) == "The model's training accuracy is 10%."
    # without membership the chance flag does not block (nothing measured); the gate still does
    assert cal.level_blocker({"membership": None, "warnings": [chance]}, over) == over["warning"]
    assert cal.level_blocker({"membership": {"x": 1}, "warnings": [{"kind": "outputs", "text": "t"}]}, fine) is None
    assert cal.level_blocker({"membership": {"x": 1}, "warnings": None}, over) == over["warning"]
    assert cal.level_blocker({"membership": {"x": 1}}, None) is None


# ------------------------------------------------------------------ --match-accuracy's doubling (no training)

MODEL, DATA = "the model", "the data"


@pytest.fixture
def probe(monkeypatch):
    """The probe copy's training accuracy read from a table by epochs (what a trained copy would reach)."""
    calls = []

    def use(table):
        def fake(model, ds, train, shadow_models):
            assert (model, ds) == (MODEL, DATA)  # the audit's own model and data reach the probe
            calls.append((train.epochs, shadow_models))
            return table[train.epochs]
        monkeypatch.setattr(cal, "probe_accuracy", fake)
        return calls
    return use


def test_match_epochs_doubles_until_within_the_margin_below_the_target(probe):
    calls = probe({3: 0.5, 6: 0.625, 12: 0.75, 24: 0.875})
    cfg, rec = cal.match_epochs(MODEL, DATA, TrainConfig(epochs=3), target=0.9375, shadow_models=8)
    # 0.75 is 18.75 points below 0.9375: not within the margin. The default budget is 4 x 3 = 12 epochs, so the
    # probe stops at 12 without reaching the target (24 epochs, which would, is never tried).
    assert calls == [(3, 8), (6, 8), (12, 8)]
    assert rec == {"target": 0.9375, "margin": 0.10, "max_epochs": 12, "trail": [
        {"epochs": 3, "train_acc": 0.5}, {"epochs": 6, "train_acc": 0.625}, {"epochs": 12, "train_acc": 0.75}],
        "reached": False, "epochs": 12, "text": (
            "--match-accuracy (one probe copy on its half): 3 epochs → 50%, 6 epochs → 62%, 12 epochs → 75%; the "
            "budget of 12 epochs did not reach your model's 94% (within 10 points); the copies train 12 epochs.")}
    assert cfg.epochs == 12


def test_match_epochs_stops_at_the_first_probe_within_the_margin(probe):
    probe({4: 0.5, 8: 0.8, 16: 0.9})
    # target 0.9, margin 0.1: 0.8 >= 0.9 - 0.1 reaches it (the margin's edge counts)
    cfg, rec = cal.match_epochs(MODEL, DATA, TrainConfig(epochs=4), target=0.9, shadow_models=4, max_epochs=40)
    assert (rec["reached"], rec["epochs"], cfg.epochs, rec["max_epochs"]) == (True, 8, 8, 40)
    assert rec["text"] == ("--match-accuracy (one probe copy on its half): 4 epochs → 50%, 8 epochs → 80%; the "
                           "copies train 8 epochs to match your model's 90%.")


def test_match_epochs_last_step_is_cut_to_the_budget(probe):
    calls = probe({5: 0.1, 10: 0.2, 13: 0.3})
    cfg, rec = cal.match_epochs(MODEL, DATA, TrainConfig(epochs=5), target=0.9, shadow_models=4, max_epochs=13,
                                margin=0.05)
    assert [c[0] for c in calls] == [5, 10, 13] and rec["epochs"] == 13 and not rec["reached"]
    assert rec["margin"] == 0.05 and "(within 5 points)" in rec["text"]
    probe({5: 0.1, 10: 0.2})
    _, rec = cal.match_epochs(MODEL, DATA, TrainConfig(epochs=5), target=1.0, shadow_models=4, max_epochs=10,
                              margin=0.75)
    assert "(within 75 points)" in rec["text"]  # 101 x 0.75 would print 76
    probe({5: 0.9})
    _, rec = cal.match_epochs(MODEL, DATA, TrainConfig(epochs=5), target=0.9, shadow_models=4, max_epochs=5)
    assert rec["trail"] == [{"epochs": 5, "train_acc": 0.9}] and rec["reached"]


def test_match_epochs_refuses_a_budget_below_the_recipe():
    from bnmem.errors import BnmemError

    with pytest.raises(BnmemError, match="--max-epochs 4 is below the copies' 5 epochs"):
        cal.match_epochs(MODEL, DATA, TrainConfig(epochs=5), target=0.9, shadow_models=4, max_epochs=4)


# ------------------------------------------------------------------ the report's copies figure and level setter

def _g(group, attack, auc, lo, hi, lower, upper, narrow=None, name=None):
    return {"group": group, "attack": attack, "auc": auc, "auc_ci": [lo, hi], "level_lower": lower,
            "level_upper": upper, "narrow_with": narrow, "name": name or f"the {group} group (n)"}


def test_span_sentence_names_the_largest_copies_figure_above_the_current_count():
    a = _g("outliers", "online", 0.58, 0.52, 0.62, "low", "elevated", 46, "the 6 known outliers (mislabeled)")
    b = _g("rare", "loss", 0.57, 0.53, 0.59, "low", "moderate", 76, "the 4 examples listed as rare")
    c = _g("all", "online", 0.51, 0.50, 0.52, "low", "low", None, "the whole training set (100 examples)")
    assert report.span_sentence([a, b, c], 8) == (
        "With 8 copies the intervals of the 6 known outliers (mislabeled), the 4 examples listed as rare span more "
        "than one level, so the level is a range, not its lower end; about 76 shadow copies (rerun with "
        "--shadow-models 76) would narrow them to one level if the interval shrinks as 1/√copies (a group of few "
        "examples narrows more slowly).")
    assert report.span_sentence([a, c], 16) == (
        "With 16 copies the interval of the 6 known outliers (mislabeled) spans more than one level, so the level "
        "is a range, not its lower end; about 46 shadow copies (rerun with --shadow-models 46) would narrow it to "
        "one level if the interval shrinks as 1/√copies (a group of few examples narrows more slowly).")
    # no figure above the copies already used (or none at all): no rerun advice
    assert report.span_sentence([a], 46).endswith("so the level is a range, not its lower end.")
    assert report.span_sentence([a], 45).endswith("about 46 shadow copies (rerun with --shadow-models 46) would "
                                                  "narrow it to one level if the interval shrinks as 1/√copies (a "
                                                  "group of few examples narrows more slowly).")
    assert report.span_sentence([{**a, "narrow_with": None}], 4).endswith("not its lower end.")
    assert report.span_sentence([c], 8) == ""


def test_setter_sentence_one_group_and_both_ends():
    a = _g("outliers", "online", 0.58, 0.56, 0.62, "moderate", "elevated", name="the 6 known outliers (mislabeled)")
    b = _g("rare", "loss", 0.57, 0.53, 0.65, "low", "elevated", name="the 4 examples listed as rare")
    c = _g("all", "rmia", 0.52, 0.51, 0.53, "low", "low", name="the whole training set (100 examples)")
    assert report.setter_sentence([]) == ""
    assert report.setter_sentence([c]) == "The level is set by the whole training set (AUC 0.52 [0.51, 0.53], RMIA)."
    # a sets the lower end (moderate); b's upper end (0.65) is higher than a's (0.62): both are named
    assert report.setter_sentence([b, c, a]) == (
        "The level's lower end (moderate) is set by the 6 known outliers (AUC 0.58 [0.56, 0.62], online LiRA), its "
        "upper end (elevated) by the 4 examples listed as rare (AUC 0.57 [0.53, 0.65], loss threshold); the other "
        "groups' intervals reach no higher.")
    # one group sets both ends
    a2 = {**a, "auc_ci": [0.56, 0.66]}
    assert report.setter_sentence([b, a2]) == (
        "The level is set by the 6 known outliers (AUC 0.58 [0.56, 0.66], online LiRA); the other groups' intervals "
        "reach no higher.")
    # the setter's own interval sits on one level, the highest any group reaches: one sentence
    flat = _g("outliers", "offline", 0.70, 0.65, 0.75, "elevated", "elevated", name="the 6 known outliers (x)")
    higher = _g("rare", "loss", 0.70, 0.56, 0.80, "moderate", "elevated", name="the 4 rare")
    assert report.setter_sentence([higher, flat]) == (
        "The level is set by the 6 known outliers (AUC 0.70 [0.65, 0.75], offline LiRA); the other groups' "
        "intervals reach no higher.")


def test_epsilon_finding_reads_the_setters_attack_and_group():
    a = _g("outliers", "online", 0.58, 0.56, 0.62, "moderate", "elevated", name="the 6 known outliers (mislabeled)")
    b = _g("all", "loss", 0.57, 0.57, 0.58, "moderate", "moderate", name="the whole training set (100 examples)")
    attacks = {"online": {"outliers": {"eps_lb": 1.5, "eps_lb_max": 2.25}, "all": {"eps_lb": 9.0}},
               "loss": {"outliers": {"eps_lb": 8.0}, "all": {"eps_lb": 0.0}}}
    # the setter: the same lower level (moderate), the higher lower bound (0.57, the whole set, loss)
    got = report.epsilon_finding({"membership": {"attacks": attacks}}, [a, b])
    assert got == {"attack": "loss", "group": "all", "eps_lb": 0.0, "eps_lb_max": None, "informative": False,
                   "text": "Empirical ε lower bound 0 (loss threshold on the whole training set (100 examples)): no "
                           "evidence against any ε; the attack's hits and false alarms stay within what chance "
                           "allows at 95% confidence with these counts, which does not mean ε = 0."}
    got = report.epsilon_finding({"membership": {"attacks": attacks}}, [{**a, "auc_ci": [0.575, 0.62]}, b])
    assert got == {"attack": "online", "group": "outliers", "eps_lb": 1.5, "eps_lb_max": 2.25, "informative": True,
                   "text": "No (ε, δ = 1/N) differential-privacy guarantee below ε = 1.50 is possible for this "
                           "recipe: a floor from online LiRA on the 6 known outliers (mislabeled) (95% confidence "
                           "per copy, mean over the copies, largest over the copies 2.25), not an estimate of ε."}
    assert report.epsilon_finding({"membership": {"attacks": {}}}, [a, b]) is None
    assert report.epsilon_finding({"membership": None}, []) is None
    one = report.epsilon_finding({"membership": {"attacks": {"loss": {"all": {"eps_lb": 0.5}}}}}, [b])
    assert one["text"].startswith("No (ε, δ = 1/N) differential-privacy guarantee below ε = 0.50 is possible") and \
        "mean over the copies), not an estimate" in one["text"] and one["eps_lb_max"] is None
    assert one["informative"] is True and one["eps_lb"] == 0.5  # any ε floor above 0 informs, not only above 1


# ------------------------------------------------------------------ bnmem.audit's defaults are bnmem audit's

def test_python_api_defaults_equal_the_command_lines(monkeypatch, tmp_path):
    """bnmem.audit(model, data) and `bnmem audit --model M` (no other flag) audit with the same shadow copies,
    recipe and options; the only documented differences are the progress output (on for the command, off in
    Python), where the results go (the command's runs/audit; Python writes nothing) and the source record."""
    import inspect

    import bnmem
    import bnmem.auditing.run as run_mod
    from bnmem.auditing.api import audit
    from bnmem.auditing.options import resolve
    from bnmem.cli import main

    assert bnmem.audit is audit
    params = inspect.signature(audit).parameters
    assert list(params) == ["model", "train_data", "test_data", "shadow", "train", "options", "out", "fields"]
    assert {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty} == {
        "test_data": None, "shadow": None, "train": None, "options": None, "out": None}

    seen = {}
    def fake_run_audit(*args):
        seen["api"] = args
        return args

    monkeypatch.setattr(run_mod, "run_audit", fake_run_audit)
    model, data = object(), (torch.zeros(2, 1), torch.zeros(2))
    assert audit(model, data) is seen["api"]
    assert seen["api"] == (model, data, None, None, None, None, None, {})
    test, shadow, train, options = (torch.ones(1), torch.ones(1)), {"shadow_models": 4}, {"epochs": 2}, {"top_k": 3}
    audit(model, data, test, shadow=shadow, train=train, options=options, out=tmp_path, seed=7)
    assert seen["api"] == (model, data, test, shadow, train, options, tmp_path, {"seed": 7})
    api_copies, api_train, api_opts, masks = resolve(None, None, None, {})  # what run_audit makes of the defaults
    assert masks == {}

    def fake_audit_file(model_path, config, *, out, shadow=None, options=None, notices=None, **fields):
        seen["cli"] = (config, out, shadow, options, fields)
        return SimpleNamespace(markdown="", out=out, files=[], mlflow=None, gate=None)

    monkeypatch.setattr(run_mod, "audit_file", fake_audit_file)
    assert main(["audit", "--model", str(tmp_path / "m.pt")]) == 0
    config, out, cli_shadow, cli_options, fields = seen["cli"]
    cli_copies, _, cli_opts, _ = resolve(cli_shadow, None, cli_options, fields)
    assert cli_copies.model_dump() == api_copies.model_dump()
    assert config.train.model_dump() == api_train.model_dump() == TrainConfig().model_dump()
    differ = {"progress"}  # printed by the command, silent in Python
    assert {k: v for k, v in cli_opts.model_dump().items() if k not in differ} == \
        {k: v for k, v in api_opts.model_dump().items() if k not in differ}
    assert (cli_opts.progress, api_opts.progress) == (True, False)
    assert Path(out) == Path("runs/audit")
