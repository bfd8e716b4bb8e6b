"""Lens 3, membership inference: shadow protocol, arrays, views, BN query mode, resume, CLI."""

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
from pydantic import ValidationError
from waiting import wait_until
import torch

from bnmem import io
from bnmem.attacks import keep_matrix
from bnmem.attacks import AttackInputs, evaluate_attacks, evaluate_inputs, lira_statistic
from bnmem.attacks.phi import NpyPhi, phi_from_logits_block
from bnmem.cli import main
from bnmem.config import DataConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.data.views import make_views, shifted
from bnmem.errors import BnmemError
from bnmem.executors import Executor
from bnmem.executors.local import LocalExecutor
from bnmem.lenses.lira import LiraConfig, paired_differences, run_lira
from bnmem.shadow.evaluate import attack_norm
from bnmem.shadow.query import query_batches, query_logits, query_models, query_settings
from bnmem.shadow.training import chunk_dir, load_shadow_models, train_shadow_models

ATTACKS = ("online", "online_fixed_variance", "offline", "offline_fixed_variance", "global_threshold", "loss", "rmia")


def claim_config() -> LiraConfig:
    return LiraConfig(
        data=DataConfig(dataset="digits", label_noise=0.05, seed=0),
        norms=["batch", "none"],
        shadow_models=16,
        chunk_size=8,
        train=TrainConfig(epochs=12),
        views=["identity", "shift"],  # the earlier fixed set (the default now matches training: identity only)
    )


@pytest.fixture(scope="module")
def claim_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lira")
    return out, run_lira(claim_config(), out, progress=False)


def test_bn_leaks_more_membership(claim_run):
    """Paper claim 3 on digits with 5% label noise: online LiRA is clearly stronger on BN models,
    on all examples and on the flipped ones, for the same targets (paired by model index)."""
    _, res = claim_run
    bn, none = res["batch"]["online"], res["none"]["online"]
    # measured (16 models, 12 epochs): all 0.596 vs 0.519, outliers 0.984 vs 0.606
    assert bn["all"]["auc"] > none["all"]["auc"] + 0.04, (bn["all"]["auc"], none["all"]["auc"])
    assert bn["outliers"]["auc"] > none["outliers"]["auc"] + 0.2
    paired = res["paired"]["batch-none"]["online"]
    assert paired["all"]["auc"]["ci"][0] > 0 and paired["outliers"]["auc"]["ci"][0] > 0
    # Outliers are the most exposed examples under BN.
    assert bn["outliers"]["auc"] > bn["inliers"]["auc"]


def test_arrays_on_disk(claim_run):
    out, _ = claim_run
    ds = load_dataset(claim_config().data)
    for norm in ("batch", "none"):
        d = out / norm
        phi = np.load(d / "phi.npy")
        keep = np.load(d / "keep.npy")
        assert phi.dtype == np.float32 and phi.shape == (16, ds.n_train, 5)
        assert np.isfinite(phi).all()
        assert np.load(d / "phi_lo.npy").shape == phi.shape and np.abs(np.load(d / "phi_lo.npy")).max() < 1e-5
        pop = np.load(d / "population_phi.npy")
        assert pop.dtype == np.float32 and pop.shape == (16, ds.x_test.shape[0], 5)
        np.testing.assert_array_equal(np.load(d / "population_labels.npy"), ds.y_test.numpy())
        assert not (d / "logits.npy").exists()  # only with --save-logits
        assert not list((d / "query").glob("*.npy"))  # chunk arrays removed once assembled
        assert keep.dtype == bool and keep.shape == (16, ds.n_train)
        assert (keep.sum(axis=0) == 8).all()  # every example IN for exactly half
        labels = np.load(d / "labels.npy")
        assert np.issubdtype(labels.dtype, np.integer)
        np.testing.assert_array_equal(labels, ds.y_train.numpy())  # the labels the models trained on
        np.testing.assert_array_equal(np.load(d / "is_noisy.npy"), ds.is_noisy)
        np.testing.assert_array_equal(np.load(d / "is_ood.npy"), ds.is_ood)
        assert np.load(d / "is_noisy.npy").dtype == bool
        query = json.loads((d / "query.json").read_text())
        assert query["settings"]["bn_mode"] == "eval"
        assert query["settings"]["views"] == ["identity", "shift(+1,+0)", "shift(-1,+0)", "shift(+0,+1)", "shift(+0,-1)"]


