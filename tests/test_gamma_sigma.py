"""BN scale statistics: exact values on hand-set layers, any user module, and `bnmem gamma-sigma`."""

import copy
import json

import numpy as np
import pytest
import torch
from torch import nn

from bnmem.config import DataConfig, TrainConfig
from bnmem.errors import BnmemError
from bnmem.measure.gamma_sigma import compact, gamma_sigma_stats


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)
        self.block = nn.Sequential(nn.BatchNorm2d(3), nn.ReLU())
        self.fc = nn.Linear(3 * 16, 4)
        self.bn = nn.BatchNorm1d(4, affine=False)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        x = self.block(self.conv(x)).flatten(1)
        return self.head(self.bn(self.fc(x)))


def _net():
    torch.manual_seed(0)
    net = _Net()
    with torch.no_grad():
        net.block[0].weight.copy_(torch.tensor([0.6, -2.0, 1.0]))
        net.block[0].running_var.copy_(torch.tensor([0.25, 1.0, 4.0]))
        net.bn.running_var.copy_(torch.tensor([0.01, 1.0, 0.5, 4.0]))
    return net


def test_running_mode_exact_values():
    net = _net()
    s = gamma_sigma_stats(net)
    assert s["mode"] == "running" and list(s["layers"]) == ["block.0", "bn"]
    l0 = s["layers"]["block.0"]
    eps = 1e-5
    expect = np.array([0.6, 2.0, 1.0]) / np.sqrt(np.array([0.25, 1.0, 4.0]) + eps)
    assert np.allclose(l0["ratio"], expect, rtol=1e-6)  # γ, var stored in float32
    assert l0["gamma"] == pytest.approx([0.6, -2.0, 1.0])  # γ keeps its sign; the ratio uses |γ|
    assert l0["median_ratio"] == pytest.approx(np.median(expect))
    assert l0["frac_above_1"] == pytest.approx(2 / 3)  # 0.6/0.5 and 2/1 amplify, 1/2 does not
    bn = s["layers"]["bn"]
    assert bn["gamma"] == [1.0] * 4  # no affine: γ = 1
    assert bn["frac_above_1"] == pytest.approx(0.5)
    assert s["summary"]["n_layers"] == 2 and s["summary"]["n_channels"] == 7
    assert s["summary"]["frac_above_1"] == pytest.approx(4 / 7)
    c = compact(s)
    assert "ratio" not in c["layers"]["bn"] and c["layers"]["bn"]["median_ratio"] == bn["median_ratio"]


def test_batch_mode_matches_a_training_forward_and_leaves_the_model_alone():
    net = _net().train()
    x = torch.randn(10, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    before = copy.deepcopy(net.state_dict())
    s = gamma_sigma_stats(net, x, mode="batch")
    # reference: the inputs each BN sees in a training-mode forward, std over all dims but channels
    ref = copy.deepcopy(net)
    seen = {}
    ref.block[0].register_forward_pre_hook(lambda m, a: seen.__setitem__("block.0", a[0]))
    ref.bn.register_forward_pre_hook(lambda m, a: seen.__setitem__("bn", a[0]))
    ref(x)
    for name, dims in (("block.0", (0, 2, 3)), ("bn", (0,))):
        sigma = torch.sqrt(seen[name].double().var(dim=dims, unbiased=False) + 1e-5)
        assert np.allclose(s["layers"][name]["sigma"], sigma.detach().numpy(), rtol=1e-6)
    assert net.training
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k  # running statistics untouched
    net.eval()
    gamma_sigma_stats(net, x, mode="batch")
    assert not net.training


def test_any_user_module_torchvision_resnet():
    torchvision = pytest.importorskip("torchvision")
    net = torchvision.models.resnet18(num_classes=3).eval()
    s = gamma_sigma_stats(net, torch.randn(2, 3, 32, 32), mode="batch")
    assert s["summary"]["n_layers"] == 20
    assert "layer4.1.bn2" in s["layers"]
    r = gamma_sigma_stats(net)
    assert r["layers"]["bn1"]["median_ratio"] == pytest.approx(1 / np.sqrt(1 + 1e-5))  # γ=1, var=1 at init


def test_no_bn_and_errors():
    s = gamma_sigma_stats(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)))
    assert s["layers"] == {} and s["summary"]["n_layers"] == 0 and s["summary"]["median_ratio"] is None
    with pytest.raises(BnmemError, match="unknown σ mode"):
        gamma_sigma_stats(_net(), mode="train")
    with pytest.raises(BnmemError, match="needs a training batch"):
        gamma_sigma_stats(_net(), mode="batch")
    with pytest.raises(BnmemError, match="needs a training batch"):
        gamma_sigma_stats(_net(), torch.randn(1, 1, 4, 4), mode="batch")
    no_running = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3, track_running_stats=False))
    with pytest.raises(BnmemError, match="no running statistics"):
        gamma_sigma_stats(no_running)
    assert gamma_sigma_stats(no_running, torch.randn(5, 2), "batch")["summary"]["n_channels"] == 3


