"""Per-sample gradient norms: fast paths against a one-backward-per-example oracle, and `bnmem gradnorms`."""

import json
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bnmem.config import DataConfig, TrainConfig
from bnmem.errors import BnmemError
from bnmem.measure.ghost import GhostUnsupported, ghost_sq_norms, unsupported_reason
from bnmem.measure.gradnorms import (
    batch_partition,
    batch_sq_norms_one,
    eval_sq_norms,
    float64_copy,
    loop_sq_norms,
    per_sample_grad_norms,
    vmap_sq_norms,
)
from bnmem.measure.predict import bn_query_mode
from bnmem.models import build_model

RTOL = 1e-5


def _randomize_norms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial γ, β and running statistics, as after training."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                    m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.running_mean.copy_(0.3 * torch.randn(m.running_mean.shape, generator=g))
                    m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
    return model


def _data(n=24, shape=(1, 8, 8), classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *shape, generator=g), torch.randint(0, classes, (n,), generator=g)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs() / b.abs()).max())


@pytest.mark.parametrize("arch", ["lenet", "mlp"])
@pytest.mark.parametrize("norm", ["batch", "none", "group", "layer"])
def test_vectorized_matches_loop_eval_definition(arch, norm):
    """ORACLE: vmap and ghost norms equal one backward per example, to 1e-5 relative, in float64."""
    torch.manual_seed(0)
    model = _randomize_norms(build_model(arch, (1, 8, 8), 10, norm)).train()
    m64 = float64_copy(model)
    x, y = _data()
    x = x.double()
    oracle = loop_sq_norms(m64, x, y)
    assert bool((oracle > 0).all())
    assert _rel(vmap_sq_norms(m64, x, y, chunk_size=7), oracle) < RTOL
    ghost, used = eval_sq_norms(m64, x, y, "ghost", chunk_size=10)
    assert used == "ghost"
    assert _rel(ghost, oracle) < RTOL
    # a training-mode model is measured in eval mode and handed back as it was
    assert m64.training