def test_keep_and_seeds_shared_across_norms(claim_run):
    out, res = claim_run
    cfg = claim_config()
    keep_bn, keep_none = np.load(out / "batch" / "keep.npy"), np.load(out / "none" / "keep.npy")
    np.testing.assert_array_equal(keep_bn, keep_none)
    np.testing.assert_array_equal(keep_bn, keep_matrix(16, keep_bn.shape[1], cfg.keep_seed))
    for chunk in cfg.chunks():
        seeds = [io.read_json(chunk_dir(out / n, chunk) / io.DONE)["seeds"] for n in ("batch", "none")]
        assert seeds[0] == seeds[1] == [cfg.model_seed(m) for m in chunk]
    assert res["conditions"]["model_seeds"] == list(range(16))
    # The saved models are the ones that were queried.
    ds = load_dataset(cfg.data)
    model = load_shadow_models(cfg, "batch", out / "batch", ds)[3].eval()
    with torch.no_grad():
        z = model(ds.x_train[:50]).numpy()
    phi = phi_from_logits_block(z[:, None, :], ds.y_train.numpy()[:50])[:, 0]
    np.testing.assert_allclose(phi, np.load(out / "batch" / "phi.npy")[3, :50, 0], rtol=1e-5, atol=1e-5)


def test_streaming_equals_oracle_on_the_digits_run(claim_run):
    """Every attack (with RMIA offline) and subset: the lens's streaming evaluation equals the in-memory
    oracle on the same stored φ and test-split population, to 1e-9."""
    out, _ = claim_run
    for norm in ("batch", "none"):
        d = out / norm
        keep = np.load(d / "keep.npy")
        outliers = np.load(d / "is_noisy.npy") | np.load(d / "is_ood.npy")
        subsets = {"outliers": outliers, "inliers": ~outliers}
        attacks = list(ATTACKS) + ["rmia_offline"]
        stream = attack_norm(d, attacks)
        phi, pop = NpyPhi(d / "phi.npy"), NpyPhi(d / "population_phi.npy")
        oracle = evaluate_inputs(AttackInputs.from_phi(phi.read(0, phi.shape[1]), keep, pop.read(0, pop.shape[1])),
                                 subsets, attacks)
        for attack in attacks:
            for sub in ("all", "outliers", "inliers"):
                np.testing.assert_allclose(stream["metrics"][attack][sub]["auc_per_target"],
                                           oracle["metrics"][attack][sub]["auc_per_target"], rtol=0, atol=1e-9)
        assert stream["settings"]["rmia_population"].startswith("test split")
        assert stream["settings"]["rmia_offline_a_per_target"] == oracle["settings"]["rmia_offline_a_per_target"]


