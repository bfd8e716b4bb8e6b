"""``bnmem audit --mlflow``: the audit as one MLflow run, where a team already tracks its training runs.

Logged to the active tracking URI: ``MLFLOW_TRACKING_URI`` or one set with
``mlflow.set_tracking_uri`` (a server, a database), else a local ``./mlruns`` folder. MLflow 3
keeps that file store in maintenance mode and refuses it unless ``MLFLOW_ALLOW_FILE_STORE`` is
true; the audit opts in for its own call only (the variable is restored afterwards), so the
default works without a database. Inside an active run (a training script's ``mlflow.start_run()``)
the audit is a nested run. The audit logs through a client of its own: the process's MLflow settings
are read, never changed.

What the run holds:

* params: the audit's settings (shadow copies, the recipe, the data, the model's sha256, the budget);
* metrics: each group's AUC under the attack that sets its level with both ends of its 95% interval
  (``auc.<group>``, ``auc_lo.<group>``, ``auc_hi.<group>``), the multi-run and one-run ε lower bounds,
  the copies' accuracy gap;
* tags: the level and both its ends, the gate's state, ``schema_version``;
* artifacts: ``audit.json``, ``audit.md``, ``audit.html`` and ``exposure.csv``.

The run is logged last, after the audit's files are written and its gate decided: a tracker that fails
(an unreachable server, a store it cannot write) costs one warning line on stderr
(:func:`log_audit_or_warn`), never the report or the gate's exit code. Reading the default ``./mlruns``
store back with MLflow 3 (``mlflow ui``, ``mlflow.search_runs``) needs the same opt-in:
``MLFLOW_ALLOW_FILE_STORE=true``.

Optional dependency: ``pip install 'bnmem[mlflow]'`` (mlflow-skinny).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from bnmem.errors import BnmemError

FILE_STORE_OPT_IN = "MLFLOW_ALLOW_FILE_STORE"
RECIPE_PARAMS = ("epochs", "lr", "batch_size", "optimizer", "momentum", "weight_decay", "schedule", "augment",
                 "gs_reg")


def require_mlflow() -> Any:
    """Import MLflow or fail with one line saying how to install it.

    Raises:
        BnmemError: MLflow is not installed.
    """
    try:
        import mlflow
    except ImportError:
        raise BnmemError("--mlflow needs MLflow: pip install 'bnmem[mlflow]' (or pip install mlflow)") from None
    return mlflow


def tracking_uri(mlflow: Any) -> str:
    """The active tracking URI: the environment's or the one the caller set, else ``./mlruns`` (a file URI)."""
    from mlflow.tracking._tracking_service import utils

    is_set = getattr(utils, "is_tracking_uri_set", None)
    if os.environ.get("MLFLOW_TRACKING_URI") or (is_set is not None and is_set()):
        return mlflow.get_tracking_uri()
    return Path("mlruns").resolve().as_uri()


@contextmanager
def file_store_allowed(uri: str) -> Iterator[None]:
    """MLflow 3's opt-in to a file store, for a ``file:`` URI and for this block only."""
    before = os.environ.get(FILE_STORE_OPT_IN)
    if uri.startswith("file:"):
        os.environ[FILE_STORE_OPT_IN] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FILE_STORE_OPT_IN, None)
        else:
            os.environ[FILE_STORE_OPT_IN] = before


