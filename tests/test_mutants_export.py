"""The tidy export and the confirmatory seeds against expectations written out by hand (issue 39).

The tidy table (:mod:`bnmem.report.tidy`, :mod:`bnmem.report.readers`) is built from in-memory results
(no training, no files): every row of every reader is listed literally, so an epoch counted from 0, a list with
one NaN dropped or kept wrongly, a column moved or a condition taken from the wrong place fails. The seeds of a
confirmatory run (:mod:`bnmem.study.confirmatory`) are recomputed from the documented rule (``RULE``) with
hashlib alone, through the planned jobs too (which seed plays which role).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from bnmem.report import readers, tidy
from bnmem.report.rundata import CellOutput, LensOutput, RunData

NAN = float("nan")


def _rows(rows, columns=tidy.MEASURE_COLUMNS) -> list[tuple]:
    """Rows as tuples in the columns' order, NaN as the text 'nan' (NaN != NaN)."""
    def cell(v):
        return "nan" if isinstance(v, float) and math.isnan(v) else v
    return [tuple(cell(r[k]) for k in columns) for r in rows]


def _lens(kind, data):
    return LensOutput(kind=kind, path=Path("."), data=data)


# ------------------------------------------------------------------ the readers: epochs from 1, NaN kept

MEMORIZE = {"conditions": {"norms": ["batch", "none", "group"]},
            "batch": {"per_seed": {"0": {"clean_acc": [0.5, 0.75], "noisy_acc": [0.25, NAN],
                                         "ood_acc": [None, None], "loss": [1.0], "val_acc": "n/a",
                                         "train_acc": [None, 0.625]},
                                   "7": [1, 2]}},
            "none": {"per_seed": {"5": "not a record", "1": {"loss": [0.5], "test_acc": [0.875],
                                                            "noisy_orig_acc": [math.inf, 0.125]}}},
            "group": {"per_seed": "missing"}}


def test_memorize_rows_epochs_start_at_one_and_a_nan_is_a_row():
    assert _rows(readers.memorize_rows(_lens("memorize", MEMORIZE))) == [
        ("memorize", "batch", "", "seed", 0, "clean", "accuracy", 1, 0.5),
        ("memorize", "batch", "", "seed", 0, "clean", "accuracy", 2, 0.75),
        ("memorize", "batch", "", "seed", 0, "noisy", "accuracy", 1, 0.25),
        ("memorize", "batch", "", "seed", 0, "noisy", "accuracy", 2, "nan"),
        ("memorize", "batch", "", "seed", 0, "train", "accuracy", 2, 0.625),  # epoch 1 not measured: no row
        ("memorize", "none", "", "seed", 1, "test", "accuracy", 1, 0.875),
        ("memorize", "none", "", "seed", 1, "noisy", "accuracy_original_label", 1, "nan"),
        ("memorize", "none", "", "seed", 1, "noisy", "accuracy_original_label", 2, 0.125),
    ]
    assert readers.CURVE_KEYS == {
        "clean_acc": ("clean", "accuracy"), "noisy_acc": ("noisy", "accuracy"),
        "noisy_orig_acc": ("noisy", "accuracy_original_label"), "ood_acc": ("ood", "accuracy"),
        "test_acc": ("test", "accuracy"), "train_acc": ("train", "accuracy"), "val_acc": ("validation", "accuracy")}
    assert list(readers.memorize_rows(_lens("memorize", {"batch": MEMORIZE["batch"]}))) == []  # no norms listed


LIRA = {"conditions": {"norms": ["batch", "none"]},
        "batch": {"online": {"all": {"auc": 0.65, "auc_ci": [0.55, 0.75], "tpr_per_target": 0.5,
                                     "auc_per_target": [0.6, NAN, 0.7],
                                     "tpr_at_1pct_fpr_per_target": [NAN, NAN, NAN], "per_target": 3},
                             "outliers": "absent",
                             "noisy": {"eps_lb_per_target": [NAN, 0.25], "auc_per_target": [NAN]}},
                  "meta": 3},
        "none": {"loss": {"all": {"auc_per_target": [0.5, None]}}}}