def test_stored_phi_and_legacy_logits_give_the_logits_results(tmp_path):
    """A --save-logits run: φ on disk reproduces φ from the logits (round trip), the attacks on it equal
    the oracle on the logits to 1e-9, and the same directory without φ (a run from before φ storage)
    still evaluates, deriving φ from logits.npy block by block."""
    cfg = small_config(save_logits=True)
    out = tmp_path / "run"
    train_and_query(cfg, out, LocalExecutor(progress=False))
    d = out / "batch"
    logits, keep, labels = np.load(d / "logits.npy"), np.load(d / "keep.npy"), np.load(d / "labels.npy")
    np.testing.assert_allclose(NpyPhi(d / "phi.npy").read(0, logits.shape[1]), lira_statistic(logits, labels),
                               rtol=1e-13, atol=1e-13)
    outliers = np.load(d / "is_noisy.npy") | np.load(d / "is_ood.npy")
    subsets = {"outliers": outliers, "inliers": ~outliers}
    pop = NpyPhi(d / "population_phi.npy")
    oracle = evaluate_inputs(AttackInputs.from_phi(lira_statistic(logits, labels), keep, pop.read(0, pop.shape[1])),
                             subsets, ATTACKS)
    stream = attack_norm(d, ATTACKS)
    legacy_oracle = evaluate_attacks(logits, keep, labels, subsets, ATTACKS)
    for f in ("phi.npy", "phi_lo.npy", "population_phi.npy", "population_phi_lo.npy"):
        (d / f).unlink()
    legacy = attack_norm(d, ATTACKS)
    assert legacy["settings"]["rmia_population"].startswith("legacy")
    for attack in ATTACKS:
        for sub in ("all", "outliers", "inliers"):
            for got, want in ((stream, oracle), (legacy, legacy_oracle)):
                np.testing.assert_allclose(got["metrics"][attack][sub]["auc_per_target"],
                                           want["metrics"][attack][sub]["auc_per_target"], rtol=0, atol=1e-9)


def test_metrics_structure(claim_run):
    out, res = claim_run
    saved = json.loads((out / "metrics.json").read_text())
    assert set(saved) >= {"batch", "none", "accuracy", "paired", "conditions", "subset_sizes", "dataset"}
    assert saved["lens"] == "lira" and saved["schema_version"] == 2
    assert saved["conditions"]["rmia_population"].startswith("test split (n=")
    for norm in ("batch", "none"):
        assert set(saved[norm]) == set(ATTACKS)
        for attack in ATTACKS:
            for sub in ("all", "outliers", "inliers"):
                s = saved[norm][attack][sub]
                for key in ("auc", "auc_std", "balanced_acc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr"):
                    assert key in s
                assert len(s["auc_per_target"]) == 16
        acc = saved["accuracy"][norm]
        for key in ("train_in", "train_out", "test"):
            assert acc[key]["min"] <= acc[key]["mean"] <= acc[key]["max"]
            assert len(acc[key]["per_model"]) == 16
        assert acc["train_in"]["mean"] > acc["test"]["mean"] - 0.05
    paired = saved["paired"]["batch-none"]
    assert set(paired) == set(ATTACKS)
    p = paired["online"]["all"]["auc"]
    assert len(p["per_target"]) == 16 and p["ci"][0] <= p["mean"] <= p["ci"][1]
    per = np.array(saved["batch"]["online"]["all"]["auc_per_target"]) - np.array(saved["none"]["online"]["all"]["auc_per_target"])
    np.testing.assert_allclose(p["per_target"], per)
    cond = saved["conditions"]
    assert cond["bn_mode_at_query"] == "eval" and cond["shadow_models"] == 16 and cond["epochs"] == 12
    assert cond["norms"] == ["batch", "none"] and cond["label_noise"] == 0.05 and len(cond["views"]) == 5
    assert saved["subset_sizes"]["outliers"] == 45
    assert (out / "roc.png").stat().st_size > 10_000


def test_batch_query_mode_changes_bn_answers_only(claim_run, tmp_path):
    out, _ = claim_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    cfg = claim_config().model_copy(update={"query_bn_mode": "batch", "query_batch_size": 100})
    for norm in ("batch", "none"):
        info = query_models(cfg, norm, copy / norm, LocalExecutor(progress=False))
        assert info["settings"]["bn_mode"] == "batch" and info["settings"]["batch_size"] == 100
        assert json.loads((copy / norm / "query.json").read_text())["settings"]["bn_mode"] == "batch"
        eval_logits = np.load(out / norm / "phi.npy")
        batch_logits = np.load(copy / norm / "phi.npy")
        if norm == "batch":
            assert np.abs(eval_logits - batch_logits).max() > 0.1
        else:  # no BN layer: the mode cannot matter
            np.testing.assert_allclose(eval_logits, batch_logits, rtol=1e-5, atol=1e-5)
        assert info["settings"]["batch_order"] == "seeded random permutation" and info["settings"]["batch_seed"] == 0
    # 898 examples in batches of about 100: nine near-equal pieces, none tiny.
    sizes = [len(b) for b in query_batches(898, cfg)]
    assert sum(sizes) == 898 and min(sizes) >= 99 and len(sizes) == 9


