"""The defenses lens: Pareto front on hand-made points, interval-aware statements, config checks, a tiny run."""

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from waiting import HANG_GUARD_S
import torch

import bnmem

from bnmem.config import DataConfig, TrainConfig
from bnmem.errors import BnmemError
from bnmem.frontier import (
    FrontPoint,
    clearly_dominates,
    dominates,
    front_points,
    indistinguishable,
    pareto_front,
    recommendation,
    recommendation_text,
)
from bnmem.lenses.defenses import DefensesConfig, summary_table


def test_pareto_front_on_hand_made_points():
    pts = {
        "A": (0.90, 0.60),  # most accurate
        "B": (0.80, 0.55),  # less accurate, less risk: on the front
        "C": (0.85, 0.70),  # dominated by A (less accurate, more risk)
        "D": (0.80, 0.60),  # dominated by B (same accuracy, more risk)
        "E": (0.70, 0.50),  # least risk: on the front
        "F": (0.60, 0.50),  # dominated by E (same risk, less accurate)
        "G": (math.nan, 0.10),  # not measured: neither on the front nor dominating
    }
    assert pareto_front(pts) == ["A", "B", "E"]
    # Identical points do not dominate each other: both stay.
    assert pareto_front({"x": (0.8, 0.5), "y": (0.8, 0.5)}) == ["x", "y"]
    # One point is its own front; an empty input has none.
    assert pareto_front({"only": (0.5, 0.9)}) == ["only"]
    assert pareto_front({}) == []
    # Brute-force check on random points: front = exactly the non-dominated ones.
    rng = np.random.default_rng(0)
    rand = {f"p{i}": tuple(rng.random(2)) for i in range(40)}
    expected = {n for n, p in rand.items() if not any(dominates(q, p) for q in rand.values())}
    assert set(pareto_front(rand)) == expected
    accs = [rand[n][0] for n in pareto_front(rand)]
    assert accs == sorted(accs, reverse=True)


def test_interval_aware_statements():
    a = FrontPoint("a", 0.90, 0.55, (0.88, 0.92), (0.54, 0.56))
    b = FrontPoint("b", 0.80, 0.60, (0.78, 0.82), (0.50, 0.70))  # worse accuracy beyond the intervals
    c = FrontPoint("c", 0.89, 0.56, (0.80, 0.95), (0.50, 0.62))  # overlaps a on both axes
    assert clearly_dominates(a, b) and not clearly_dominates(b, a)
    assert not clearly_dominates(a, c) and indistinguishable(a, c)
    # Without intervals nothing is certain.
    assert not clearly_dominates(FrontPoint("a", 0.9, 0.5), FrontPoint("b", 0.8, 0.6))
    text = recommendation_text([a, b, c], "LiRA AUC", "hand-made", replicates=3, reference="b")
    assert "On the privacy–utility front (by the means): a" in text
    assert "b is off the front and clearly dominated by a" in text
    assert "c is off the front by the means (dominated by a), but the intervals overlap" in text
    assert "Against b: a clearly dominate(s) it." in text
    two = recommendation_text([a, FrontPoint("e", 0.70, 0.50, (0.6, 0.8), (0.49, 0.51))], "LiRA AUC", "x", 3)
    assert "the best (a), a has the lowest risk" in two
    assert "Lower risk costs accuracy beyond the intervals: e (-0.200 accuracy, -0.050 risk vs a)" in two
    # BN on the front by an accuracy edge the intervals cannot confirm, against a certainly safer variant.
    bn = FrontPoint("batch", 0.92, 0.67, (0.90, 0.94), (0.66, 0.68))
    ln = FrontPoint("layer", 0.91, 0.60, (0.89, 0.93), (0.58, 0.62))
    dp = FrontPoint("dp", 0.40, 0.50, (0.35, 0.45), (0.49, 0.51), epsilon=1.0)
    text = recommendation_text([bn, ln, dp], "LiRA AUC", "x", 3)
    assert "batch is on the front by the means only through its accuracy edge: layer have" in text
    assert "the best (batch), layer has the lowest risk." in text
    assert "dp (test accuracy 0.400 [0.350, 0.450], risk 0.500 [0.490, 0.510], ε = 1.00)" in text
    # When every safer variant costs accuracy beyond the intervals, BN's place on the front is real.
    text = recommendation_text([bn, dp], "LiRA AUC", "x", 3)
    assert "batch itself is on the front here" in text
    one = recommendation_text([FrontPoint("a", 0.9, 0.5)], "LiRA AUC", "x", replicates=1)
    assert "One replicate: no intervals" in one


def test_config_refuses_bn_for_dp_and_names_variants():
    with pytest.raises(BnmemError, match="dp_norms cannot include batch") as e:
        DefensesConfig(dp_norms=["batch"])
    assert "\n" not in str(e.value)
    with pytest.raises(BnmemError, match="norms must include batch"):
        DefensesConfig(norms=["group"], gs_lambda=1.0)
    cfg = DefensesConfig(gs_lambda=3.0, dp_norms=["group", "none"], dp_epsilons=[8, 1])
    assert [v.name for v in cfg.variants()] == [
        "batch", "batch+gs3", "group", "layer", "none",
        "dp-group-eps1", "dp-group-eps8", "dp-none-eps1", "dp-none-eps8"]
    # Replicates differ in corruption, keep matrix and model seeds; variants share them within one.
    v0, v1 = cfg.variants()[0], cfg.variants()[-1]
    assert cfg.lira_config(v0, 1).data.seed == cfg.data.seed + 1
    assert cfg.lira_config(v0, 1).keep_seed == cfg.keep_seed + 1
    assert cfg.lira_config(v0, 1).model_seeds() != cfg.lira_config(v0, 0).model_seeds()
    assert cfg.lira_config(v0, 0).model_seeds() == cfg.lira_config(v1, 0).model_seeds()
    assert cfg.lira_config(cfg.variants()[1], 0).train.gs_reg == 3.0


