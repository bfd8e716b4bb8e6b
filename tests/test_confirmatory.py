"""Confirmatory runs (`bnmem run --confirmatory`): seeds derived from the plan's hash, recorded, and labelled."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from bnmem import io
from bnmem.analysis_plan import CONFIRMATORY_KEY, PLAN_VERSION, plan_sha256
from bnmem.cli import main
from bnmem.report.preregistration import run_label
from bnmem.study import load_study, plan
from bnmem.study.confirmatory import MODEL_SEED_BOUND, derive, replicate_seeds

# The studies run in this process (--workers 1): their results are the same bytes for any worker count
# (tests/test_study_graph.py), and spawned workers would import torch again.
IN_PROCESS = ("--workers", "1")

STUDY = {"name": "conf", "data": {"dataset": "digits", "train_size": 120},
         "train": {"epochs": 1, "batch_size": 32},
         "grid": {"norms": ["batch", "none"], "seeds": [0, 1], "replicates": 2,
                  "outliers": [{"label_noise": 0.05}, {}]},
         "lenses": {"memorize": {}, "lira": {"shadow_models": 4}, "theory": {"steps": 5, "plot": False}}}


def _study(tmp_path: Path, doc: dict = STUDY) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _seeds_of(jobs) -> dict[str, tuple]:
    """Every seed a job config carries: corruption, models, keep matrix, query permutation, study-wide seed."""
    out = {}
    for j in jobs:
        c = j.config
        out[j.id] = (c.get("data", {}).get("seed"), tuple(c.get("seeds") or ()), c.get("keep_seed"),
                     c.get("query_seed"), c.get("seed"))
    return out


def test_one_changed_character_in_the_plan_changes_every_seed(tmp_path, monkeypatch):
    import bnmem.analysis_plan as ap

    study = load_study(_study(tmp_path))
    before = _seeds_of(plan(study, plan_sha256())[1])
    text = ap.render_markdown()
    monkeypatch.setattr(ap, "render_markdown", lambda: text[:-2] + ("x" if text[-2] != "x" else "y") + text[-1])
    assert hashlib.sha256(ap.render_markdown().encode()).hexdigest() == plan_sha256() != hashlib.sha256(
        text.encode()).hexdigest()
    after = _seeds_of(plan(study, plan_sha256())[1])
    assert before.keys() == after.keys()
    for job, (b, a) in ((k, (before[k], after[k])) for k in before):
        for old, new in zip(b, a):
            if old is None or old == ():
                assert new == old, job
            elif isinstance(old, tuple):
                assert not set(old) & set(new), job  # every model seed moved
            else:
                assert old != new, job


def test_seeds_are_the_documented_hash_distinct_and_in_range():
    sha = "ab" * 32
    reps = replicate_seeds(sha, 3, 4)
    expected = int.from_bytes(hashlib.sha256(f"bnmem-confirmatory:{sha}:data:1".encode()).digest()[:8], "big") % 2**31
    assert reps[1].data == expected == derive(sha, "data", 1)
    models = [m for r in reps for m in r.models]
    assert len(set(models)) == len(models) and all(0 <= m < MODEL_SEED_BOUND for m in models)
    assert replicate_seeds(sha, 5, 4)[:3] == reps  # more replicates leave the earlier ones alone
    # the cells of one replicate share its seeds; replicates differ
    assert reps[0] != reps[1]


def test_confirmatory_cells_take_the_derived_seeds_and_exploratory_ones_the_offsets(tmp_path):
    study = load_study(_study(tmp_path))
    sha = plan_sha256()
    cells, jobs = plan(study, sha)
    reps = replicate_seeds(sha, 2, 2)
    for j in jobs:
        if j.lens == "memorize":
            k = int(j.id.split("/")[0][-1])
            assert j.config["data"]["seed"] == reps[k].data and j.config["seeds"] == list(reps[k].models)
        if j.lens == "lira":
            k = int(j.id.split("/")[0][-1])
            assert (j.config["keep_seed"], j.config["query_seed"]) == (reps[k].keep, reps[k].query)
    plain = {j.id: j.config for j in plan(study)[1]}
    assert plain["digits-lenet-flip0.05-r1/memorize"]["seeds"] == [1000, 1001]


def test_run_records_the_derived_seeds_and_refuses_a_rerun_under_another_plan(tmp_path, monkeypatch):
    import bnmem.analysis_plan as ap

    doc = {**STUDY, "grid": {**STUDY["grid"], "replicates": 1, "outliers": [{"label_noise": 0.05}]},
           "lenses": {"memorize": {}}}
    path, out = _study(tmp_path, doc), tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--confirmatory", *IN_PROCESS]) == 0
    rec = io.read_json(out / "study.json")[CONFIRMATORY_KEY]
    seeds = replicate_seeds(plan_sha256(), 1, 2)[0]
    assert rec["plan_sha256"] == plan_sha256() and rec["plan_version"] == PLAN_VERSION
    assert rec["replicates"] == {"r0": seeds.record()}
    config = io.read_json(out / "digits-lenet-flip0.05" / "memorize" / "config.json")
    assert config["seeds"] == list(seeds.models) and config["data"]["seed"] == seeds.data
    assert run_label(out).startswith(f"confirmatory: every seed of this run was derived from the hash of plan "
                                     f"{PLAN_VERSION}")
    # resuming under the same plan is fine; without the flag, or under another plan, it is refused
    assert main(["run", str(path), "--out", str(out), "--quiet", "--confirmatory", *IN_PROCESS]) == 0
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    text = ap.render_markdown()
    monkeypatch.setattr(ap, "render_markdown", lambda: text + " ")
    assert main(["run", str(path), "--out", str(out), "--quiet", "--confirmatory"]) == 2
    # read under the changed plan, the run is relabelled exploratory, naming the plan its seeds came from
    assert run_label(out).startswith(f"exploratory: this run's seeds were derived from the hash of plan {PLAN_VERSION}")


def test_a_run_without_the_flag_is_exploratory_and_cannot_become_confirmatory(tmp_path):
    doc = {**STUDY, "grid": {**STUDY["grid"], "replicates": 1, "outliers": [{"label_noise": 0.05}]},
           "lenses": {"memorize": {}}}
    path, out = _study(tmp_path, doc), tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--quiet", *IN_PROCESS]) == 0
    assert CONFIRMATORY_KEY not in io.read_json(out / "study.json")
    assert run_label(out).startswith("exploratory: this run's seeds were not derived from the hash")
    assert main(["run", str(path), "--out", str(out), "--quiet", "--confirmatory"]) == 2


@pytest.mark.skipif(not (Path(__file__).resolve().parents[1] / "studies" / "demo.yaml").exists(), reason="no demo")
def test_the_demo_study_without_the_flag_plans_the_usual_seeds_and_is_exploratory(tmp_path):
    from bnmem.analysis_plan import EXPLORATORY_SEEN
    from bnmem.study.run import prepare

    demo = load_study(Path(__file__).resolve().parents[1] / "studies" / "demo.yaml")
    cells, _ = plan(demo)
    assert all(c.derived is None for c in cells)
    assert {c.conditions()["seeds"] == [1000 * c.replicate] for c in cells} == {True}  # the usual: 0, 1000, 2000
    prepare(tmp_path, demo)  # study.json as `bnmem run studies/demo.yaml` writes it before its first job
    assert CONFIRMATORY_KEY not in io.read_json(tmp_path / "study.json")
    assert run_label(tmp_path) == EXPLORATORY_SEEN