def test_batch_mode_batches_are_a_seeded_permutation():
    cfg = claim_config().model_copy(update={"query_bn_mode": "batch", "query_batch_size": 100})
    pieces = query_batches(898, cfg)
    order = np.concatenate(pieces)
    assert sorted(order.tolist()) == list(range(898))  # every example exactly once
    assert not np.array_equal(order, np.arange(898))  # not index order
    assert np.array_equal(order, np.random.default_rng(0).permutation(898))  # the recorded seed's permutation
    again = np.concatenate(query_batches(898, cfg))
    other = np.concatenate(query_batches(898, cfg.model_copy(update={"query_seed": 1})))
    assert np.array_equal(order, again) and not np.array_equal(order, other)
    # The last batch is no longer the dataset's tail (where OOD examples sit).
    assert (pieces[-1] >= 898 - 100).mean() < 0.5
    # eval mode ignores the seed: contiguous pieces in index order.
    assert np.array_equal(np.concatenate(query_batches(898, claim_config())), np.arange(898))
    assert query_settings(claim_config(), load_dataset(claim_config().data))["batch_seed"] is None


def test_batch_mode_logits_come_back_in_example_order():
    """One permuted batch holding every example: BN statistics are those of the whole set, so the
    answer must equal a plain training-mode forward pass in index order."""
    ds = load_dataset(claim_config().data)
    cfg = claim_config().model_copy(update={"query_bn_mode": "batch", "query_batch_size": 200})
    from bnmem.train import seeded_model

    model = seeded_model(cfg.model("batch"), ds, 0)
    x = ds.x_train[:200]
    got = query_logits(model, x, make_views(["identity"], ds.input_shape), cfg)[:, 0]
    model.train()
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_views_and_shift():
    names = [n for n, _ in make_views(["identity", "shift"], (1, 8, 8))]
    assert names == ["identity", "shift(+1,+0)", "shift(-1,+0)", "shift(+0,+1)", "shift(+0,-1)"]
    cifar = make_views(["identity", "flip", "shift"], (3, 32, 32))
    assert len(cifar) == 10 and cifar[1][0] == "flip" and "flip+shift(+2,+0)" in [n for n, _ in cifar]
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    right = shifted(x, 1, 0)
    assert torch.equal(right[..., 1:], x[..., :-1]) and torch.equal(right[..., 0], x[..., 1])  # reflect
    assert torch.equal(shifted(x, 0, -2)[..., :-2, :], x[..., 2:, :])
    assert torch.equal(cifar[1][1](x), x.flip(-1))
    # flip is a label-preserving view only for natural images
    with pytest.raises(BnmemError, match="flip view applies only to"):
        LiraConfig(views="identity,flip")
    assert LiraConfig(data=DataConfig(dataset="cifar10"), views="shift,flip,identity").views == ["identity", "flip", "shift"]
    with pytest.raises(ValidationError, match="unknown view"):
        LiraConfig(views="identity,rotate")


