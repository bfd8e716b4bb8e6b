"""The plan a reader can check: `bnmem plan`'s hash, study.json's record before the first job, the headline."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from bnmem import io
from bnmem.analysis_plan import PLAN_VERSION, plan_record, plan_sha256, render_markdown
from bnmem.cli import main
from bnmem.analysis_plan import CONFIRMATORY_KEY, EXPLORATORY_SEEN
from bnmem.report.preregistration import CHANGED, FIXED, UNRECORDED, check_plan, run_label

ROOT = Path(__file__).resolve().parents[1]
STUDY = {"name": "prereg", "data": {"dataset": "digits", "train_size": 120},
         "train": {"epochs": 1, "batch_size": 32},
         "grid": {"norms": ["batch", "none"], "seeds": [0], "outliers": [{"label_noise": 0.05}]},
         "lenses": {"memorize": {}}}


def test_plan_command_prints_the_document_and_the_hash_of_its_full_text(capsys):
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    doc = render_markdown()
    assert out.startswith(doc) and out.rstrip().endswith(f"plan {PLAN_VERSION} sha256 {plan_sha256()}")
    assert plan_sha256() == hashlib.sha256(doc.encode("utf-8")).hexdigest()
    # docs/analysis-plan.md is that document, so `sha256sum docs/analysis-plan.md` checks the hash
    assert hashlib.sha256((ROOT / "docs" / "analysis-plan.md").read_bytes()).hexdigest() == plan_sha256()
    assert main(["plan", "--hash-only"]) == 0
    assert capsys.readouterr().out.strip() == f"plan {PLAN_VERSION} sha256 {plan_sha256()}"


def test_the_hash_covers_rules_thresholds_and_checkpoints(monkeypatch):
    """Changing any rule text or threshold the document shows changes the hash."""
    import bnmem.analysis_plan as ap

    before = plan_sha256()
    monkeypatch.setitem(ap.PLAN, "6", ap.PLAN["6"].__class__(**{**ap.PLAN["6"].__dict__,
                                                               "thresholds": "a different margin"}))
    assert plan_sha256() != before


def test_run_records_the_plan_before_the_first_job(tmp_path, monkeypatch):
    """The record is in study.json when the first job is submitted; a resumed run keeps the recorded one."""
    import bnmem.study.execute as study_run
    from bnmem.study import load_study

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(STUDY))
    out = tmp_path / "run"
    seen = []

    class Stop(Exception):
        pass

    def first_job(*args, **kwargs):
        seen.append(io.read_json(out / "study.json").get("analysis_plan"))
        raise Stop

    monkeypatch.setattr(study_run, "run_graph", first_job)
    with pytest.raises(Stop):
        study_run.run_study(load_study(path), out, progress=False)
    assert seen == [plan_record()] and seen[0]["version"] == PLAN_VERSION
    # the plan changes after the run started: resuming keeps the record made before the first job
    doc = io.read_json(out / "study.json")
    doc["analysis_plan"] = {"version": "2.0", "sha256": "0" * 64}
    io.write_json(out / "study.json", doc)
    with pytest.raises(Stop):
        study_run.run_study(load_study(path), out, progress=False)
    assert io.read_json(out / "study.json")["analysis_plan"]["version"] == "2.0"


def test_headline_says_fixed_changed_or_unrecorded(tmp_path):
    assert check_plan(tmp_path).state == UNRECORDED
    assert "recorded no plan" in check_plan(tmp_path).headline()
    (tmp_path / "study.json").write_text(json.dumps({"name": "x", "analysis_plan": plan_record()}))
    fixed = check_plan(tmp_path)
    assert fixed.state == FIXED
    # the first screen names the hash by its first 12 digits; the plan block in Details prints it in full
    assert fixed.headline(short=True).startswith(
        f"Decided under analysis plan {PLAN_VERSION} (sha256 {plan_sha256()[:12]}…; in full under Analysis plan), "
        "recorded before the first job in study.json")
    assert fixed.headline().startswith(f"Decided under analysis plan {PLAN_VERSION} (sha256 {plan_sha256()}), "
                                       "recorded before the first job in study.json")
    from bnmem.report.html import plan_block
    assert plan_sha256() in plan_block()
    (tmp_path / "study.json").write_text(json.dumps({"analysis_plan": {"version": "2.0", "sha256": "ab" * 32}}))
    changed = check_plan(tmp_path)
    assert changed.state == CHANGED and changed.recorded_version == "2.0"
    line = changed.headline()
    assert "changed after the run started" in line and "plan 2.0 (sha256 " + "ab" * 32 in line
    assert f"current analysis plan {PLAN_VERSION}" in line


def test_report_headline_and_csv_carry_the_plan(tmp_path):
    from bnmem.report.build import build_report

    run = tmp_path / "mem"
    run.mkdir()
    io.write_json(run / "metrics.json", {
        "lens": "memorize", "batch": {"per_seed": {"0": {"noisy_acc": [0.1, 0.5]}, "1": {"noisy_acc": [0.2, 0.6]}},
                                      "final": {"noisy_acc": 0.55}},
        "none": {"per_seed": {"0": {"noisy_acc": [0.0, 0.2]}, "1": {"noisy_acc": [0.1, 0.2]}},
                 "final": {"noisy_acc": 0.2}},
        "conditions": {"dataset": "digits", "norms": ["batch", "none"], "seeds": [0, 1], "label_noise": 0.05},
        "dataset": {"dataset": "digits", "n_noisy": 10, "n_ood": 0}})
    io.mark_done(run)
    (run / "study.json").write_text(json.dumps({"name": "demo", "analysis_plan": plan_record()}))
    rep = build_report(run)
    html = rep.html.read_text(encoding="utf-8")
    md = rep.markdown.read_text(encoding="utf-8")
    assert check_plan(run).state == FIXED and "recorded before the first job" in html
    assert plan_sha256() in html and "recorded before the first job" in md
    import csv

    rows = list(csv.DictReader(rep.csv.open(encoding="utf-8")))
    assert {r["plan_sha256"] for r in rows} == {plan_sha256()} and "vs_paper" in rows[0]
    # a study whose results were seen while the plan was written: exploratory, in full, the same words everywhere
    label = f"exploratory: plan {PLAN_VERSION} was written after seeing this study's results"
    assert EXPLORATORY_SEEN == label and run_label(run) == label
    assert f'id="run-label"><b>{label}</b>' in html.replace("&#x27;", "'")
    assert f"**{label}**" in md
    assert {r["run_label"] for r in rows} == {label}


def test_run_label_is_confirmatory_only_with_seeds_from_this_plan(tmp_path):
    """Confirmatory needs study.json's confirmatory record to name the hash of the plan that decides; a seen
    study is exploratory in the plan's words; any other run is exploratory with its reason."""
    def label(doc):
        (tmp_path / "study.json").write_text(json.dumps(doc))
        return run_label(tmp_path)

    assert label({"name": "mine"}).startswith("exploratory: this run's seeds were not derived")
    assert label({"name": "demo"}) == EXPLORATORY_SEEN
    mine = {CONFIRMATORY_KEY: {"plan_version": PLAN_VERSION, "plan_sha256": plan_sha256()}}
    assert label({"name": "demo", **mine}).startswith("confirmatory: ")  # fresh seeds, even for the demo
    old = {CONFIRMATORY_KEY: {"plan_version": "3.0", "plan_sha256": "ab" * 32}}
    assert label({"name": "mine", **old}).startswith("exploratory: this run's seeds were derived from the hash "
                                                     "of plan 3.0")
    assert label({"name": "demo", **old}) == EXPLORATORY_SEEN