def test_lira_rows_keep_a_list_with_one_nan_and_drop_an_all_nan_one():
    assert _rows(readers.lira_rows(_lens("lira", LIRA))) == [
        ("lira", "batch", "online", "target", 0, "all", "auc", None, 0.6),
        ("lira", "batch", "online", "target", 1, "all", "auc", None, "nan"),
        ("lira", "batch", "online", "target", 2, "all", "auc", None, 0.7),
        ("lira", "batch", "online", "target", 0, "noisy", "eps_lb", None, "nan"),
        ("lira", "batch", "online", "target", 1, "noisy", "eps_lb", None, 0.25),
        ("lira", "none", "loss", "target", 0, "all", "auc", None, 0.5),
        ("lira", "none", "loss", "target", 1, "all", "auc", None, "nan"),
    ]


def test_gradnorms_rows_by_checkpoint_epoch():
    data = {"conditions": {"norms": ["batch"]},
            "batch": {"eval": {"epoch_10": {"per_seed": {"0": {"median_clean": 2.5}}},
                               "epoch_2": {"per_seed": {"0": {"median_clean": 1.5, "median_noisy": None,
                                                              "mean_clean": 9.0, "median_all": 3.0},
                                                        "3": {"median_ood": 4.0}}},
                               "final": {"per_seed": {"0": {"median_clean": 7.0}}}},
                      "batch_mode": "not a block"}}
    assert _rows(readers.gradnorms_rows(_lens("gradnorms", data))) == [
        ("gradnorms", "batch", "eval", "seed", 0, "clean", "median_grad_norm", 2, 1.5),
        ("gradnorms", "batch", "eval", "seed", 0, "all", "median_grad_norm", 2, 3.0),
        ("gradnorms", "batch", "eval", "seed", 3, "ood", "median_grad_norm", 2, 4.0),
        ("gradnorms", "batch", "eval", "seed", 0, "clean", "median_grad_norm", 10, 2.5),
    ]


def test_gamma_sigma_rows_at_the_last_epoch():
    data = {"conditions": {"epochs": 5},
            "final": {"batch": "not layers", "running": {"norm1": {"per_seed": {"0": {"median_ratio": 1.25, "frac_above_1": 0.5},
                                                         "1": {"median_ratio": None, "frac_above_1": 0.0},
                                                         "2": "bad"}},
                                  "norm2": None}}}
    assert _rows(readers.gamma_sigma_rows(_lens("gamma-sigma", data))) == [
        ("gamma-sigma", "batch", "running", "seed", 0, "norm1", "median_ratio", 5, 1.25),
        ("gamma-sigma", "batch", "running", "seed", 0, "norm1", "frac_above_1", 5, 0.5),
        ("gamma-sigma", "batch", "running", "seed", 1, "norm1", "frac_above_1", 5, 0.0),
    ]
    data["conditions"]["norm"] = "group"
    assert {r["norm"] for r in readers.gamma_sigma_rows(_lens("gamma-sigma", data))} == {"group"}


def test_mitigate_rows_curves_and_one_auc_per_variant_and_attack():
    data = {"variants": ["batch", "none", "batch+gs1", "missing"],
            "batch": {"norm": "batch", "per_seed": {"0": {"clean_acc": [0.5]}},
                      "lira": {"attacks": {"online": {"all": {"auc": 0.6}, "noisy": {"auc": None}, "x": 3},
                                           "loss": None}}},
            "batch+gs1": {"norm": "batch", "per_seed": {"0": {"train_acc": [0.25, 0.5]}},
                          "lira": {"attack": "online", "all": {"auc": 0.55}}},
            "none": {"per_seed": {"0": {"clean_acc": [0.875]}}, "lira": None},
            "group": {"per_seed": {"0": {"clean_acc": [0.9]}}},  # not a listed variant
            "x": {"variants": 1}}
    assert _rows(readers.mitigate_rows(_lens("mitigate", data))) == [
        ("mitigate", "batch", "batch", "seed", 0, "clean", "accuracy", 1, 0.5),
        ("mitigate", "batch", "batch online", "shadow_models", None, "all", "auc", None, 0.6),
        ("mitigate", "none", "none", "seed", 0, "clean", "accuracy", 1, 0.875),
        ("mitigate", "batch", "batch+gs1", "seed", 0, "train", "accuracy", 1, 0.25),  # the variant's norm
        ("mitigate", "batch", "batch+gs1", "seed", 0, "train", "accuracy", 2, 0.5),
        ("mitigate", "batch", "batch+gs1 online", "shadow_models", None, "all", "auc", None, 0.55),
    ]
    no_lira = {"variants": ["v"], "v": {"per_seed": {}, "lira": "off"}}
    assert list(readers.mitigate_rows(_lens("mitigate", no_lira))) == []