class _KitchenSink(nn.Module):
    """Layers and settings LeNet/MLP do not exercise: strided/dilated convs (Gram branch),
    a 3-D Linear input, LayerNorm over several dims, BN1d after a conv stack, no biases."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(2, 32, 3, stride=2, padding=1)
        self.gn = nn.GroupNorm(4, 32)
        self.c2 = nn.Conv2d(32, 32, 3, dilation=2, padding="valid", bias=False)  # L = 1: the Gram form is cheaper
        self.bn = nn.BatchNorm2d(32)
        self.ln = nn.LayerNorm([32, 1, 1])
        self.seq = nn.Linear(8, 12)
        self.bn1 = nn.BatchNorm1d(12 * 4)
        self.head = nn.Linear(12 * 4, 5)

    def forward(self, x):
        x = F.relu(self.gn(self.c1(x)))
        x = self.ln(F.relu(self.bn(self.c2(x))))
        x = x.flatten(1).view(x.shape[0], 4, 8)  # a short "sequence" of 4 tokens
        x = F.relu(self.seq(x)).flatten(1)
        return self.head(F.relu(self.bn1(x)))


def test_ghost_covers_strided_grouped_sequence_layers():
    torch.manual_seed(1)
    m64 = float64_copy(_randomize_norms(_KitchenSink(), 1)).eval()
    x, y = _data(16, (2, 10, 10), 5, seed=1)
    x = x.double()
    oracle = loop_sq_norms(m64, x, y)
    parts = ghost_sq_norms(m64, x, y)
    assert set(parts) == {n for n, p in m64.named_parameters()}
    assert _rel(torch.stack(list(parts.values())).sum(0), oracle) < RTOL
    assert _rel(vmap_sq_norms(m64, x, y), oracle) < RTOL


def test_ghost_refuses_what_it_cannot_do_and_auto_falls_back():
    torch.manual_seed(0)
    reflect = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, padding_mode="reflect"), nn.ReLU(inplace=True),
                            nn.Flatten(), nn.Linear(4 * 64, 3)).double()
    x, y = _data(6, (1, 8, 8), 3)
    x = x.double()
    assert "padding_mode" in unsupported_reason(reflect)
    with pytest.raises(GhostUnsupported, match="padding_mode"):
        ghost_sq_norms(reflect, x, y)
    with pytest.raises(BnmemError, match="ghost-norm path does not cover"):
        eval_sq_norms(reflect, x, y, "ghost")
    with pytest.warns(UserWarning, match=r"ghost norms not applicable .*padding_mode.*falling back to vmap"):
        sq, used = eval_sq_norms(reflect, x, y, "auto")
    assert used == "vmap"
    assert _rel(sq, loop_sq_norms(reflect, x, y)) < RTOL
    # in-place activations and grouped convolutions are covered (tests/test_ghost_layers.py)
    inplace = nn.Sequential(nn.Conv2d(2, 4, 3, groups=2), nn.ReLU(inplace=True), nn.Flatten(),
                            nn.Linear(4 * 36, 3)).double()
    sq, used = eval_sq_norms(inplace, torch.cat([x, x], 1), y, "auto")
    assert used == "ghost" and _rel(sq, loop_sq_norms(inplace, torch.cat([x, x], 1), y)) < RTOL
    # BN in training mode without running statistics couples examples even in eval mode
    bn = nn.Sequential(nn.Flatten(), nn.Linear(64, 4), nn.BatchNorm1d(4, track_running_stats=False)).double()
    bn.eval()
    assert "BatchNorm" in unsupported_reason(bn)


def test_float64_matters_for_confident_examples():
    """Why the copy is float64: in float32 the p − 1 term of a confident example is rounded away."""
    torch.manual_seed(0)
    model = build_model("mlp", (1, 8, 8), 10, "none", width=32)
    with torch.no_grad():
        model.fc3.weight.mul_(200.0)
    x, y = _data(64)
    y = model(x).argmax(1)  # confidently correct: p_y ≈ 1
    exact = loop_sq_norms(float64_copy(model), x.double(), y)
    single = loop_sq_norms(model, x, y).double()
    assert _rel(single, exact) > 0.1  # measured: 0.76 for the most confident example
    r = per_sample_grad_norms(model, x, y)
    assert np.allclose(r.norms ** 2, exact.numpy(), rtol=RTOL, atol=0)


def _batch_case(arch: str):
    """A BN model with randomized norms (seed 0), its float64 copy and 16 float64 examples."""
    torch.manual_seed(0)
    model = _randomize_norms(build_model(arch, (1, 8, 8), 10, "batch"))
    x, y = _data(16)
    return model, float64_copy(model), x.double(), y


def test_batch_definition_jacobian_matches_loop_and_differs_from_eval():
    model, m64, x, y = _batch_case("lenet")
    with bn_query_mode(m64, "batch"):
        jac = batch_sq_norms_one(m64, x, y, "jacobian")
        loop = batch_sq_norms_one(m64, x, y, "loop")
    assert _rel(jac, loop) < RTOL
    assert _rel(jac, loop_sq_norms(m64, x, y)) > 1e-3  # batch statistics change the gradient
    # running statistics are untouched by the batch-mode measurement
    assert torch.equal(m64.norm1.running_var, float64_copy(model).norm1.running_var)


@pytest.mark.parametrize("arch", ["lenet", "mlp", "resnet20"])
def test_batch_rows_path_matches_loop_oracle(arch):
    """ORACLE: the rows path (per-row layer-output gradients, one GEMM per layer, dense small convs) equals
    one full backward per example in float64 to float64 rounding, also for a subset of a batch's rows.
    ResNet-20's first conv has no bias (its dense output once had no gradient: the path raised)."""
    model, m64, x, y = _batch_case(arch)
    with bn_query_mode(m64, "batch"):
        loop = batch_sq_norms_one(m64, x, y, "loop")
        rows = batch_sq_norms_one(m64, x, y, "rows")
        some = batch_sq_norms_one(m64, x, y, "rows", [3, 7, 15])
        one_at_a_time = batch_sq_norms_one(m64, x, y, "rows", max_bytes=1)  # chunks of one row
    assert _rel(rows, loop) < 1e-12
    assert torch.equal(some, rows[[3, 7, 15]])
    assert _rel(one_at_a_time, loop) < 1e-12


