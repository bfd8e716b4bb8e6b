"""``bnmem audit`` / ``bnmem.audit``: a user's own model files and tensors, outputs and error lines."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import bnmem
from bnmem.shadow.copies import fresh_copy
from bnmem.auditing.api import audit
from bnmem.formatting import eps_value
from bnmem.cli import main
from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.measure.gradnorms import per_sample_grad_norms
from bnmem.train import seeded_model, train_model

NOISE = 0.05


@pytest.fixture(scope="module")
def ds():
    return load_dataset(DataConfig(dataset="digits", label_noise=NOISE))


@pytest.fixture(scope="module")
def files(tmp_path_factory, ds):
    """Model files a user might hand over, written the way a user would write them."""
    d = tmp_path_factory.mktemp("models")
    lenet = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0)
    train_model(lenet, ds, TrainConfig(epochs=8), 0, measure=False, progress=False)
    lenet.eval()
    torch.save(lenet, d / "lenet.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(lenet), d / "lenet_script.pt")
    torch.save(lenet.state_dict(), d / "state_dict.pt")
    torch.save({"model": lenet.state_dict(), "epoch": 8}, d / "checkpoint.pt")
    (d / "random.pt").write_bytes(np.random.default_rng(0).bytes(4096))
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)), d / "plain.pt")
    torch.save(nn.Sequential(nn.Conv2d(3, 6, 3), nn.Flatten(), nn.Linear(216, 10)), d / "rgb.pt")
    torch.save(nn.Sequential(nn.Flatten(), nn.Linear(64, 5)), d / "five.pt")
    return {"dir": d, "lenet_model": lenet, **{p.stem: p for p in d.glob("*.pt")}}


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["audit", "--quiet", *args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("bnmem: error:"), err
    return lines[0]


def expected_indicator_level(res: dict) -> str:
    """The explaining signals' highest level recomputed from the numbers in audit.json by the documented rules.

    Each finding's level comes from its own threshold (γ/σ fraction, top-k enrichment, train-test gap,
    fitted flipped/OOD labels); the indicator level is the highest.
    """
    from bnmem.auditing import findings as rules

    def band(v, moderate, elevated, strict_moderate=False):
        if v >= elevated:
            return 2
        return 1 if (v > moderate if strict_moderate else v >= moderate) else 0

    levels = [0]
    gs = res.get("gamma_sigma") or {}
    summary = (gs.get("running") or {}).get("summary") or (gs.get("batch") or {}).get("summary")
    if any(r["batchnorm"] for r in res["norm_layers"]) and summary and summary.get("frac_above_1") is not None:
        levels.append(band(summary["frac_above_1"], rules.GS_MODERATE, rules.GS_ELEVATED))
    masks = res["gradient_norms"].get("masks")
    if masks and masks.get("top_k_fraction_flagged") is not None:
        levels.append(band(masks.get("enrichment") or 0.0, 1.5, rules.ENRICH_ELEVATED, strict_moderate=True))
    acc = res["accuracy"]
    if acc.get("gap") is not None:
        levels.append(band(acc["gap"], rules.GAP_MODERATE, rules.GAP_ELEVATED))
    levels += [band(acc[k], 0.2, 0.5) for k in ("noisy_acc", "ood_acc") if acc.get(k) is not None]
    return ("low", "moderate", "elevated")[max(levels)]


def expected_risk_level(res: dict) -> str:
    """The audit's level recomputed from audit.json: "not measured" without shadow models, "not assessed" when the
    copies miss the model's training accuracy by more than 10 points, else from the membership attacks: per group
    the headline attack with the highest lower AUC bound, both ends of its interval banded at 0.55 / 0.60, the
    highest of each end over the groups, said as a range when they differ."""
    assert res["risk"]["indicator_level"] == expected_indicator_level(res)
    if not res.get("membership"):
        return "not measured"
    if abs(res["membership"]["shadow_accuracy"]["train_in"] - res["accuracy"]["train_acc"]) > 0.10:
        return "not assessed"
    leak = res["membership"]["leakage"]
    groups = {g for subs in leak.values() for g in subs} & {"all", "outliers", "rare", "most_exposed"}
    names = ("low", "moderate", "elevated")

    def band(v):
        return 2 if v >= 0.60 else 1 if v >= 0.55 else 0

    ends = [max((leak[a][g]["ci"]["auc"] for a in leak if g in leak[a]), key=lambda ci: ci[0]) for g in groups]
    lower, upper = max(band(lo) for lo, _ in ends), max(band(hi) for _, hi in ends)
    return names[lower] if lower == upper else f"{names[lower]} to {names[upper]}"


def test_pickled_bn_model(files, tmp_path, capsys, ds):
    out = tmp_path / "a"
    code, stdout, err = run_cli(capsys, "--model", str(files["lenet"]), "--label-noise", str(NOISE), "--out", str(out))
    assert code == 0, err
    assert "## Risk:" in stdout and "BN present (4 layers)" in stdout
    res = json.loads((out / "audit.json").read_text())
    assert (out / "audit.md").read_text().startswith("# bnmem audit: LeNet (nn.Module")
    assert [r["type"] for r in res["norm_layers"]] == ["BatchNorm2d", "BatchNorm2d", "BatchNorm1d", "BatchNorm1d"]
    running = res["gamma_sigma"]["running"]
    assert running["summary"]["n_channels"] == 6 + 16 + 120 + 84
    # |γ|/σ with σ = sqrt(running_var + eps), checked against the layer itself.
    bn = files["lenet_model"].norm3
    want = (bn.weight.abs() / torch.sqrt(bn.running_var + bn.eps)).detach().double().numpy()
    np.testing.assert_allclose(running["layers"]["norm3"]["ratio"], want, rtol=1e-6)
    assert running["layers"]["norm3"]["frac_above_1"] == pytest.approx(float((want > 1).mean()))
    assert "batch" in res["gamma_sigma"]
    gn = res["gradient_norms"]
    assert gn["definition"] == "eval" and gn["n_measured"] == ds.n_train and len(gn["top_k"]) == 20
    norms = [r["grad_norm"] for r in gn["top_k"]]
    assert norms == sorted(norms, reverse=True)
    oracle = per_sample_grad_norms(files["lenet_model"], ds.x_train, ds.y_train).norms
    assert norms[0] == pytest.approx(float(np.nanmax(oracle)), rel=1e-9)
    assert np.load(out / "gradient_norms.npy").shape == (ds.n_train,)
    flagged = sum(r["flagged"] == "noisy" for r in gn["top_k"])
    assert gn["masks"]["top_k_flagged"] == flagged and gn["masks"]["fraction_flagged_overall"] == pytest.approx(
        ds.is_noisy.mean())
    acc = res["accuracy"]
    assert 0.5 < acc["train_acc"] <= 1 and acc["noisy_acc"] is not None and acc["gap"] == pytest.approx(
        acc["train_acc"] - acc["test_acc"])
    assert res["membership"] is None and res["risk"]["level"] == expected_risk_level(res) == "not measured"


def test_torchscript_model_matches_pickled(files, tmp_path, capsys):
    outs = {}
    for name in ("lenet", "lenet_script"):
        out = tmp_path / name
        code, stdout, err = run_cli(capsys, "--model", str(files[name]), "--max-examples", "60", "--top-k", "5",
                                    "--out", str(out))
        assert code == 0, err
        assert "UserWarning" not in err
        outs[name] = json.loads((out / "audit.json").read_text())
    script, plain = outs["lenet_script"], outs["lenet"]
    assert script["model"]["format"] == "TorchScript" and script["gradient_norms"]["method"] == "loop"
    assert [r["name"] for r in script["norm_layers"]] == [r["name"] for r in plain["norm_layers"]]
    s_run, p_run = script["gamma_sigma"]["running"], plain["gamma_sigma"]["running"]
    assert s_run["summary"]["frac_above_1"] == pytest.approx(p_run["summary"]["frac_above_1"])
    np.testing.assert_allclose(s_run["layers"]["norm1"]["ratio"], p_run["layers"]["norm1"]["ratio"], rtol=1e-9)
    assert "batch" not in script["gamma_sigma"]
    # Same subset, same per-sample gradient norms (loop on the TorchScript module vs ghost norms);
    # the compiled graph agrees with the eager float64 model to ~1e-7 relative, not to 1e-13.
    np.testing.assert_allclose(np.load(tmp_path / "lenet_script" / "gradient_norms.npy"),
                               np.load(tmp_path / "lenet" / "gradient_norms.npy"), rtol=1e-5, equal_nan=True)
    assert script["accuracy"] == plain["accuracy"]


def test_torchscript_cannot_train_shadow_models(files, tmp_path, capsys):
    code, _, err = run_cli(capsys, "--model", str(files["lenet_script"]), "--shadow-models", "4",
                           "--out", str(tmp_path / "o"))
    assert code == 2
    line = one_error_line(err)
    assert "TorchScript" in line and "torch.save(model, path)" in line


@pytest.mark.parametrize(
    "name, fragments",
    [
        ("state_dict", ["holds a state_dict (30 parameter tensors", "torch.save(model, path)", "torch.jit.save"]),
        ("checkpoint", ["a checkpoint or state_dict", "torch.save(model, path)"]),
        ("random", ["is not a PyTorch model file (neither torch.save nor torch.jit.save wrote it)",
                    "torch.save(model, path)"]),
        ("rgb", ["does not accept digits inputs", "shape (2, 1, 8, 8)", "expects 3 input channels"]),
        ("five", ["outputs 5 scores per example but digits has 10 classes", "audit it on the data it was trained on",
                  "give the model that predicts these 10 classes"]),
    ],
)
def test_bad_model_files_one_line(files, tmp_path, capsys, name, fragments):
    code, _, err = run_cli(capsys, "--model", str(files[name]), "--out", str(tmp_path / "o"))
    assert code == 2
    line = one_error_line(err)
    for f in fragments:
        assert f in line


def test_missing_file_and_bad_flags(files, tmp_path, capsys):
    code, _, err = run_cli(capsys, "--model", str(tmp_path / "nope.pt"), "--out", str(tmp_path / "o"))
    assert code == 2 and "does not exist" in one_error_line(err)
    code, _, err = run_cli(capsys, "--model", str(files["lenet"]), "--set", "train.lrr=1", "--out", str(tmp_path / "o"))
    assert code == 2 and "train.lrr" in one_error_line(err)
    code, _, err = run_cli(capsys, "--model", str(files["lenet"]), "--shadow-models", "3", "--out", str(tmp_path / "o"))
    assert code == 2 and "even and at least 4" in one_error_line(err)


def test_model_without_norm_layers(files, tmp_path, capsys):
    out = tmp_path / "plain"
    code, stdout, err = run_cli(capsys, "--model", str(files["plain"]), "--out", str(out))
    assert code == 0, err
    assert "No normalization layers" in stdout and "None: this model has no normalization layers." in stdout
    res = json.loads((out / "audit.json").read_text())
    assert res["norm_layers"] == [] and res["gamma_sigma"] is None
    assert len(res["gradient_norms"]["top_k"]) == 20 and res["gradient_norms"]["median"] > 0


def test_python_api_user_sequential_with_bn_and_shadow_models(ds):
    """A user's own nn.Sequential with BN, plain tensors and masks, and a membership estimate."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
    x, y = ds.x_train, ds.y_train
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(30):  # full-batch training, enough to fit some flipped labels
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    result = bnmem.audit(model, (x, y), (ds.x_test, ds.y_test), noisy_mask=ds.is_noisy, top_k=10,
                         shadow_models=4, train={"epochs": 2, "batch_size": 64})
    assert result.out is None
    d = result.data
    assert d["model"]["class"] == "Sequential" and d["norm_layers"][0]["type"] == "BatchNorm1d"
    assert d["data"]["n_noisy"] == int(ds.is_noisy.sum()) and d["data"]["outliers_known"]
    mem = d["membership"]
    assert mem["shadow_models"] == 4 and mem["reinitialized_parameters"].startswith("6 of 6")
    assert set(mem["attacks"]) == {"online", "offline", "rmia", "loss"}
    assert set(mem["attacks"]["online"]) == {"all", "outliers", "inliers", "most_exposed"}
    auc = mem["attacks"]["online"]["all"]["auc"]
    # Shadow copies trained 2 epochs barely separate members: measured AUC 0.501 (std 0.078 over the
    # 4 targets) on this run; the band only rules out gross errors (a sign flip would stay near 0.5).
    assert 0.35 < auc < 0.65
    assert mem["leakage"]["online"]["all"]["n_examples"] == ds.n_train
    assert d["risk"]["finding_kinds"][:3] == ["measured"] * 3
    assert d["risk"]["level"] == expected_risk_level(d)
    assert len(mem["attacks"]["online"]["all"]["eps_lb_per_target"]) == 4
    eps = d["risk"]["epsilon"]  # from the attack and group that set the level, in the headline only when > 0
    if eps is not None:
        assert eps["eps_lb"] == mem["attacks"][eps["attack"]][eps["group"]]["eps_lb"] >= 0
        assert (f"below ε = {eps_value(eps['eps_lb'])}" in d["risk"]["headline"]) == (eps["eps_lb"] > 0)
    ms = mem["memorization_scores"]
    assert ms["by_subset"]["all"]["n"] == ds.n_train and len(ms["top_memorized"]["index"]) == 10
    assert ms["top_memorized"]["mem"] == sorted(ms["top_memorized"]["mem"], reverse=True)
    assert "## Membership inference (shadow copies)" in result.markdown
    assert model.training is False  # audited in eval mode, left there