# --- the experiment ------------------------------------------------------------------


@pytest.fixture(scope="module")
def gs_run(tmp_path_factory):
    from bnmem.lenses.gamma_sigma import GammaSigmaConfig, run_gamma_sigma

    cfg = GammaSigmaConfig(data=DataConfig(dataset="digits", label_noise=0.05), seeds=[0, 1],
                           train=TrainConfig(epochs=5), every=2)
    out = tmp_path_factory.mktemp("gs")
    return out, cfg, run_gamma_sigma(cfg, out, progress=False)


def test_experiment_outputs(gs_run):
    out, cfg, res = gs_run
    assert (out / "gamma_sigma.png").exists()
    saved = json.loads((out / "gamma_sigma.json").read_text())
    assert saved["epochs"] == [2, 4, 5]
    assert saved["layers"] == ["norm1", "norm2", "norm3", "norm4"]
    for mode in ("running", "batch"):
        for layer in saved["layers"]:
            assert len(saved["curves"][mode][layer]["median_ratio"]) == 3
            f = saved["final"][mode][layer]
            assert set(f["per_seed"]) == {"0", "1"} and 0 <= f["frac_above_1"] <= 1
    final = saved["per_seed"]["0"]["final"]["running"]["layers"]["norm3"]
    assert len(final["ratio"]) == 120
    cond = saved["conditions"]
    assert cond["norm"] == "batch" and cond["dataset"] == "digits" and cond["seeds"] == [0, 1]
    assert set(cond["sigma"]) == {"running", "batch"}


def test_fc_layers_amplify(gs_run):
    """Measured γ/σ > 1 in the fully connected BN layers (paper: γ/σ > 1 in most layers)."""
    _, _, res = gs_run
    for layer in ("norm3", "norm4"):
        # The 0.9 bar is from one measured run (1.0 in both layers), not a derivation.
        assert res["final"]["running"][layer]["frac_above_1"] > 0.9


def test_rerun_skips(gs_run):
    from bnmem.lenses.gamma_sigma import GammaSigmaConfig, run_gamma_sigma

    out, cfg, res = gs_run
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("batch/seed*/model.pt")}
    assert sorted(p.parent.name for p in stamps) == sorted(f"seed{s}" for s in cfg.seeds)  # not vacuous
    again = run_gamma_sigma(GammaSigmaConfig.model_validate(cfg.model_dump()), out, progress=False)
    assert {p: p.stat().st_mtime_ns for p in out.glob("batch/seed*/model.pt")} == stamps
    assert again["final"] == res["final"]


def test_cli(tmp_path, capsys):
    from bnmem.cli import main

    code = main(["gamma-sigma", "--epochs", "1", "--n-seeds", "1", "--quiet", "--out", str(tmp_path / "g")])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "norm3" in cap.out and (tmp_path / "g" / "gamma_sigma.json").exists()
    code = main(["gamma-sigma", "--norms", "batch,none", "--epochs", "1", "--quiet", "--out", str(tmp_path / "h")])
    err = capsys.readouterr().err
    assert code == 2 and "BatchNorm" in err and len(err.strip().splitlines()) == 1


def test_each_layer_says_whether_its_scale_is_identifiable_and_its_effective_step(gs_run):
    # LeNet: norm1-norm3 feed another BN through ReLU, pooling and a linear map; norm4 feeds the logits.
    out, cfg, res = gs_run
    saved = json.loads((out / "gamma_sigma.json").read_text())
    for mode in ("running", "batch"):
        final = saved["final"][mode]
        assert {k: final[k]["scale_identifiable"] for k in saved["layers"]} == {
            "norm1": False, "norm2": False, "norm3": False, "norm4": True}
        for layer in saved["layers"]:
            steps = [s["median_effective_step"] for s in final[layer]["per_seed"].values()]
            assert all(v is not None and v > 0 for v in steps)
            assert final[layer]["median_effective_step"] == pytest.approx(np.mean(steps))
    flags = {s: p["scale_identifiable"] for s, p in saved["push"]["per_seed"].items()}
    assert flags and all(f == {"norm1": False, "norm2": False, "norm3": False, "norm4": True} for f in flags.values())


def test_the_effective_step_is_recorded_from_the_trained_model(gs_run):
    # Recomputed from the saved final model of seed 0: the same per-channel numbers as its history.
    from bnmem.models import build_model
    from bnmem.models.identifiable import effective_step, next_gain

    out, cfg, _ = gs_run
    saved = json.loads((out / "gamma_sigma.json").read_text())
    model = build_model("lenet", (1, 8, 8), 10)
    model.load_state_dict(torch.load(out / "batch" / "seed0" / "model.pt", map_location="cpu", weights_only=True))
    g = next_gain(model)["norm3"]
    want = effective_step(cfg.train.lr, g)["median"]
    assert saved["final"]["running"]["norm3"]["per_seed"]["0"]["median_effective_step"] == pytest.approx(want, rel=1e-6)