def test_generic_rows_every_number_with_its_path_and_position():
    data = {"lens": "custom", "schema_version": 2, "conditions": {"a": 1}, "config": {"b": 2}, "settings": 3,
            "score": 0.5, "flag": True, "name": "text",
            "per": {"list": [1, NAN, "x", 2.5], "nested": [[1, 2], {"b": 3}], "config": 4}}
    assert _rows(readers.generic_rows(_lens("custom", data))) == [
        ("custom", None, None, None, None, None, "score", None, 0.5),
        ("custom", None, None, "index", 0, None, "per.list", None, 1.0),
        ("custom", None, None, "index", 1, None, "per.list", None, "nan"),
        ("custom", None, None, "index", 3, None, "per.list", None, 2.5),
        ("custom", None, None, "index", 0, None, "per.nested[0]", None, 1.0),
        ("custom", None, None, "index", 1, None, "per.nested[0]", None, 2.0),
        ("custom", None, None, None, None, None, "per.nested[1].b", None, 3.0),
        ("custom", None, None, None, None, None, "per.config", None, 4.0),
    ]


# ------------------------------------------------------------------ the table: conditions, settings, columns

def _run() -> RunData:
    mem = {"conditions": {"norms": ["batch"]}, "batch": {"per_seed": {"0": {"clean_acc": [0.5, NAN]}}}}
    lira = {"conditions": {"norms": ["batch"]},
            "batch": {"online": {"all": {"auc_per_target": [0.625]}}}}
    flip = {"dataset": "digits", "arch": "lenet", "label_noise": 0.1, "ood": 0.0, "ood_source": "noise"}
    cells = [
        CellOutput("digits-lenet-flip0.1-r0", {**flip, "replicate": 0, "seeds": [0]},
                   {"memorize": _lens("memorize", mem), "lira": _lens("lira", lira)}),
        CellOutput("digits-lenet-flip0.1-r1", {**flip, "replicate": 1, "seeds": [1000]},
                   {"memorize": _lens("memorize", mem)}),
        # the OOD source applies (ood > 0); the recipe comes from the lens; conditions the cell lacks from the lens
        CellOutput("digits-lenet-ood0.2", {"dataset": "digits", "label_noise": None, "ood": 0.2,
                                           "ood_source": "heldout-classes"},
                   {"memorize": _lens("memorize", {**mem, "conditions": {"norms": ["batch"], "arch": "mlp",
                                                                         "label_noise": 0.0, "recipe": "per-norm"}}),
                    "theory": _lens("theory", {"steps": [1, 2, 3]}),
                    "custom": _lens("custom", {"x": 7})}),
        # a setting that differs only where the label does not look: the label gets its position
        CellOutput("digits-lenet-flip0.1-v", {**flip, "val_fraction": 0.2}, {"custom": _lens("custom", {"y": 1})}),
    ]
    return RunData(root=Path("."), layout="study", study="s", cells=cells, theory=None, environment=None)


def test_tidy_rows_conditions_settings_and_replicates_by_hand():
    flip_label = "digits · lenet · label noise 0.1"
    head0 = {"cell": "digits-lenet-flip0.1-r0", "setting": flip_label, "replicate": 0, "dataset": "digits",
             "arch": "lenet", "label_noise": 0.1, "ood": 0.0, "ood_source": None, "recipe": "shared"}
    head1 = {**head0, "cell": "digits-lenet-flip0.1-r1", "replicate": 1}
    head2 = {"cell": "digits-lenet-ood0.2", "setting": "digits · ? · OOD 0.2 (heldout-classes)", "replicate": 0,
             "dataset": "digits", "arch": "mlp", "label_noise": 0.0, "ood": 0.2, "ood_source": "heldout-classes",
             "recipe": "per-norm"}
    head3 = {**head0, "cell": "digits-lenet-flip0.1-v", "setting": f"{flip_label} #2"}
    mem = [{"lens": "memorize", "norm": "batch", "method": "", "unit": "seed", "unit_id": 0, "subset": "clean",
            "metric": "accuracy", "epoch": e, "value": v} for e, v in ((1, 0.5), (2, NAN))]
    want = [*({**head0, **r} for r in mem),
            {**head0, "lens": "lira", "norm": "batch", "method": "online", "unit": "target", "unit_id": 0,
             "subset": "all", "metric": "auc", "epoch": None, "value": 0.625},
            *({**head1, **r} for r in mem),
            *({**head2, **r} for r in mem),
            # the custom lens has no conditions of its own: the cell's alone (a None there stays None)
            {**head2, "arch": None, "label_noise": None, "recipe": "shared", "lens": "custom", "norm": None,
             "method": None, "unit": None, "unit_id": None, "subset": None,
             "metric": "x", "epoch": None, "value": 7.0},
            {**head3, "lens": "custom", "norm": None, "method": None, "unit": None, "unit_id": None, "subset": None,
             "metric": "y", "epoch": None, "value": 1.0}]
    got = tidy.tidy_rows(_run())
    assert [list(r) for r in got] == [list(tidy.COLUMNS)] * len(want)  # every column, in the documented order
    assert _rows(got, tidy.COLUMNS) == _rows(want, tidy.COLUMNS)