def test_query_views_default_to_the_training_augmentation():
    from bnmem.data import augment

    def names(cfg, shape=(1, 8, 8)):
        return [n for n, _ in cfg.query_views(shape)]

    assert LiraConfig().views == ["augment"] and names(LiraConfig()) == ["identity"]  # no augmentation
    shift = LiraConfig(train=TrainConfig(augment="shift", augment_padding="zero"))
    spec = augment.spec_of(shift.train, (1, 8, 8), "digits")
    assert names(shift) == [n for n, _ in augment.matched_views(spec)] and len(names(shift)) == 9
    x = load_dataset(DataConfig(dataset="digits", train_size=50)).x_train
    for (_, fn), (_, ref) in zip(shift.query_views((1, 8, 8)), augment.matched_views(spec)):
        assert torch.equal(fn(x), ref(x))
    cifar = LiraConfig(data=DataConfig(dataset="cifar10"), train=TrainConfig(augment="crop-flip"))
    assert len(names(cifar, (3, 32, 32))) == 18 and "flip+shift(+4,-4)" in names(cifar, (3, 32, 32))
    # The flag keeps the earlier fixed set.
    assert names(LiraConfig(train=TrainConfig(augment="shift"), views="identity,shift")) == [
        "identity", "shift(+1,+0)", "shift(-1,+0)", "shift(+0,+1)", "shift(+0,-1)"]
    with pytest.raises(ValidationError, match="stands alone"):
        LiraConfig(views="augment,identity")


def test_config_checks():
    for bad in (2, 5, 7, 0):
        with pytest.raises(ValidationError, match="shadow_models\n.*must be even and at least 4"):
            LiraConfig(shadow_models=bad)
    with pytest.raises(BnmemError, match="one base seed"):
        LiraConfig(seeds=[0, 1])
    cfg = LiraConfig(shadow_models=10, chunk_size=4, seeds=[2])
    assert cfg.chunks() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert cfg.model_seed(3) == 2_000_003


def test_paired_bootstrap():
    a, b = [0.7, 0.65, 0.72, float("nan"), 0.69], [0.6, 0.6, 0.61, 0.5, 0.62]
    p = paired_differences(a, b)
    assert p["n"] == 4 and p["mean"] == pytest.approx(np.mean([0.1, 0.05, 0.11, 0.07]))
    assert p["ci"][0] <= p["mean"] <= p["ci"][1] and p["ci"][0] > 0
    again = paired_differences(a, b)
    assert again["ci"] == p["ci"] and again["mean"] == p["mean"]  # seeded
    assert np.isnan(paired_differences([float("nan")], [0.5])["mean"])


# --- resume ------------------------------------------------------------------------------------------

def small_config(**kw) -> LiraConfig:
    return LiraConfig(data=DataConfig(dataset="digits", label_noise=0.05, train_size=300), norms=["batch"],
                      shadow_models=8, chunk_size=2, views=["identity"], train=TrainConfig(epochs=2), **kw)


def train_and_query(cfg: LiraConfig, out, executor: Executor) -> None:
    """The resumable part of run_lira (no attacks, no figure: those are cheap to redo)."""
    train_shadow_models(cfg, "batch", out / "batch", executor)
    query_models(cfg, "batch", out / "batch", executor)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lira_ref")
    train_and_query(small_config(), out, LocalExecutor(progress=False))
    return out


class Interrupted(Exception):
    pass


class RecordingExecutor(Executor):
    """Runs jobs in process; records their specs; raises after ``fail_after`` jobs (a crash)."""

    def __init__(self, fail_after: int | None = None):
        self.fail_after = fail_after
        self.specs: list = []

    def map(self, fn, specs, desc="jobs", resources=None):
        results = []
        for spec in specs:
            # specs must pickle (a worker process or a Ray worker receives them pickled) and come back equal
            assert pickle.loads(pickle.dumps(spec)) == spec
            if fn.__name__ == "train_shadow_chunk":
                if self.fail_after is not None and len(self.specs) >= self.fail_after:
                    raise Interrupted()
                self.specs.append(spec)
            results.append(fn(spec))
        return results


