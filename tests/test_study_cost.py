"""A study's time estimate calibrated on a pilot run (bnmem.study.cost): a job counts with every task its cell
plan gave the graph, and a confirmatory pilot is read with its own seeds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bnmem import io
from bnmem.analysis_plan import CONFIRMATORY_KEY
from bnmem.names import STUDY_FILE
from bnmem.study import build_jobs, load_study
from bnmem.study import cost

ONE_CELL = {"name": "c", "data": {"dataset": "digits", "train_size": 120}, "train": {"epochs": 1, "batch_size": 32},
            "grid": {"norms": ["batch", "none"], "seeds": [0], "replicates": 1,
                     "outliers": [{"label_noise": 0.05}], "recipes": ["shared"]}}


def _study(tmp_path: Path, lenses: dict, name: str = "s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**ONE_CELL, "lenses": lenses}))
    return load_study(path)


@pytest.fixture
def fixed_step(monkeypatch):
    """A constant step time: the calibration divides by the step time it multiplies by, so any value does (and
    timing a real step would only slow the test)."""
    monkeypatch.setattr(cost, "step_seconds", lambda *args, **kwargs: 1e-4)


def test_a_pilot_counts_a_lira_cell_with_the_seconds_of_its_shadow_chunks(tmp_path, fixed_step):
    """A lira cell's shadow models train in chunks that run as graph tasks of their own before the lens job, each
    timed by its DONE marker: the calibrated estimate of the cell is the lens job's seconds plus its chunks', and a
    study with twice the shadow models is estimated at twice that."""
    from bnmem.shadow.training import chunk_dir

    study = _study(tmp_path, {"lira": {"shadow_models": 4, "chunk_size": 2}})
    jobs = build_jobs(study)[1]
    (job,) = jobs
    run = tmp_path / "pilot"
    work = job.work.at(run)
    io.mark_done(work.out, {"lens": "lira", "seconds": 5.0})
    chunk_seconds = iter([3.0, 4.0, 6.0, 7.0])
    for norm in work.cfg.norms:
        for c in work.cfg.chunks():
            io.mark_done(chunk_dir(work.out / norm, c), {"norm": norm, "models": c, "seconds": next(chunk_seconds)})
    assert next(chunk_seconds, None) is None  # two norms of two chunks each: every chunk has its marker
    cal = cost.calibrate(run, jobs)
    assert cost.estimate_seconds(jobs, cal)[job.id] == pytest.approx(5.0 + 3.0 + 4.0 + 6.0 + 7.0)
    assert "for lira (its DONE markers)" in cal.source
    bigger = build_jobs(_study(tmp_path, {"lira": {"shadow_models": 8, "chunk_size": 2}}, "big.yaml"))[1]
    assert cost.estimate_seconds(bigger, cal)[bigger[0].id] == pytest.approx(2 * 25.0)

    # a chunk whose marker recorded no seconds: the cell is not measured, lira keeps its declared factor
    io.mark_done(chunk_dir(work.out / "none", work.cfg.chunks()[0]), {"norm": "none"})
    source = cost.calibrate(run, jobs).source
    assert "lira (finished, but its DONE recorded no seconds)" in source and "for no lens" in source


def test_a_confirmatory_pilot_is_calibrated_with_its_derived_seeds(tmp_path, fixed_step):
    """A confirmatory run's seeds derive from the key its study.json records: the pilot's jobs are planned with
    them, so its shared-training job finds the runs it wrote under those seeds (with the study's declared seeds
    it found none and kept its declared factor)."""
    from bnmem.design import pilot_jobs
    from bnmem.provenance import record_key

    study = _study(tmp_path, {"memorize": {}, "gradnorms": {}})
    record = {"seed_derivation": 2, "plan_sha256": "p" * 64, "source_sha256": "s" * 64, "study": "c",
              "study_sha256": "f" * 64, "resolved_study_sha256": "r" * 64}
    run = tmp_path / "pilot"
    io.write_json(run / STUDY_FILE, {**study.model_dump(mode="json"), CONFIRMATORY_KEY: record})
    jobs = pilot_jobs(run)
    assert [j.id for j in jobs] == [j.id for j in build_jobs(study)[1]]
    shared = [j for j in jobs if j.lens == "shared-training"]
    assert len(shared) == 2
    derived = [j.work.seeds for j in shared]
    assert derived == [j.work.seeds for j in build_jobs(study, record_key(record))[1] if j.lens == "shared-training"]
    assert all(seeds != (0,) for seeds in derived)  # not the study's declared seed
    for j in shared:  # the runs each shared job wrote, as a finished pilot holds them
        for t in j.work.at(run).targets:
            for s in t.seeds:
                io.mark_done(t.folder / j.work.norm / f"seed{s}", {"epochs": 1, "seconds": 2.0})
    cal = cost.calibrate(run, jobs)
    assert "shared-training" in cal.factors
    assert sum(cost.estimate_seconds(jobs, cal)[j.id] for j in shared) == pytest.approx(2 * 2.0)
    assert "shared-training" not in cost.calibrate(run, build_jobs(study)[1]).factors
