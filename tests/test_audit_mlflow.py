"""``--mlflow``: the audit as one run in a real local MLflow store, read back with ``mlflow.search_runs``."""

from __future__ import annotations

import json
import os

import pytest

mlflow = pytest.importorskip("mlflow")

from bnmem.auditing.tracking import FILE_STORE_OPT_IN  # noqa: E402
from bnmem.cli import main  # noqa: E402
from bnmem.schemas import AUDIT_SCHEMA_VERSION  # noqa: E402


@pytest.fixture
def mlruns_here(tmp_path, monkeypatch):
    """A working directory of its own and no tracking URI from the environment: the default ./mlruns."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(FILE_STORE_OPT_IN, raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return tmp_path


def test_the_audit_run_is_read_back_with_its_level_aucs_and_files(mlruns_here, capsys):
    """A small digits audit (4 copies of one epoch: every group has an AUC interval) through the command line."""
    import torch

    from bnmem.config import DataConfig, ModelConfig
    from bnmem.data import load_dataset
    from bnmem.train import seeded_model

    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, train_size=120, seed=0))
    torch.save(seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0), mlruns_here / "model.pt")
    code = main(["audit", "--quiet", "--model", "model.pt", "--label-noise", "0.05", "--train-size", "120",
                 "--max-examples", "40", "--shadow-models", "4", "--epochs", "1", "--lr", "0.005",
                 "--fail-at", "elevated", "--mlflow", "--out", "audit"])
    res = json.loads((mlruns_here / "audit" / "audit.json").read_text())
    assert code == res["risk"]["gate"]["exit_code"]
    assert (mlruns_here / "mlruns").is_dir() and FILE_STORE_OPT_IN not in os.environ  # the opt-in was scoped
    assert not (mlruns_here / "mlflow.db").exists()
    out = capsys.readouterr().out
    run_id = out.split("mlflow: run ")[1].split()[0]

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FILE_STORE_OPT_IN, "true")
        mp.setenv("MLFLOW_TRACKING_URI", (mlruns_here / "mlruns").as_uri())
        runs = mlflow.search_runs(search_all_experiments=True)
        assert list(runs["run_id"]) == [run_id]
        row = runs.iloc[0]
        risk = res["risk"]
        assert row["tags.bnmem.level"] == risk["level"] and row["tags.bnmem.level_lower"] == risk["level_lower"]
        assert row["tags.bnmem.gate"] == risk["gate"]["state"]
        assert row["tags.bnmem.schema_version"] == res["schema_version"] == AUDIT_SCHEMA_VERSION
        for g in risk["groups"]:  # each group's AUC with both ends
            assert row[f"metrics.auc.{g['group']}"] == pytest.approx(g["auc"])
            assert row[f"metrics.auc_lo.{g['group']}"] == pytest.approx(g["auc_ci"][0])
            assert row[f"metrics.auc_hi.{g['group']}"] == pytest.approx(g["auc_ci"][1])
        assert row["params.shadow_models"] == "4" and row["params.train.lr"] == "0.005"
        assert row["params.model.sha256"] == res["model"]["sha256"]
        client = mlflow.tracking.MlflowClient()
        names = {a.path for a in client.list_artifacts(run_id)}
        assert names == {"audit.json", "audit.md", "audit.html", "exposure.csv"}
        logged = json.loads(open(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="audit.json")).read())
        assert logged == res


def test_mlflow_without_out_or_without_mlflow_is_one_line(mlruns_here, monkeypatch):
    import sys

    import torch

    import bnmem
    from bnmem.errors import BnmemError

    with pytest.raises(BnmemError, match="give out="):
        bnmem.audit(torch.nn.Linear(3, 2), (torch.zeros(4, 3), torch.zeros(4).long()), mlflow=True)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    with pytest.raises(BnmemError, match=r"pip install 'bnmem\[mlflow\]'"):
        bnmem.audit(torch.nn.Linear(3, 2), (torch.zeros(4, 3), torch.zeros(4).long()), mlflow=True, out="x")
    assert not (mlruns_here / "x").exists()


def test_inside_a_training_run_the_audit_is_a_nested_run(mlruns_here, monkeypatch):
    import bnmem
    from bnmem.config import DataConfig, ModelConfig
    from bnmem.data import load_dataset
    from bnmem.train import seeded_model

    ds = load_dataset(DataConfig(dataset="digits", train_size=120))
    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0)
    monkeypatch.setenv(FILE_STORE_OPT_IN, "true")
    uri = (mlruns_here / "tracked").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with mlflow.start_run(run_name="training") as parent:
        res = bnmem.audit(model, ds, max_examples=20, top_k=2, mlflow=True, out="a")
    assert res.mlflow["tracking_uri"] == uri and mlflow.get_tracking_uri() == uri
    runs = mlflow.search_runs(search_all_experiments=True)
    child = runs[runs["run_id"] == res.mlflow["run_id"]].iloc[0]
    assert child["tags.mlflow.parentRunId"] == parent.info.run_id and child["tags.bnmem.level"] == "not measured"


def test_an_unreachable_tracker_costs_one_warning_and_keeps_the_gate(mlruns_here, monkeypatch, capsys):
    """The issue's run: --mlflow against a server that does not answer (a closed loopback port) ended in a
    traceback and exit 1 after the gate was decided. Now: the report and audit.json are written, the gate's code
    is the exit code, and the failure is one warning line."""
    import torch

    from bnmem.config import DataConfig, ModelConfig
    from bnmem.data import load_dataset
    from bnmem.train import seeded_model

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # MLflow's own backoff would take minutes
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, train_size=120, seed=0))
    torch.save(seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0), mlruns_here / "model.pt")
    code = main(["audit", "--quiet", "--model", "model.pt", "--label-noise", "0.05", "--train-size", "120",
                 "--max-examples", "40", "--shadow-models", "4", "--epochs", "1", "--lr", "0.005", "--momentum", "0",
                 "--weight-decay", "0", "--fail-at", "elevated", "--mlflow", "--out", "audit"])
    cap = capsys.readouterr()
    res = json.loads((mlruns_here / "audit" / "audit.json").read_text())
    assert code == res["risk"]["gate"]["exit_code"] and code in (0, 3, 4)
    warnings = [line for line in cap.err.splitlines() if line.startswith("bnmem: warning: --mlflow")]
    assert len(warnings) == 1 and "not logged" in warnings[0] and "gate's answer stands" in warnings[0], cap.err
    assert "Traceback" not in cap.err and f"bnmem: {res['risk']['gate']['text']}" in cap.err
    assert "## Risk:" in cap.out and "mlflow: run" not in cap.out
    assert (mlruns_here / "audit" / "audit.md").is_file() and not (mlruns_here / "mlruns").exists()