def test_setting_labels_name_a_per_norm_recipe_only():
    flip = {"dataset": "digits", "arch": "lenet", "label_noise": 0.1}
    run = RunData(root=Path("."), layout="study", study="s", theory=None, environment=None, cells=[
        CellOutput("a", {**flip, "recipe": "shared"}, {"custom": _lens("custom", {"v": 1})}),
        CellOutput("b", {**flip, "recipe": "per-norm"}, {"custom": _lens("custom", {"v": 2})})])
    assert [(r["setting"], r["recipe"]) for r in tidy.tidy_rows(run)] == [
        ("digits · lenet · label noise 0.1", "shared"), ("digits · lenet · label noise 0.1 · per-norm recipe", "per-norm")]


def test_columns_are_the_documented_ones_in_order():
    assert tidy.COLUMNS == ("cell", "setting", "replicate", "dataset", "arch", "label_noise", "ood", "ood_source",
                            "recipe", "lens", "norm", "method", "unit", "unit_id", "subset", "metric", "epoch",
                            "value")
    assert tidy.reader_of("theory") is None and tidy.reader_of("custom") is readers.generic_rows
    assert tidy.reader_of("memorize") is readers.memorize_rows and tidy.reader_of("lira") is readers.lira_rows


def test_load_types_and_not_applicable_text(monkeypatch):
    pd = pytest.importorskip("pandas")
    seen = {}

    def fake_load_run(run_dir, progress=False):
        seen["args"] = (run_dir, progress)
        return _run()

    monkeypatch.setattr(tidy, "load_run", fake_load_run)
    tidy.load("quiet")
    assert seen["args"] == ("quiet", False)  # no progress bar unless asked
    df = tidy.load("somewhere", progress=True)
    assert seen["args"] == ("somewhere", True)
    assert list(df.columns) == list(tidy.COLUMNS) and len(df) == 9
    for col in ("replicate", "unit_id", "epoch"):
        assert str(df[col].dtype) == "Int64", col
    for col in ("label_noise", "ood", "value"):
        assert df[col].dtype == "float64", col
    assert df["ood_source"].tolist() == ["-"] * 5 + ["heldout-classes"] * 3 + ["-"]
    # memorize's method is "" (no variant), the generic reader's None: both read "-"
    assert df["method"].tolist() == ["-", "-", "online", "-", "-", "-", "-", "-", "-"]
    assert df["epoch"].tolist()[:2] == [1, 2] and df["epoch"].isna().tolist() == [False, False, True, False, False,
                                                                                   False, False, True, True]
    assert df["value"].isna().tolist() == [False, True, False, False, True, False, True, False, False]
    assert df["unit_id"].isna().tolist() == [False] * 7 + [True, True]
    assert df["replicate"].tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 0]
    assert df["label_noise"].tolist()[5:7] == [0.0, 0.0] and math.isnan(df["label_noise"][7])
    assert df["ood"].tolist()[5] == 0.2 and df["recipe"].tolist()[5:8] == ["per-norm", "per-norm", "shared"]
    assert pd.api.types.is_object_dtype(df["ood_source"]) or pd.api.types.is_string_dtype(df["ood_source"])