def test_python_api_outlier_dataset_writes_files(files, ds, tmp_path):
    result = audit(files["lenet_model"], ds, out=tmp_path / "api", top_k=3)
    assert (tmp_path / "api" / "audit.json").is_file() and (tmp_path / "api" / "audit.md").is_file()
    assert result.risk["level"] == expected_risk_level(result.data) == "not measured"
    # A BN LeNet fitting flipped labels (measured: elevated on this run) is at least moderate.
    assert result.risk["indicator_level"] in ("moderate", "elevated")
    assert len(result.data["gradient_norms"]["top_k"]) == 3


def test_bad_tensors_one_error(ds):
    with pytest.raises(bnmem.BnmemError, match="same number"):
        bnmem.audit(nn.Linear(64, 10), (ds.x_train, ds.y_train[:5]))
    with pytest.raises(bnmem.BnmemError, match="noisy_mask must be a boolean array"):
        bnmem.audit(nn.Linear(64, 10), (ds.x_train, ds.y_train), noisy_mask=np.zeros(3, bool))


def test_fresh_copy_reinitializes(files):
    net, n_reset, n_params = fresh_copy(files["lenet_model"], seed=1)
    assert n_reset == n_params
    before = dict(files["lenet_model"].named_parameters())
    assert any(not torch.equal(p, before[n]) for n, p in net.named_parameters())
    assert torch.equal(net.norm1.running_var, torch.ones(6))
    again, _, _ = fresh_copy(files["lenet_model"], seed=1)
    assert all(torch.equal(p, q) for p, q in zip(net.parameters(), again.parameters()))