def test_mitigate_lira_keep_seed_moves_with_the_replicate(tmp_path):
    """Plan 3.0, claim 6: the mitigate lens's LiRA keep matrix is a seed like any other (replicate k: +k)."""
    from bnmem.study import load_study, build_jobs

    doc = {**STUDY, "grid": {**STUDY["grid"], "replicates": 3},
           "lenses": {"mitigate": {"lambdas": [1.0], "fixed_epoch": 1, "lira_models": 4}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    _, jobs = build_jobs(load_study(path))
    seeds = sorted(j.config.keep_seed for j in jobs if j.lens == "mitigate")
    assert seeds == [0, 1, 2]


def test_bnmem_report_checks_the_plan_once_per_run(tmp_path, monkeypatch, capsys):
    """`bnmem report` reads study.json and hashes the plan once (RunData.plan), however many parts of the
    report (headline, plan line, summary.csv's plan_sha256, the plan block, the CLI's line) print it."""
    import bnmem.analysis_plan as plan
    import bnmem.report.preregistration as prereg

    run = tmp_path / "mem"
    run.mkdir()
    io.write_json(run / "metrics.json", {
        "lens": "memorize", "batch": {"per_seed": {"0": {"noisy_acc": [0.1, 0.5]}}, "final": {"noisy_acc": 0.5}},
        "none": {"per_seed": {"0": {"noisy_acc": [0.0, 0.2]}}, "final": {"noisy_acc": 0.2}},
        "conditions": {"dataset": "digits", "norms": ["batch", "none"], "seeds": [0], "label_noise": 0.05}})
    (run / "study.json").write_text(json.dumps({"name": "demo", "analysis_plan": plan_record()}))
    calls = {"study.json": 0, "render": 0}
    read, render = prereg._study_doc, plan.render_markdown

    def counted_read(root):
        calls["study.json"] += 1
        return read(root)

    def counted_render():
        calls["render"] += 1
        return render()

    monkeypatch.setattr(prereg, "_study_doc", counted_read)
    monkeypatch.setattr(plan, "render_markdown", counted_render)  # plan_sha256 renders the plan to hash it
    assert main(["report", str(run)]) == 0
    assert calls == {"study.json": 1, "render": 1}
    monkeypatch.undo()
    assert capsys.readouterr().out.startswith(check_plan(run).headline() + "\n")