def run_params(result: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The run's parameters (MLflow keeps them as text)."""
    mem, m, d = result.get("membership") or {}, result["model"], result["data"]
    params = {"model.class": m["class"], "model.sha256": m.get("sha256", ""), "data.dataset": d["dataset"],
              "data.n_train": d["n_train"], "shadow_models": mem.get("shadow_models", 0), **settings}
    params.update({f"train.{k}": v for k, v in (mem.get("train") or {}).items() if k in RECIPE_PARAMS})
    return {k: v for k, v in params.items() if v is not None}


def run_metrics(result: dict[str, Any]) -> dict[str, float]:
    """Each group's AUC with both ends, ε lower bounds, the calibration gap."""
    risk = result["risk"]
    metrics: dict[str, float] = {}
    for g in risk.get("groups") or []:
        metrics.update({f"auc.{g['group']}": g["auc"], f"auc_lo.{g['group']}": g["auc_ci"][0],
                        f"auc_hi.{g['group']}": g["auc_ci"][1]})
    if risk.get("epsilon"):
        metrics["eps_lb.multi_run"] = risk["epsilon"]["eps_lb"]
    if result.get("one_run"):
        metrics["eps_lb.one_run"] = result["one_run"]["eps_lb"]
    if risk.get("calibration"):
        metrics["shadow_train_gap"] = risk["calibration"]["train_gap"]
    return {k: float(v) for k, v in metrics.items()}


def run_tags(result: dict[str, Any]) -> dict[str, str]:
    risk = result["risk"]
    tags = {"bnmem.level": risk["level"], "bnmem.level_lower": risk["level_lower"],
            "bnmem.level_upper": risk["level_upper"], "bnmem.schema_version": result.get("schema_version", "")}
    if risk.get("gate"):
        tags.update({"bnmem.gate": risk["gate"]["state"], "bnmem.gate_budget": risk["gate"]["budget"]})
    return tags


def experiment_id(client: Any) -> str:
    """The active experiment: ``MLFLOW_EXPERIMENT_ID``, else ``MLFLOW_EXPERIMENT_NAME`` (created if new), else
    MLflow's Default experiment ("0")."""
    if os.environ.get("MLFLOW_EXPERIMENT_ID"):
        return os.environ["MLFLOW_EXPERIMENT_ID"]
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if not name:
        return "0"
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found is not None else client.create_experiment(name)


def log_audit_or_warn(result: dict[str, Any], out: Path, settings: dict[str, Any]) -> dict[str, str] | None:
    """:func:`log_audit`, or one warning line on stderr and None when the tracker fails (the audit stands)."""
    import sys

    try:
        return log_audit(result, out, settings)
    except Exception as e:  # noqa: BLE001 - any tracker failure (network, store, MLflow's own errors) is one line
        lines = str(e).strip().splitlines()
        why = f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]
        print(f"bnmem: warning: --mlflow: the audit was not logged ({why}); its files are in {out}/ and the "
              "gate's answer stands", file=sys.stderr, flush=True)
        return None


def log_audit(result: dict[str, Any], out: Path, settings: dict[str, Any]) -> dict[str, str]:
    """Log a finished audit in ``out`` as one MLflow run, through a client of its own: the process's MLflow
    settings (tracking URI, active run) are read, never changed.

    Returns:
        ``{"tracking_uri", "experiment_id", "run_id"}``.
    """
    mlflow = require_mlflow()
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    from bnmem.auditing.html import HTML_FILE, write_audit_report

    if not (out / HTML_FILE).exists():
        write_audit_report(out)
    parent = mlflow.active_run()
    uri = mlflow.get_tracking_uri() if parent is not None else tracking_uri(mlflow)
    with file_store_allowed(uri):
        client = MlflowClient(tracking_uri=uri)
        exp = parent.info.experiment_id if parent is not None else experiment_id(client)
        tags = run_tags(result) | ({"mlflow.parentRunId": parent.info.run_id} if parent is not None else {})
        run = client.create_run(exp, run_name=f"bnmem audit: {result['model']['class']}", tags=tags)
        rid, now = run.info.run_id, int(time.time() * 1000)
        try:
            client.log_batch(rid, params=[Param(k, str(v)) for k, v in run_params(result, settings).items()],
                             metrics=[Metric(k, v, now, 0) for k, v in run_metrics(result).items()])
            for name in ("audit.json", "audit.md", HTML_FILE, "exposure.csv"):
                if (out / name).exists():
                    client.log_artifact(rid, str(out / name))
        except BaseException:
            client.set_terminated(rid, "FAILED")
            raise
        client.set_terminated(rid, "FINISHED")
    return {"tracking_uri": uri, "experiment_id": exp, "run_id": rid}
