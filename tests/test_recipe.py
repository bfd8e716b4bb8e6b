"""The validation split and per-norm learning-rate selection."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnmem.attacks import keep_matrix
from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset, load_source
from bnmem.errors import BnmemError
from bnmem.lenses.memorize import MemorizeConfig, run_memorize
from bnmem.train import recipe


@pytest.fixture(scope="module")
def val_ds():
    return load_dataset(DataConfig(dataset="digits", label_noise=0.05, ood=0.05, val_fraction=0.1, seed=0))


def test_validation_split_is_disjoint_from_training_pool_test_and_lira_candidates(val_ds):
    ds = val_ds
    raw = load_source("digits", None, False)
    train_src = set(ds.source_index[ds.source_index >= 0].tolist())
    val_src = set(ds.val_source_index.tolist())
    assert ds.n_val == len(val_src) == round(0.1 * len(raw.y_train))
    assert not train_src & val_src
    assert train_src | val_src == set(range(len(raw.y_train)))  # carved from the training pool only
    # The test split is the raw test split, whole and untouched.
    assert ds.x_test.shape[0] == len(raw.y_test)
    np.testing.assert_allclose(ds.x_test.numpy() * ds.std[None, :, None, None] + ds.mean[None, :, None, None],
                               raw.x_test, atol=1e-5)
    # Validation images are raw training images, with their clean labels.
    val_raw = ds.x_val.numpy() * ds.std[None, :, None, None] + ds.mean[None, :, None, None]
    np.testing.assert_allclose(val_raw, raw.x_train[ds.val_source_index], atol=1e-5)
    np.testing.assert_array_equal(ds.y_val.numpy(), raw.y_train[ds.val_source_index])
    # LiRA candidates are the columns of the keep matrix: every one a training example, none a validation one.
    keep = keep_matrix(8, ds.n_train, 0)
    candidates = set(ds.source_index[keep.any(axis=0) & (ds.source_index >= 0)].tolist())
    assert candidates and not candidates & val_src
    assert ds.summary()["n_val"] == ds.n_val


def test_no_validation_split_by_default_keeps_the_data():
    base = load_dataset(DataConfig(dataset="digits", label_noise=0.05, seed=0))
    assert base.n_val == 0 and base.n_train == len(load_source("digits", None, False).y_train)
    other = load_dataset(DataConfig(dataset="digits", label_noise=0.05, seed=0, val_fraction=0.1))
    assert other.n_train < base.n_train and other.is_noisy.sum() == round(0.05 * other.n_train)


def test_bad_val_fraction_is_rejected():
    with pytest.raises(ValueError, match="val_fraction"):
        DataConfig(val_fraction=0.9)
    with pytest.raises(BnmemError, match="per-norm"):
        MemorizeConfig(recipe="per-norm")


def test_grid_and_pick_rule():
    assert recipe.lr_grid(TrainConfig(lr=0.05)) == [0.0125, 0.025, 0.05, 0.1, 0.2]
    assert recipe.lr_grid(TrainConfig(lr=0.05), [0.3, 0.1]) == [0.1, 0.3]
    assert recipe.pick({0.01: 0.9, 0.05: 0.95, 0.2: 0.93}, 0.05) == 0.05
    assert recipe.pick({0.0125: 0.95, 0.1: 0.95, 0.2: 0.9}, 0.05) == 0.1  # tie: closest in log scale
    assert recipe.pick({0.025: 0.95, 0.1: 0.95}, 0.05) == 0.025  # equal distance: the smaller


def test_plateau_rule_stops_after_patience_epochs_without_an_improvement_of_min_delta():
    d = 0.01
    rising = [0.1 * e for e in range(1, 9)]  # improves every epoch up to 0.8 (epoch 8)
    flat = [0.8] * 20
    # best at epoch 8; epochs 9..13 do not improve: the 5th of them (epoch 13) stops, past the minimum of 10
    assert recipe.plateau_stop(rising + flat, d, patience=5, min_epochs=10) == (13, recipe.STOP_PLATEAU)
    # improvements smaller than min_delta over the best do not count
    creep = rising + [0.802, 0.804, 0.806, 0.808, 0.809, 0.809]
    assert recipe.plateau_stop(creep, d, patience=5, min_epochs=10) == (13, recipe.STOP_PLATEAU)
    # ... but one of min_delta (one example of 100, as the split's accuracies round) resets the patience
    bump = rising + [0.8, 81 / 100] + [81 / 100] * 10
    assert recipe.plateau_stop(bump, d, patience=5, min_epochs=10) == (15, recipe.STOP_PLATEAU)
    # no stop before the minimum: a flat start at chance (no-norm's slow start) is not a plateau
    assert recipe.plateau_stop([0.1] * 30, d, patience=5, min_epochs=10) == (10, recipe.STOP_PLATEAU)
    assert recipe.plateau_stop([0.1] * 6 + [0.2 + 0.05 * e for e in range(10)], d, patience=5,
                               min_epochs=10) is None  # still improving when the curve ends: undecided
    # the cap: a curve that keeps improving stops there
    steady = [0.02 * e for e in range(1, 41)]
    assert recipe.plateau_stop(steady, d, patience=5, min_epochs=10, cap=25) == (25, recipe.STOP_CAP)
    # the declared defaults
    assert recipe.plateau_stop(rising + flat, d) == (8 + recipe.PLATEAU_PATIENCE, recipe.STOP_PLATEAU)
    assert recipe.cap_epochs(TrainConfig(epochs=20)) == 20 * recipe.PLATEAU_CAP_FACTOR
    assert recipe.cap_epochs(TrainConfig(epochs=20), 30) == 30


def test_selection_takes_the_best_plateau_score_with_the_declared_tie_rule(tmp_path, monkeypatch):
    """On synthetic validation curves: each learning rate stops where the rule says, scores the mean of its
    last SCORE_WINDOW epochs, and the best score wins; a tie goes to the rate closest to the shared one."""
    ds = load_dataset(DataConfig(dataset="digits", train_size=200, val_fraction=0.5, seed=0))
    n = ds.n_val
    assert n == 100  # one example = 0.01 = min_delta
    w = recipe.SCORE_WINDOW

    def curves(model_cfg, ds_, train, lrs, seeds, cap, train_sets=None, method="auto"):
        up = [min(0.9, 0.1 * e) for e in range(1, cap + 1)]       # plateau 0.9 from epoch 9: stops at 14
        slow = [min(0.95, 0.05 * e) for e in range(1, cap + 1)]   # plateau 0.95 from epoch 19: stops at 24
        fast = [0.9] * cap                                        # at 0.9 from epoch 1: stops at the minimum, 10
        table = {0.0125: None, 0.025: fast, 0.05: up, 0.1: slow, 0.2: up}
        return [[None if table[lr] is None else list(table[lr]) for _ in seeds] for lr in lrs]

    monkeypatch.setattr(recipe, "candidate_curves", curves)
    train = TrainConfig(lr=0.05, epochs=20)
    got = recipe.select_lr(ModelConfig(arch="lenet", norm="none"), ds, train, [0], tmp_path)
    rows = {c["lr"]: c for c in got["candidates"]}
    assert (rows[0.05]["epochs"], rows[0.05]["stop"]) == (14, recipe.STOP_PLATEAU)
    assert (rows[0.1]["epochs"], rows[0.1]["stop"]) == (24, recipe.STOP_PLATEAU)
    assert (rows[0.025]["epochs"], rows[0.025]["stop"]) == (10, recipe.STOP_PLATEAU)
    assert rows[0.0125]["diverged"] == 1 and rows[0.0125]["score"] == 0.0
    assert rows[0.1]["score"] == pytest.approx(0.95) and rows[0.05]["score"] == pytest.approx(0.9)
    assert (got["lr"], got["epochs"], got["stop"]) == (0.1, 24, recipe.STOP_PLATEAU)
    assert recipe.train_for(train, {"mode": "per-norm", "per_norm": {"none": got}}, "none") == \
        train.model_copy(update={"lr": 0.1, "epochs": 24})
    # without the slow one: 0.025, 0.05 and 0.2 tie at 0.9; 0.05 is the shared rate itself
    monkeypatch.setattr(recipe, "candidate_curves", lambda m, d, t, lrs, seeds, cap, *a, **k: [
        c for lr, c in zip([0.0125, 0.025, 0.05, 0.1, 0.2], curves(m, d, t, [0.0125, 0.025, 0.05, 0.1, 0.2], seeds,
                                                                   cap)) if lr in lrs])
    tie = recipe.select_lr(ModelConfig(arch="lenet", norm="none"), ds, train, [0], tmp_path / "t",
                           [0.0125, 0.025, 0.05, 0.2])
    assert (tie["lr"], tie["epochs"]) == (0.05, 14)
    tie = recipe.select_lr(ModelConfig(arch="lenet", norm="none"), ds, train, [0], tmp_path / "u", [0.025, 0.2])
    assert tie["lr"] == 0.025  # 0.025 is closer to 0.05 than 0.2 is (log scale)
    # a cap below the plateau: every candidate stops there
    capped = recipe.select_lr(ModelConfig(arch="lenet", norm="none"), ds, train, [0], tmp_path / "c",
                              max_epochs=12)
    assert {(c["epochs"], c["stop"]) for c in capped["candidates"] if not c["diverged"]} == \
        {(10, recipe.STOP_PLATEAU), (12, recipe.STOP_CAP)}
    assert w == recipe.PLATEAU_PATIENCE


def test_selection_picks_the_best_validation_accuracy_and_resumes(tmp_path):
    ds = load_dataset(DataConfig(dataset="digits", train_size=400, val_fraction=0.25, seed=0))
    train = TrainConfig(epochs=3, batch_size=32, lr=0.05)
    grid = [0.005, 0.05, 1e3]  # the last one diverges
    rec = recipe.select_recipes(["batch", "none"], "lenet", ds, train, [0], tmp_path, grid)
    for norm in ("batch", "none"):
        cands = {c["lr"]: c for c in rec["per_norm"][norm]["candidates"]}
        assert cands[1e3]["diverged"] == 1 and cands[1e3]["val_acc"] == 0.0 and cands[1e3]["score"] == 0.0
        best = max(c["score"] for c in cands.values())
        chosen = rec["per_norm"][norm]
        assert cands[chosen["lr"]]["score"] == best
        # the selected recipe's epochs are its candidate's stopping epoch, within the cap (2 x 3 epochs)
        assert chosen["epochs"] == cands[chosen["lr"]]["epochs"] <= 6
        assert len(cands[chosen["lr"]]["curve"]) == chosen["epochs"]
    assert rec["mode"] == "per-norm" and rec["n_val"] == 100 and rec["rule"]["cap"] == 6
    again = recipe.select_recipes(["batch", "none"], "lenet", ds, train, [0], tmp_path, grid)
    assert again == rec
    per = recipe.train_for(train, rec, "none")
    assert per.lr == rec["per_norm"]["none"]["lr"] and per.epochs == rec["per_norm"]["none"]["epochs"]
    assert recipe.train_for(train, recipe.shared_record(train), "none") == train


def test_memorize_per_norm_uses_and_records_the_selected_recipe(tmp_path):
    data = DataConfig(dataset="digits", label_noise=0.05, train_size=400, val_fraction=0.25, seed=0)
    cfg = MemorizeConfig(data=data, seeds=[0], recipe="per-norm", lr_grid=[0.01, 0.1],
                         train=TrainConfig(epochs=2, batch_size=32))
    res = run_memorize(cfg, tmp_path / "m", progress=False)
    sel = res["conditions"]["recipe_selection"]
    assert res["conditions"]["recipe"] == "per-norm"
    assert sel["mode"] == "per-norm" and sel["grid"] == [0.01, 0.1]
    for norm in ("batch", "none"):
        assert res[norm]["recipe"]["lr"] == sel["per_norm"][norm]["lr"]
        final = res[norm]["final"]
        assert 0 <= final["train_acc"] <= 1 and 0 <= final["val_acc"] <= 1 and final["test_acc"] is not None
    shared = run_memorize(cfg.model_copy(update={"recipe": "shared"}), tmp_path / "s", progress=False)
    assert shared["conditions"]["recipe"] == "shared"
    assert all(shared[n]["recipe"]["lr"] == 0.05 for n in ("batch", "none"))


def test_lira_per_norm_trains_each_norm_with_its_selected_recipe(tmp_path):
    import json

    from bnmem.lenses.lira import LiraConfig, run_lira
    from bnmem.shadow.training import IDENTITY_FILE

    data = DataConfig(dataset="digits", label_noise=0.05, train_size=300, val_fraction=0.2, seed=0)
    cfg = LiraConfig(data=data, shadow_models=4, chunk_size=4, recipe="per-norm", lr_grid=[0.01, 0.1],
                     train=TrainConfig(epochs=2, batch_size=32))
    res = run_lira(cfg, tmp_path / "l", progress=False)
    sel = res["conditions"]["recipe_selection"]
    assert res["conditions"]["recipe"] == "per-norm"
    ds = load_dataset(data)
    assert res["subset_sizes"]["all"] == ds.n_train  # LiRA candidates: the pool without validation
    for norm in ("batch", "none"):
        lr = sel["per_norm"][norm]["lr"]
        assert res["conditions"]["lr_per_norm"][norm] == lr
        identity = json.loads((tmp_path / "l" / norm / IDENTITY_FILE).read_text())
        assert identity["train"]["lr"] == lr  # the shadow models trained with it
        assert res["accuracy"][norm]["train_in"]["mean"] is not None
    # Candidates train as shadow models 0..2 would: their seeds and IN halves.
    assert sel["seeds"] == [0, 1, 2] and sel["trained_on"] == "the IN halves of shadow models [0, 1, 2]"


@pytest.fixture(scope="module")
def ds64():
    from digits_data import load64

    return load64(DataConfig(dataset="digits", label_noise=0.05, train_size=300, val_fraction=0.2, seed=0))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("norm", ["batch", "none"])
def test_candidates_trained_together_equal_one_by_one_in_float64(ds64, optimizer, norm):
    """The oracle: each (lr, seed) candidate of the ensemble engine equals training it alone, to 1e-9 in
    float64, on its own training set (unequal sizes); a diverging learning rate is None, not an error."""
    from bnmem.train import seeded_model, train_model
    from bnmem.train.ensemble import train_candidates

    mc = ModelConfig(arch="lenet", norm=norm)
    train = TrainConfig(epochs=2, batch_size=32, optimizer=optimizer, lr=0.05 if optimizer == "sgd" else 0.002)
    rng = np.random.default_rng(1)
    sets = [np.sort(rng.permutation(ds64.n_train)[:n]) for n in (150, 131)]
    lrs = [train.lr / 4, train.lr, train.lr * 2]
    if optimizer == "sgd":
        # Diverges in both paths whatever the hardware: one step makes the weights ~1e200, whose squares overflow
        # float64 in the next forward (at 1e12, BN renormalized the blown-up weights and whether the loss turned
        # non-finite depended on rounding; it did not on this machine).
        lrs.append(1e200)  # (Adam's steps stay lr-sized: no NaN to catch)
    pairs = [(lr, i) for lr in lrs for i in range(2)]
    seeds = [7, 9]
    got = train_candidates(mc, ds64, train, [lr for lr, _ in pairs], [seeds[i] for _, i in pairs],
                           [sets[i] for _, i in pairs], method="grouped")
    for (lr, i), model in zip(pairs, got):
        cfg = train.model_copy(update={"lr": lr})
        try:
            ref = train_model(seeded_model(mc, ds64, seeds[i]).double(), ds64, cfg, seeds[i], train_idx=sets[i],
                              measure=False, progress=False).model
        except FloatingPointError:
            assert model is None, lr
            continue
        assert model is not None, lr
        want = ref.state_dict()
        for name, t in model.state_dict().items():
            torch.testing.assert_close(t, want[name], rtol=0, atol=1e-9, msg=f"{name} at lr {lr}")
    assert [m is None for m in got].count(True) == (2 if optimizer == "sgd" else 0)


def test_selection_through_the_ensemble_equals_one_by_one(ds64, tmp_path):
    """select_lr's record is the same whether candidates train together or one by one (float64)."""
    train = TrainConfig(epochs=1, batch_size=32)
    half = [np.arange(0, ds64.n_train, 2), np.arange(1, ds64.n_train, 2)]
    mc = ModelConfig(arch="lenet", norm="batch")
    together = recipe.select_lr(mc, ds64, train, [5, 6], tmp_path / "a", [0.02, 0.05, 0.2], half)
    alone = recipe.select_lr(mc, ds64, train, [5, 6], tmp_path / "b", [0.02, 0.05, 0.2], half, method="sequential")
    assert together == alone
    assert (tmp_path / "a" / recipe.CANDIDATES_FILE).is_file()
    # the cache is keyed by what trained: other training sets retrain
    again = recipe.select_lr(mc, ds64, train, [5, 6], tmp_path / "a", [0.02, 0.05, 0.2], half[::-1])
    assert again != together


