"""A lira cell is planned once and loads its data and models as few times as the work needs (issues 28, 37):
the dataset at most once per process per cell (none in the driver that lists the jobs), each model once (the
query jobs measure γ/σ while it is loaded), finished chunks skipped without loading anything, asking what is
pending never trains, and `bnmem run` plans the study once."""

from __future__ import annotations

import collections
import json
import os
import pickle
from functools import partial
from pathlib import Path

import pytest

from bnmem import io
from bnmem.config import DataConfig, TrainConfig
from bnmem.data import loaded
from bnmem.lenses.lira import LiraConfig, run_lira
from bnmem.lenses.lira import shadow_gamma_sigma as sgs
from bnmem.shadow import query, training
from bnmem.shadow.work import ShadowWork


def _config(**kw) -> LiraConfig:
    return LiraConfig(data=DataConfig(dataset="digits", label_noise=0.05, train_size=120), norms=["batch", "none"],
                      shadow_models=4, chunk_size=2, views=["identity"], train=TrainConfig(epochs=1, batch_size=32),
                      **kw)


def _counting_loads(mp: pytest.MonkeyPatch, counts: collections.Counter) -> None:
    """Count every dataset load (the one loader :func:`bnmem.data.loaded.load_once` calls), from an empty cache."""
    loaded.forget()
    original = loaded.load_dataset
    mp.setattr(loaded, "load_dataset", lambda cfg: (counts.update(["data"]), original(cfg))[1])


@pytest.fixture(scope="module")
def counted_run(tmp_path_factory):
    """A tiny lira run in this process, counting dataset and shadow-model loads."""
    counts: collections.Counter = collections.Counter()
    mp = pytest.MonkeyPatch()
    _counting_loads(mp, counts)
    for module in (query, training):
        original = module.load_shadow_model
        mp.setattr(module, "load_shadow_model",
                   lambda *a, _f=original, **k: (counts.update(["model"]), _f(*a, **k))[1])
    out = tmp_path_factory.mktemp("lira")
    try:
        run_lira(_config(), out, progress=False)
    finally:
        mp.undo()
        loaded.forget()
    return out, counts


def test_data_and_models_are_loaded_once_per_process(counted_run):
    """One process, one cell: the data once (was: once in the lens and once per training and query chunk, 9
    here), each model once."""
    _, counts = counted_run
    assert counts["data"] == 1, counts
    assert counts["model"] == 2 * 4, counts  # the query's loads only: γ/σ is measured there


def test_gamma_sigma_from_the_query_equals_loading_the_models_again(counted_run, monkeypatch):
    """The oracle: shadow_gamma_sigma.json as the models loaded afresh give it (the path of older runs)."""
    out, _ = counted_run
    written = (out / sgs.SHADOW_GAMMA_SIGMA).read_bytes()
    markers = sorted((out / "batch" / query.QUERY_DIR).glob("*.json"))
    assert markers and all(len(io.read_json(m)[query.GAMMA_SIGMA_KEY]) == 2 for m in markers)
    assert not any(query.GAMMA_SIGMA_KEY in io.read_json(m) for m in (out / "none" / query.QUERY_DIR).glob("*.json"))
    monkeypatch.setattr(sgs, "chunk_bn_ratios", lambda cfg, norm_dir: None)
    sgs.shadow_gamma_sigma(_config(), out)
    assert (out / sgs.SHADOW_GAMMA_SIGMA).read_bytes() == written
    doc = json.loads(written)
    assert doc["summary"]["n_layers"] >= 1 and len(doc["summary"]["median_ratio"]["per_model"]) == 4


def test_a_finished_cell_loads_nothing_and_lists_nothing(counted_run, monkeypatch):
    out, _ = counted_run
    cfg = _config()
    loaded.forget()
    monkeypatch.setattr(loaded, "load_dataset", lambda cfg: pytest.fail("a finished chunk loaded the data"))
    chunk = training.ShadowChunk.of(cfg, "batch", out / "batch", cfg.chunks()[0])
    assert query.query_shadow_chunk(chunk)["skipped"] is True
    assert training.train_shadow_chunk(chunk)["skipped"] is True
    work = ShadowWork.of(cfg, out)
    assert work.recipe_specs() == work.train_specs() == work.query_specs() == []