def test_a_run_without_rows_is_an_empty_table_with_every_column(monkeypatch):
    only_theory = RunData(root=Path("."), layout="study", study="s", theory=None, environment=None,
                          cells=[CellOutput("c", {"dataset": "digits"}, {"theory": _lens("theory", {"x": 1})})])
    monkeypatch.setattr(tidy, "load_run", lambda run_dir, progress=False: only_theory)
    df = tidy.load("r")
    assert list(df.columns) == list(tidy.COLUMNS) and len(df) == 0


def test_results_load_is_the_tidy_table(monkeypatch):
    import bnmem.results as results

    monkeypatch.setattr(tidy, "load_run", lambda run_dir, progress=False: _run())
    calls = []
    real = tidy.load
    monkeypatch.setattr(tidy, "load", lambda run_dir, progress: calls.append((run_dir, progress)) or real(run_dir))
    df = results.load("r")
    assert calls == [("r", True)] and len(df) == 9 and results.COLUMNS == tidy.COLUMNS


# ------------------------------------------------------------------ the confirmatory seeds and their roles

def _seed(key: str, *parts: object, bound: int = 2**31) -> int:
    text = "bnmem-confirmatory:" + key + "".join(f":{p}" for p in parts)
    return int(hashlib.sha256(text.encode()).hexdigest()[:16], 16) % bound


def test_seed_key_current_key_and_study_seed(monkeypatch):
    import bnmem.analysis_plan as ap
    import bnmem.provenance as prov
    from bnmem.study import confirmatory as c

    assert c.seed_key("p" * 64, "s" * 64) == "p" * 64 + ":" + "s" * 64
    monkeypatch.setattr(ap, "plan_sha256", lambda: "aa")
    monkeypatch.setattr(prov, "source_sha256", lambda: "bb")
    assert c.current_key() == "aa:bb"
    assert c.study_seed("aa:bb", "theory") == _seed("aa:bb", "study-lens", "theory")
    assert c.derive("aa:bb", "x", 3) == _seed("aa:bb", "x", 3) and c.SEED_BOUND == 2**31
    assert c.derive("aa:bb", "x", bound=7) == _seed("aa:bb", "x", bound=7)
    assert c.MODEL_SEED_BOUND == 2**22


@pytest.mark.parametrize("key", ["cd" * 32, "00" * 32])  # "00...": one model needs three rehashes
def test_colliding_model_seeds_are_rehashed_with_an_attempt_counter(monkeypatch, key):
    import bnmem.provenance as prov
    from bnmem.study import confirmatory as c

    monkeypatch.setattr(prov, "MODEL_SEED_BOUND", 8)  # 8 values for 6 models: collisions are certain (the
    # derivation lives in bnmem.provenance, torch-free, so that bnmem verify can recompute it)
    used, want = set(), []
    for k in range(2):
        for j in range(3):
            attempt, seed = 0, _seed(key, "model", k, j, bound=8)
            while seed in used:
                attempt += 1
                seed = _seed(key, "model", k, j, attempt, bound=8)
            used.add(seed)
            want.append(seed)
    reps = c.replicate_seeds(key, 2, 3)
    assert [m for r in reps for m in r.models] == want and len(set(want)) == 6
    assert want != [_seed(key, "model", k, j, bound=8) for k in range(2) for j in range(3)]  # a rehash happened
    assert reps[1].data == _seed(key, "data", 1) and reps[1].keep == _seed(key, "keep", 1)
    assert reps[1].query == _seed(key, "query", 1)
    assert c.replicate_seeds(key, 0, 3) == []