def test_study_phases_train_each_norm_with_its_selected_recipe(tmp_path):
    """Asking for pending work never trains: the cell work's recipe job selects, then its training chunks use
    it (each a norm's typed config with the selected learning rate)."""
    from bnmem.lenses.lira import LiraConfig
    from bnmem.shadow.work import ShadowWork

    data = DataConfig(dataset="digits", label_noise=0.05, train_size=200, val_fraction=0.2, seed=0)
    cfg = LiraConfig(data=data, shadow_models=4, chunk_size=4, recipe="per-norm", lr_grid=[0.01, 0.1],
                     train=TrainConfig(epochs=1, batch_size=32))
    work = ShadowWork.of(cfg, tmp_path)
    assert work.train_specs() == [] and work.query_specs() == []  # before the selection: nothing pending
    assert not (tmp_path / "recipe").exists()
    select, _, _ = work.tasks("cell/lira", 1.0)
    jobs = work.recipe_specs()
    assert len(jobs) == 1 and not (tmp_path / "recipe").exists()
    select.fn(jobs[0])
    assert work.recipe_specs() == []  # selected: nothing left in this phase
    chunks = work.train_specs()
    import json

    sel = json.loads((tmp_path / "recipe" / recipe.RECIPE_FILE).read_text())  # the recipe job's selection
    assert sel["trained_on"] == "the IN halves of shadow models [0, 1, 2]" and len(chunks) == 2
    for chunk in chunks:
        assert chunk.config.train.lr == sel["per_norm"][chunk.norm]["lr"]
    # the selection the lens makes with the data loaded resolves each norm's config the same way
    from bnmem.data import load_dataset
    from bnmem.shadow.recipe import norm_configs

    assert {c.norm: c.config for c in chunks} == norm_configs(cfg, load_dataset(data), tmp_path)[0]


def test_a_lens_spec_says_whether_it_takes_a_recipe_as_its_config_does():
    """Fair-arms cells run the lenses whose spec takes a recipe: memorize and lira, as their configs say; a lens
    whose spec and config disagree is refused when registered."""
    import dataclasses

    from bnmem.lenses import registry
    from bnmem.lenses.spec import SPECS

    takes = {name for name, spec in SPECS.items() if spec.takes_recipe}
    assert takes == {"memorize", "lira"}
    for name in SPECS:
        assert registry.get(name).takes_recipe == ("recipe" in registry.get(name).config.model_fields), name
    mem = registry.get("memorize")
    wrong = dataclasses.replace(mem, spec=dataclasses.replace(mem.spec, name="memorize-wrong", takes_recipe=False))
    with pytest.raises(BnmemError, match="takes_recipe"):
        registry.register(wrong)
    assert registry.loaded("memorize-wrong") is None