def test_chunk_jobs_receive_the_typed_config_and_never_validate_it(tmp_path, monkeypatch):
    """The work validated the config once; its chunks carry that object, and a job does not validate."""
    from bnmem.shadow.config import ShadowConfig

    cfg = _config()
    work = ShadowWork.of(cfg, tmp_path)
    chunks = work.train_specs()
    assert len(chunks) == 4 and all(c.config is cfg for c in chunks)

    def refuse(*a, **k):
        raise AssertionError("a chunk job validated its config again")

    monkeypatch.setattr(ShadowConfig, "model_validate", classmethod(refuse))
    monkeypatch.setattr(LiraConfig, "model_validate", classmethod(refuse))
    assert training.train_shadow_chunk(chunks[0])["skipped"] is False
    assert query.query_shadow_chunk(pickle.loads(pickle.dumps(chunks[0])))["skipped"] is False  # as a worker gets it


# --- worker processes ----------------------------------------------------------------------------


def _counted(job, spec):
    """Run ``job(spec)`` in a worker; report the worker and how many datasets it has loaded so far."""
    summary = job(spec)
    return {**summary, "pid": os.getpid(), "loads": sum(loaded.LOADS.values())}


def test_two_workers_load_the_data_at_most_once_each_and_the_driver_never(tmp_path, monkeypatch):
    """A per-norm cell's whole graph (recipe, chunks, lens job) over two worker processes: each worker loads
    the dataset at most once whatever it runs, and the driver, which lists every task, loads it never."""
    from bnmem.executors import get_executor
    from bnmem.study import Study, build_jobs
    from bnmem.study.graph import study_tasks

    study = Study.model_validate({
        "name": "once", "data": {"dataset": "digits", "train_size": 150, "val_fraction": 0.2,
                                 "label_noise": 0.05},
        "train": {"epochs": 1, "batch_size": 32}, "grid": {"norms": ["batch", "none"], "seeds": [0],
                                                            "recipes": ["per-norm"], "lr_grid": [0.05, 0.1]},
        "lenses": {"lira": {"shadow_models": 4, "chunk_size": 1, "views": ["identity"]}}})
    _, jobs = build_jobs(study)
    counts: collections.Counter = collections.Counter()
    _counting_loads(monkeypatch, counts)
    tasks = [t.__class__(t.id, partial(_counted, t.fn), t.specs, t.deps, t.after, t.cost)
             for t in study_tasks(jobs, [j.at(tmp_path) for j in jobs], estimate=False)]
    ex = get_executor("local", progress=False, workers=2)
    try:
        results = ex.run_graph(tasks)
    finally:
        ex.close()
    summaries = [s for rs in results.values() for s in rs]
    # the setting's recipe selection, 8 training and 8 query chunks, the lens job
    assert len(summaries) == 1 + 2 * 4 + 2 * 4 + 1
    assert all(s.get("status") != "failed" and not s.get("failed") for s in summaries), summaries
    by_worker = collections.defaultdict(int)
    for s in summaries:
        by_worker[s["pid"]] = max(by_worker[s["pid"]], s["loads"])
    assert set(by_worker.values()) <= {0, 1} and sum(by_worker.values()) >= 1, by_worker
    assert counts["data"] == 0 and os.getpid() not in by_worker
    lira = next(j for j in jobs if j.lens == "lira")
    assert io.is_done(tmp_path / lira.folder) and (tmp_path / lira.folder / "metrics.json").exists()


# --- one plan per `bnmem run` ---------------------------------------------------------------------