def test_resume_after_crash_trains_only_missing_chunks(reference_run, tmp_path):
    cfg, out = small_config(), tmp_path / "run"
    with pytest.raises(Interrupted):
        train_and_query(cfg, out, RecordingExecutor(fail_after=2))
    done = [c for c in cfg.chunks() if io.is_done(chunk_dir(out / "batch", c))]
    assert done == cfg.chunks()[:2]
    before = {p: p.stat().st_mtime_ns for c in done for p in chunk_dir(out / "batch", c).iterdir()}
    again = RecordingExecutor()
    train_and_query(cfg, out, again)
    assert [list(s.models) for s in again.specs] == cfg.chunks()[2:]
    assert {p: p.stat().st_mtime_ns for p in before} == before  # finished chunks untouched
    for name in ("phi", "population_phi", "keep", "labels"):
        a, b = np.load(reference_run / "batch" / f"{name}.npy"), np.load(out / "batch" / f"{name}.npy")
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name  # bitwise
    # A third run finds everything done and trains nothing.
    third = RecordingExecutor()
    train_and_query(cfg, out, third)
    assert third.specs == []


def test_resume_after_sigkill(reference_run, tmp_path):
    out = tmp_path / "killed"
    args = ["lira", "--norms", "batch", "--shadow-models", "8", "--chunk-size", "2", "--epochs", "2",
            "--label-noise", "0.05", "--train-size", "300", "--views", "identity", "--quiet", "--save-logits",
            "--out", str(out)]
    code = f"import sys; from bnmem.cli import main; sys.exit(main({args!r}))"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    first = out / "batch" / "shadow" / "models_0000-0001" / io.DONE
    wait_until(first.exists, "the first shadow chunk's DONE", proc=proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.exists()
    finished = sorted(p.parent for p in (out / "batch" / "shadow").glob("*/DONE"))
    assert len(finished) < 4, "the run finished before it could be killed"
    before = {p: p.stat().st_mtime_ns for d in finished for p in d.iterdir()}
    assert main(args) == 0
    assert {p: p.stat().st_mtime_ns for p in before} == before
    a, b = np.load(reference_run / "batch" / "phi.npy"), np.load(out / "batch" / "phi.npy")
    assert a.tobytes() == b.tobytes()
    logits = np.load(out / "batch" / "logits.npy")  # --save-logits keeps them, and φ is theirs
    np.testing.assert_allclose(lira_statistic(logits, np.load(out / "batch" / "labels.npy")).astype(np.float32), b)


def test_rerun_with_other_config_is_refused(reference_run):
    with pytest.raises(BnmemError, match="different configuration"):
        train_shadow_models(small_config(keep_seed=1), "batch", reference_run / "batch", LocalExecutor(progress=False))


# --- CLI -----------------------------------------------------------------------------------------------

def one_error_line(err: str) -> str:
    lines = [l for l in err.strip().splitlines() if l.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("bnmem: error:"), err
    return lines[0]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--shadow-models", "5"], "--shadow-models: must be even and at least 4, got 5"),
        (["--shadow-models", "2"], "--shadow-models: must be even and at least 4, got 2"),
        (["--views", "identity,flip"], "flip view applies only to"),
        (["--query-bn-mode", "train"], "--query-bn-mode: Input should be 'eval' or 'batch'"),
        (["--seeds", "0,1,2"], "one base seed"),
        (["--norms", "batch,weird"], "unknown norm 'weird'"),
    ],
)
def test_cli_bad_input_one_line(tmp_path, capsys, args, fragment):
    code = main(["lira", "--epochs", "1", "--quiet", "--out", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert fragment in one_error_line(err)
    assert not (tmp_path / "o" / "batch" / "shadow").exists()  # failed before any training


def test_identity_only_block_reruns_the_attacks_on_the_identity_view(claim_run):
    out, res = claim_run
    block = res["identity_only"]
    direct = attack_norm(out / "batch", views=[0])["metrics"]
    assert block["batch"]["online"]["all"]["auc_per_target"] == direct["online"]["all"]["auc_per_target"]
    assert block["batch"]["online"]["all"]["auc"] != res["batch"]["online"]["all"]["auc"]  # 1 view, not 5
    assert len(block["paired"]["batch-none"]["online"]["all"]["auc"]["per_target"]) == 16