def test_batch_rows_falls_back_where_a_layer_has_no_row_identity():
    """A GroupNorm has no per-row identity here: auto takes the Jacobian, an explicit 'rows' is refused."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.GroupNorm(2, 4), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 64, 10))
    x, y = _data(12)
    r = per_sample_grad_norms(model, x, y, definition="batch", batch_size=6)
    assert r.method == "jacobian"
    with pytest.raises(BnmemError, match="rows path does not cover"):
        per_sample_grad_norms(model, x, y, definition="batch", batch_size=6, method="rows")


def test_batch_auto_uses_rows_and_agrees_with_the_loop():
    """The public batch definition (auto: rows, last batch's repeated examples skipped) against the loop."""
    torch.manual_seed(0)
    model = _randomize_norms(build_model("lenet", (1, 8, 8), 10, "batch"))
    x, y = _data(30)
    auto = per_sample_grad_norms(model, x, y, definition="batch", batch_size=8)
    loop = per_sample_grad_norms(model, x, y, definition="batch", batch_size=8, method="loop")
    assert auto.method == "rows" and loop.method == "loop"
    assert np.allclose(auto.norms, loop.norms, rtol=1e-12, atol=0)


def test_batch_definition_without_bn_is_the_eval_definition():
    torch.manual_seed(0)
    model = build_model("lenet", (1, 8, 8), 10, "none")
    x, y = _data(20)
    b = per_sample_grad_norms(model, x, y, definition="batch", batch_size=8)
    e = per_sample_grad_norms(model, x, y, definition="eval")
    assert np.allclose(b.norms, e.norms, rtol=RTOL)
    assert "batch = eval" in b.method


def test_batch_partition_full_batches_cover_everything():
    batches = batch_partition(50, 16, seed=3)
    assert all(len(b) == 16 for b in batches)
    assert set(torch.cat(batches).tolist()) == set(range(50))
    assert len(batch_partition(5, 64, 0)) == 1
    with pytest.raises(BnmemError):
        batch_partition(1, 64, 0)


def test_public_api_subset_and_untouched_model():
    torch.manual_seed(0)
    model = _randomize_norms(build_model("lenet", (1, 8, 8), 10, "batch")).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = _data(30)
    r = per_sample_grad_norms(model, x, y, definition="batch", batch_size=8, subset=np.arange(0, 30, 2))
    assert np.isnan(r.norms[1::2]).all() and np.isfinite(r.norms[::2]).all()
    assert r.describe()["definition"] == "batch" and r.describe()["batch_size"] == 8
    e = per_sample_grad_norms(model, x, y)
    assert e.method == "ghost" and e.norms.dtype == np.float64
    assert model.training and next(model.parameters()).dtype == torch.float32
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(BnmemError, match="unknown gradient definition"):
        per_sample_grad_norms(model, x, y, definition="train")
    with pytest.raises(BnmemError, match="unknown gradient-norm method"):
        per_sample_grad_norms(model, x, y, method="fast")


# --- the experiment ------------------------------------------------------------------


@pytest.fixture(scope="module")
def gn_run(tmp_path_factory):
    from bnmem.lenses.gradnorms import GradNormsConfig, run_gradnorms

    cfg = GradNormsConfig(
        data=DataConfig(dataset="digits", label_noise=0.05, seed=0),
        arch="lenet",
        norms=["batch", "none"],
        seeds=[0],
        train=TrainConfig(epochs=4, lr=0.05),
        at=[1, 4],
        definitions=["eval", "batch"],
        batch_subset=300,
    )
    out = tmp_path_factory.mktemp("gn")
    return out, cfg, run_gradnorms(cfg, out, progress=False)


def test_experiment_outputs(gn_run):
    out, cfg, res = gn_run
    for f in ("config.json", "metrics.json", "gradnorms.npz", "gradnorms.png"):
        assert (out / f).exists(), f
    z = np.load(out / "gradnorms.npz")
    assert z["gradnorms"].shape == (2, 1, 2, 2, z["is_noisy"].shape[0])
    assert list(z["norms"]) == ["batch", "none"] and list(z["definitions"]) == ["eval", "batch"]
    assert list(z["epochs"]) == [1, 4]
    ev = z["gradnorms"][:, :, 0]
    assert np.isfinite(ev).all() and (ev > 0).all()
    bt = z["gradnorms"][:, :, 1]
    assert (np.isfinite(bt).sum(-1) == 300).all()
    assert z["is_noisy"].sum() == round(0.05 * len(z["is_noisy"]))
    m = json.loads((out / "metrics.json").read_text())
    e = m["batch"]["eval"]["epoch_4"]
    assert e["definition"] == "eval" and e["method"] == "ghost"
    assert set(e) >= {"clean", "noisy", "ood", "noisy_clean_median_ratio"}
    assert e["noisy"]["median"] / e["clean"]["median"] == pytest.approx(e["noisy_clean_median_ratio"])
    assert e["ood"]["n"] == 0 and e["ood"]["median"] is None
    assert m["batch"]["batch"]["epoch_4"]["definition"] == "batch"
    cond = m["conditions"]
    assert cond["dataset"] == "digits" and cond["arch"] == "lenet" and cond["seeds"] == [0]
    assert set(cond["bn_mode"]) == {"eval", "batch"}


def test_noisy_examples_have_larger_gradients_more_so_with_bn(gn_run):
    """Flipped labels are fit later than clean ones, so their gradients are larger; early in
    training the gap is far wider with BN (paper: noisy-sample gradient norms shift up under BN)."""
    _, _, res = gn_run
    bn, none = (res[n]["eval"]["epoch_4"]["noisy_clean_median_ratio"] for n in ("batch", "none"))
    # measured (seed 0): BN 40-60, none ~1.5
    assert none > 1 and bn > 5 * none, (bn, none)


def test_rerun_skips_and_reloads(gn_run):
    from bnmem.lenses.gradnorms import GradNormsConfig, run_gradnorms

    out, cfg, res = gn_run
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/seed*/*.npy")}
    assert len(stamps) == 2 * 2 * 2
    again = run_gradnorms(GradNormsConfig.model_validate(cfg.model_dump()), out, progress=False)
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/seed*/*.npy")} == stamps
    assert again["batch"] == res["batch"]


def test_config_errors():
    from pydantic import ValidationError

    from bnmem.lenses.gradnorms import GradNormsConfig

    with pytest.raises(ValidationError, match="past the last epoch"):
        GradNormsConfig(train=TrainConfig(epochs=5), at=[1, 10])
    with pytest.raises(ValidationError, match="unknown gradient definition"):
        GradNormsConfig(train=TrainConfig(epochs=5), at=[1], definitions=["train"])


def test_cli_gradnorms(tmp_path, capsys):
    from bnmem.cli import main

    out = tmp_path / "gn"
    code = main(["gradnorms", "--epochs", "2", "--at", "1,2", "--n-seeds", "1", "--norms", "batch",
                 "--quiet", "--out", str(out)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "noisy/clean" in cap.out
    code = main(["gradnorms", "--epochs", "2", "--at", "1,3", "--quiet", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "past the last epoch" in err and len(err.strip().splitlines()) == 1


def test_batch_rows_self_check_falls_back_on_a_wrong_answer(monkeypatch):
    """The first batch's two-example check against the loop catches a wrong rows result (here: doubled)."""
    from bnmem.measure import batch_rows

    real = batch_rows.StackedRows.sq_norms
    monkeypatch.setattr(batch_rows.StackedRows, "sq_norms", lambda self: 2 * real(self))
    torch.manual_seed(0)
    model = _randomize_norms(build_model("lenet", (1, 8, 8), 10, "batch"))
    x, y = _data(16)
    with pytest.warns(UserWarning, match="batch rows not applicable"):
        r = per_sample_grad_norms(model, x, y, definition="batch", batch_size=8)
    loop = per_sample_grad_norms(model, x, y, definition="batch", batch_size=8, method="loop")
    assert r.method == "jacobian" and np.allclose(r.norms, loop.norms, rtol=1e-12, atol=0)