@pytest.mark.parametrize("extra", [["--dry-run"], ["--workers", "1"], ["--workers", "1", "--confirmatory"]])
def test_bnmem_run_plans_the_study_once(tmp_path, monkeypatch, extra):
    """Every name bound to bnmem.study.run.build_jobs is counted: a dry run, a run and a confirmatory run plan once."""
    import sys

    import subprocess

    import bnmem.provenance as prov
    import bnmem.study.run as study_run
    from bnmem.cli import main

    # A confirmatory start is gated on a clean checkout and logged there: a clean one stands in for the project's.
    root = tmp_path / "checkout"
    (root / "docs").mkdir(parents=True)
    (root / prov.ATTEMPTS_LOG).write_text("")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                       check=True, capture_output=True)
    monkeypatch.setattr(prov, "checkout_root", lambda: root)

    original, calls = study_run.build_jobs, []

    def counted(*a, **k):
        calls.append(a[1:] or k)
        return original(*a, **k)

    import bnmem.cli.commands.run  # noqa: F401 - bound names of every loaded module are patched below
    import bnmem.study.execute  # noqa: F401
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("bnmem") and getattr(module, "build_jobs", None) is original:
            monkeypatch.setattr(module, "build_jobs", counted)
    path = Path(tmp_path / "s.yaml")
    path.write_text("name: once\nlenses: {theory: {steps: 5, plot: false}}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet", *extra]) == 0
    assert len(calls) == 1, calls


def test_no_module_outside_data_loads_a_dataset_itself():
    """Every lens, the shared training runs, DP shadow models and the audit read their dataset through the
    process's cache (:func:`bnmem.data.loaded.load_once`): no call of ``load_dataset`` outside ``bnmem/data``."""
    import re

    src = Path(__file__).resolve().parents[1] / "src" / "bnmem"
    calls = [f"{p.relative_to(src)}:{i}" for p in src.rglob("*.py") if p.parent.name != "data"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bload_dataset\(", line)]
    assert calls == []


@pytest.mark.parametrize("lens", ["memorize", "gamma-sigma", "gradnorms"])
def test_a_lens_run_twice_in_one_process_loads_its_data_once(lens, tmp_path, monkeypatch):
    """The per-(norm, seed) lenses' jobs of one cell in one worker: the second job reuses the first's dataset."""
    from bnmem.lenses import registry

    monkeypatch.setattr(loaded, "_LOADED", collections.OrderedDict())
    monkeypatch.setattr(loaded, "LOADS", collections.Counter())
    spec = registry.get(lens)
    cfg = spec.config.model_validate({"data": {"dataset": "digits", "train_size": 120, "label_noise": 0.05},
                                      "train": {"epochs": 1, "batch_size": 32}, "seeds": [0],
                                      "norms": ["batch"]})
    for k in range(2):
        spec.run(cfg, tmp_path / f"{lens}{k}", progress=False)
    assert sum(loaded.LOADS.values()) == 1


def test_shared_training_and_recipe_selection_load_their_dataset_once(tmp_path, monkeypatch):
    """The study's own jobs are cell plans too: a norm's shared runs and a setting's recipe selection each load
    the cell's dataset once (from an empty cache: as the first job of a fresh worker) and run from their plans."""
    from bnmem.study import Study, build_jobs
    from bnmem.study.run import run_job

    study = Study.model_validate({
        "name": "shared", "data": {"dataset": "digits", "train_size": 120, "val_fraction": 0.2, "label_noise": 0.05},
        "train": {"epochs": 1, "batch_size": 32},
        "grid": {"norms": ["batch", "none"], "seeds": [0], "recipes": ["shared", "per-norm"], "lr_grid": [0.05],
                 "max_epochs": 1},
        "lenses": {"memorize": {}, "gamma-sigma": {}}})
    _, jobs = build_jobs(study)
    own = [j for j in jobs if j.lens in ("shared-training", "recipe-selection")]
    assert sorted(j.lens for j in own) == ["recipe-selection", "shared-training"]  # gamma-sigma: BN only
    for job in own:
        counts: collections.Counter = collections.Counter()
        _counting_loads(monkeypatch, counts)
        summary = run_job(job.at(tmp_path))
        assert summary["status"] == "done", summary
        assert counts["data"] == 1, (job.id, counts)
        assert job.at(tmp_path).work.finished()
    loaded.forget()