def test_each_seed_plays_its_role_in_the_planned_jobs(tmp_path):
    import yaml

    from bnmem.study import load_study, build_jobs

    doc = {"name": "roles", "data": {"dataset": "digits", "train_size": 120},
           "train": {"epochs": 1, "batch_size": 32},
           "grid": {"norms": ["batch", "none"], "seeds": [0, 1], "replicates": 2,
                    "outliers": [{"label_noise": 0.05}]},
           "lenses": {"memorize": {}, "lira": {"shadow_models": 4}, "theory": {"steps": 5, "plot": False}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    key = "ef" * 32
    _, jobs = build_jobs(load_study(path), key)
    seen = set()
    for j in jobs:
        if j.lens == "theory":
            assert j.config.seed == _seed(key, "study-lens", "theory")
            seen.add("theory")
            continue
        k = int(j.id.split("/")[0][-1])
        c = j.work.trains if j.lens == "recipe-selection" else j.config  # a selection's data is its plan's
        assert c.data.seed == _seed(key, "data", k), j.id
        models = [_seed(key, "model", k, i, bound=2**22) for i in range(2)]
        # LiRA and the fair-arms recipe selection: the first seed
        assert list(j.work.seeds if j.lens == "recipe-selection" else j.config.seeds) == (models[:1] if j.lens in ("lira", "recipe-selection") else models), j.id
        if j.lens == "lira":
            assert (j.config.keep_seed, j.config.query_seed) == (_seed(key, "keep", k), _seed(key, "query", k))
        seen.add((j.lens, k))
    assert {("memorize", 0), ("memorize", 1), ("lira", 0), ("lira", 1), "theory"} <= seen


def test_require_clean_checkout_and_log_attempt(monkeypatch, tmp_path):
    import bnmem.provenance as prov
    from bnmem.errors import BnmemError
    from bnmem.study import confirmatory as c

    state = SimpleNamespace(refusal=lambda: "", commit="c0ffee", root=tmp_path)
    monkeypatch.setattr(prov, "checkout_state", lambda: state)
    assert c.require_clean_checkout() is state
    monkeypatch.setattr(prov, "checkout_state", lambda: SimpleNamespace(refusal=lambda: "modified: a.py"))
    with pytest.raises(BnmemError, match="^modified: a.py$"):
        c.require_clean_checkout()

    logged = []
    monkeypatch.setattr(prov, "append_attempt",
                        lambda root, entry, copy=None: logged.append((root, entry, copy)) or root / "log")
    monkeypatch.setattr(prov, "utc_now", lambda: "NOW")
    monkeypatch.setattr(prov, "file_sha256", lambda p: f"sha({Path(p).name})")
    monkeypatch.setattr(prov, "tree_sha", lambda root: f"tree({root == tmp_path})")
    monkeypatch.setattr(c, "host", lambda: {"cpus": 2, "load": [0.5, 0.25, 0.125]})
    record = {"started": "T0", "plan_version": "5.0", "plan_sha256": "P", "source_sha256": "S", "commit": "abc",
              "seed_derivation": 2}
    entry = c.log_attempt(state, record, False, "conf", tmp_path / "run", lenses=["memorize"])
    assert logged[-1] == (tmp_path, entry, tmp_path / "run") and entry == {
        "kind": prov.START, "time": "T0", "started": "T0", "study": "conf", "study_file": None, "study_sha256": None,
        "plan_version": "5.0", "plan_sha256": "P", "source_sha256": "S", "seed_derivation": 2, "commit": "c0ffee",
        "tree": "tree(True)", "started_at_commit": "abc", "out": str(tmp_path / "run"), "executor": "local",
        "workers": 1, "lenses": ["memorize"], "cpus": 2, "load": [0.5, 0.25, 0.125]}
    ex = SimpleNamespace(name="ray", workers=6)
    c.log_attempt(state, record, True, "conf", "out", study_file=tmp_path / "s.yaml", executor=ex)
    entry = logged[-1][1]
    assert (entry["kind"], entry["time"], entry["started"]) == (prov.RESUME, "NOW", "T0")
    assert (entry["study_file"], entry["study_sha256"]) == (str(tmp_path / "s.yaml"), "sha(s.yaml)")
    assert (entry["executor"], entry["workers"]) == ("ray", 6)
    c.log_attempt(state, record, True, "conf", "out", executor=object())  # an executor that names neither
    assert (logged[-1][1]["executor"], logged[-1][1]["workers"]) == (None, None)
    assert prov.START != prov.RESUME


def test_derivation_2_seed_key_and_the_resolved_study_hash_are_canonical_text():
    """The published seeds hang on these exact texts: the name as JSON with non-ASCII kept, and the resolved
    study as JSON with sorted keys, no spaces and non-ASCII kept (hashed here from hand-written text)."""
    from bnmem.provenance import resolved_sha256, seed_key

    assert seed_key("p", "s", "étude", "f", "r") == 'v2:p:s:f:r:"étude"'
    text = '{"a":[1,"é"],"b":{"c":null}}'
    assert resolved_sha256({"b": {"c": None}, "a": [1, "é"]}) == hashlib.sha256(text.encode("utf-8")).hexdigest()