def test_import_bnmem_stays_light():
    code = "import sys, bnmem; assert 'torch' not in sys.modules; assert callable(bnmem.audit); print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_shadow_copies_through_worker_processes_match_in_process(tmp_path):
    """--workers trains the shadow copies in worker processes (one job per copy): the same copies, the same
    membership numbers as training them here one after another."""
    from bnmem.auditing.membership import membership_section
    from bnmem.config import DataConfig, TrainConfig
    from bnmem.data import load_dataset
    from bnmem.executors import get_executor
    from bnmem.models import build_model

    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.1, train_size=120))
    torch.manual_seed(0)
    net = build_model("lenet", ds.input_shape, ds.num_classes, "batch")
    train = TrainConfig(epochs=2, batch_size=32)
    here = membership_section(net, ds, 4, train, tmp_path / "here")
    ex = get_executor("local", progress=False, workers=2)
    there = membership_section(net, ds, 4, train, tmp_path / "there", executor=ex)
    keys = sorted(d.name for d in (tmp_path / "here" / "shadow").iterdir() if (d / "DONE").exists())
    assert len(keys) == 4  # each copy under its key: the same keys in both folders
    for key in keys:
        a = torch.load(tmp_path / "here" / "shadow" / key / "model.pt")
        b = torch.load(tmp_path / "there" / "shadow" / key / "model.pt")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), key
    assert here["attacks"] == there["attacks"]
    assert here["rmia_population"].startswith("the test split")