@pytest.mark.slow
@pytest.mark.usefixtures("memoized_noise_multiplier")  # the resume asks Opacus for the same σ again
def test_tiny_defenses_run_resumes_and_is_consistent(tmp_path_factory):
    pytest.importorskip("opacus")
    from bnmem import io

    tmp_path = tmp_path_factory.mktemp("study") / "defenses"  # a folder of lenses, as the report reads it
    from bnmem.lenses.defenses import run_defenses

    cfg = DefensesConfig(data=DataConfig(dataset="digits", label_noise=0.05, train_size=300),
                         train=TrainConfig(epochs=2, batch_size=32), norms=["batch", "none"], gs_lambda=0,
                         dp_epsilons=[8.0], shadow_models=4, chunk_size=2, replicates=2)
    res = run_defenses(cfg, tmp_path, progress=False)
    doc = io.read_json(tmp_path / "metrics.json")
    assert doc["lens"] == "defenses" and doc["schema_version"] == 1
    assert doc["variant_names"] == ["batch", "none", "dp-group-eps8"]
    assert (tmp_path / "frontier.png").stat().st_size > 0
    dp = res["variants"]["dp-group-eps8"]
    assert dp["epsilon"]["mean"] <= 8.0 + 1e-6 and len(dp["epsilon"]["per_replicate"]) == 2
    for name in doc["variant_names"]:
        v = res["variants"][name]
        assert 0 <= v["test_acc"]["mean"] <= 1 and v["test_acc"]["ci"] is not None
        assert 0 <= v["attacks"]["online"]["all"]["auc"]["mean"] <= 1
        assert 0 <= v["attacks"]["rmia"]["outliers"]["auc"]["mean"] <= 1
    pts = {p.name: (p.accuracy, p.risk) for p in front_points(res)}
    assert res["frontier"]["all"] == pareto_front(pts)
    assert "On the privacy–utility front" in recommendation(res) and "dp-group-eps8" in summary_table(res)
    from bnmem.lenses.registry import get

    from bnmem.lenses.defenses import audit_text

    assert get("defenses").summary(res) == summary_table(res) + "\n\n" + recommendation(res) + "\n\n" + audit_text(res)
    assert dp["dp_audit"]["passed"] and dp["dp_audit"]["eps_lb_max"] <= dp["epsilon"]["mean"]

    # Interrupt a DP chunk after its first model: the rerun trains the second one only, to the same bits.
    chunk = tmp_path / "rep0" / "dp-group-eps8" / "shadow" / "models_0000-0001"
    before = torch.load(chunk / "model_0001.pt")
    first_mtime = (chunk / "model_0000.pt").stat().st_mtime_ns
    (chunk / "DONE").unlink()
    (chunk / "model_0001.pt").unlink()
    (chunk / "model_0001.dp.json").unlink()
    # As if the interruption came before any query: the variant's query outputs go too.
    shutil.rmtree(tmp_path / "rep0" / "dp-group-eps8" / "query")
    (tmp_path / "rep0" / "dp-group-eps8" / "query.json").unlink()
    again = run_defenses(cfg, tmp_path, progress=False)
    after = torch.load(chunk / "model_0001.pt")
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert (chunk / "model_0000.pt").stat().st_mtime_ns == first_mtime
    assert again["variants"]["dp-group-eps8"]["test_acc"] == res["variants"]["dp-group-eps8"]["test_acc"]

    # The report shows the lens (figure, table, recommendation) and, where Chromium exists, renders it.
    from bnmem.report.build import build_report

    html = build_report(tmp_path.parent).html.read_text()
    assert "privacy–utility frontier" in html and "On the privacy–utility front" in html
    chromium = Path("/usr/bin/chromium")
    if chromium.exists():
        dom = subprocess.run([str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              "--disable-background-networking", "--dump-dom", (tmp_path.parent / "report.html").as_uri()],
                             capture_output=True, text=True, timeout=HANG_GUARD_S, check=False).stdout
        assert "On the privacy–utility front" in dom

    # bnmem audit cites this frontier in its recommendations when pointed at the run.
    from bnmem.auditing.report import frontier_citation
    from bnmem.data import load_dataset
    from bnmem.models import build_model

    cite = frontier_citation(tmp_path.parent)
    assert cite["path"] == str(tmp_path) and recommendation(res) in cite["text"]
    ds = load_dataset(DataConfig(dataset="digits", train_size=60))
    net = build_model("lenet", ds.input_shape, ds.num_classes, "batch")
    result = bnmem.audit(net, ds, max_examples=20, defenses=tmp_path.parent)
    assert result.data["risk"]["recommendations"][-1] == cite["text"] and cite["text"] in result.markdown
    with pytest.raises(BnmemError, match="holds no finished defenses results"):
        frontier_citation(tmp_path / "rep0")
