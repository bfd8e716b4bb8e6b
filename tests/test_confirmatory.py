"""Confirmatory runs (`bnmem run --confirmatory`): seeds derived from the plan's and the deciding source's hash,
recorded with the commit, refused on a modified checkout, logged in the attempts log, and labelled."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import bnmem.provenance as prov
from bnmem import io
from bnmem.analysis_plan import CONFIRMATORY_KEY, PLAN_VERSION, plan_sha256
from bnmem.cli import main
from bnmem.report.preregistration import check_plan, run_label
from bnmem.study import load_study, build_jobs
from bnmem.study.confirmatory import MODEL_SEED_BOUND, current_key, derive, replicate_seeds, seed_key

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="git is not installed")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture(autouse=True)
def checkout(tmp_path_factory, monkeypatch) -> Path:
    """A clean git checkout standing in for the project's (its attempts log committed empty): every confirmatory
    start of these tests is gated on, and logged in, it, never in the real one."""
    root = tmp_path_factory.mktemp("checkout")
    _git(root, "init", "-q")
    (root / "src").mkdir()
    (root / "src" / "mod.py").write_text("x = 1\n")
    (root / "docs").mkdir()
    (root / prov.ATTEMPTS_LOG).write_text("")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "init")
    monkeypatch.setattr(prov, "checkout_root", lambda: root)
    return root

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


def _plain(job) -> dict:
    """A job's config as plain data: a lens's validated config, or its plan's data and seeds (shared runs, a
    recipe selection)."""
    p = job.work
    if hasattr(p, "cfg"):
        return p.cfg.model_dump(mode="json")
    return {"data": p.trains.data.model_dump(mode="json"), "seeds": list(p.seeds)}


def _seeds_of(jobs) -> dict[str, tuple]:
    """Every seed a job config carries: corruption, models, keep matrix, query permutation, study-wide seed."""
    out = {}
    for j in jobs:
        c = _plain(j)
        out[j.id] = (c.get("data", {}).get("seed"), tuple(c.get("seeds") or ()), c.get("keep_seed"),
                     c.get("query_seed"), c.get("seed"))
    return out


def test_one_changed_character_in_the_plan_changes_every_seed(tmp_path, monkeypatch):
    import bnmem.analysis_plan as ap

    study = load_study(_study(tmp_path))
    before = _seeds_of(build_jobs(study, current_key(study))[1])
    text = ap.render_markdown()
    monkeypatch.setattr(ap, "render_markdown", lambda: text[:-2] + ("x" if text[-2] != "x" else "y") + text[-1])
    assert hashlib.sha256(ap.render_markdown().encode()).hexdigest() == plan_sha256() != hashlib.sha256(
        text.encode()).hexdigest()
    after = _seeds_of(build_jobs(study, current_key(study))[1])
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
    sha = seed_key("ab" * 32, "cd" * 32)
    assert sha == "ab" * 32 + ":" + "cd" * 32
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
    sha = current_key(study)
    cells, jobs = build_jobs(study, sha)
    reps = replicate_seeds(sha, 2, 2)
    for j in jobs:
        if j.lens == "memorize":
            k = int(j.id.split("/")[0][-1])
            assert j.config.data.seed == reps[k].data and j.config.seeds == list(reps[k].models)
        if j.lens == "lira":
            k = int(j.id.split("/")[0][-1])
            assert (j.config.keep_seed, j.config.query_seed) == (reps[k].keep, reps[k].query)
    plain = {j.id: _plain(j) for j in build_jobs(study)[1]}
    assert plain["digits-lenet-flip0.05-r1/memorize"]["seeds"] == [1000, 1001]


def test_run_records_the_derived_seeds_and_refuses_a_rerun_under_another_plan(tmp_path, monkeypatch):
    import bnmem.analysis_plan as ap

    doc = {**STUDY, "grid": {**STUDY["grid"], "replicates": 1, "outliers": [{"label_noise": 0.05}]},
           "lenses": {"memorize": {}}}
    path, out = _study(tmp_path, doc), tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--confirmatory", *IN_PROCESS]) == 0
    rec = io.read_json(out / "study.json")[CONFIRMATORY_KEY]
    seeds = replicate_seeds(current_key(load_study(path), path), 1, 2)[0]
    assert rec["plan_sha256"] == plan_sha256() and rec["plan_version"] == PLAN_VERSION
    assert rec["source_sha256"] == prov.source_sha256() and rec["source_derivation"] == prov.SOURCE_DERIVATION
    assert rec["source_files_sha256"] == prov.files_sha256() and rec["versions"] == prov.package_versions()
    assert rec["seed_derivation"] == prov.SEED_DERIVATION == 2 and rec["study"] == "conf"
    assert rec["study_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert prov.record_key(rec) == current_key(load_study(path), path)  # the record names its whole key
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
    cells, _ = build_jobs(demo)
    assert all(c.derived is None for c in cells)
    assert {c.conditions()["seeds"] == [1000 * c.replicate] for c in cells} == {True}  # the usual: 0, 1000, 2000
    prepare(tmp_path, demo)  # study.json as `bnmem run studies/demo.yaml` writes it before its first job
    assert CONFIRMATORY_KEY not in io.read_json(tmp_path / "study.json")
    assert run_label(tmp_path) == EXPLORATORY_SEEN


# --- the deciding source, the checkout, the attempts log ----------------------------------------------------

ONE_JOB = {**STUDY, "grid": {**STUDY["grid"], "replicates": 1, "outliers": [{"label_noise": 0.05}]},
           "lenses": {"memorize": {}}}


def _copy_package(dst: Path) -> Path:
    """A copy of the bnmem package's files (no bytecode)."""
    for p in prov.PACKAGE.rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            target = dst / p.relative_to(prov.PACKAGE)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(p.read_bytes())
    return dst


def test_the_source_hash_is_the_documented_one_over_every_file_and_the_versions(tmp_path):
    pkg = _copy_package(tmp_path / "bnmem")
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"bytecode")  # compiled files are not source
    files = prov.package_files(pkg)
    rel = [p.relative_to(pkg).as_posix() for p in files]
    assert rel == sorted(rel) and "report/claims/claim6.py" in rel and "train/trainer.py" in rel
    assert {"cli/app.py", "study/run.py", "report/rundata.py", "schemas/audit.schema.json"} <= set(rel)
    assert not any("__pycache__" in r for r in rel)
    versions = {"torch": "1.0", "numpy": "2.0", "scipy": None}
    h = hashlib.sha256()
    for p, r in zip(files, rel):
        data = p.read_bytes()
        h.update(r.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    files_only = h.hexdigest()
    h.update(b"\0torch=1.0\0numpy=2.0\0scipy=-")
    assert prov.source_sha256(pkg, versions) == h.hexdigest() and prov.files_sha256(pkg) == files_only
    assert prov.source_sha256(pkg) == prov.source_sha256()  # the copy hashes as the original
    assert prov.source_sha256(pkg, {**versions, "numpy": "2.1"}) != h.hexdigest()  # a library's version counts


@pytest.mark.parametrize("edited", ["report/claims/claim6.py", "train/trainer.py", "report/rundata.py",
                                    "models/__init__.py", "schemas/audit.schema.json"])
def test_the_source_hash_and_seeds_change_when_any_file_under_the_package_changes(tmp_path, monkeypatch, edited):
    pkg = _copy_package(tmp_path / "bnmem")
    study = load_study(_study(tmp_path))
    monkeypatch.setattr(prov, "PACKAGE", pkg)
    before_hash = prov.source_sha256(pkg)
    before = _seeds_of(build_jobs(study, current_key(study))[1])
    target = pkg / edited
    target.write_bytes(target.read_bytes() + b" ")  # one character
    assert prov.source_sha256(pkg) != before_hash
    after = _seeds_of(build_jobs(study, current_key(study))[1])
    seeded = [k for k, v in before.items() if v[0] is not None or v[4] is not None]
    assert seeded and all(before[k] != after[k] for k in seeded)


def test_the_legacy_source_hash_still_checks_plan_5_records(tmp_path):
    """Derivation 1 (the files a hand-kept list named) is what plan 5.0's runs recorded: kept, by name."""
    pkg = _copy_package(tmp_path / "bnmem")
    before = prov.source_sha256_v1(pkg)
    (pkg / "train" / "trainer.py").write_text("changed\n")  # not in the legacy list
    assert prov.source_sha256_v1(pkg) == before != prov.source_sha256(pkg)
    assert prov.recorded_source_now({"source_sha256": "x"}) == prov.source_sha256_v1()
    assert prov.recorded_source_now({"source_derivation": 2}) == prov.source_sha256()


def _seeds_for(tmp_path: Path, name: str, extra: str = "") -> dict:
    """The planned seeds of STUDY under another name or with other file bytes (a comment)."""
    folder = tmp_path / f"{name}-{len(extra)}"
    folder.mkdir(exist_ok=True)
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "name": name}) + extra)
    study = load_study(path)
    return _seeds_of(build_jobs(study, current_key(study, path))[1])


def test_two_studies_never_share_a_data_draw(tmp_path):
    base = _seeds_for(tmp_path, "conf")
    assert base == _seeds_for(tmp_path, "conf")  # the same study, the same seeds
    for other in (_seeds_for(tmp_path, "conf2"), _seeds_for(tmp_path, "conf", "# a comment\n")):
        assert other.keys() == base.keys()  # job ids do not carry the study's name
        for job, seeds in base.items():
            for old, new in zip(seeds, other[job]):
                if isinstance(old, tuple):
                    assert not set(old) & set(new), job
                elif old is not None:
                    assert old != new, job
    assert {s[0] for s in base.values()} - {None}  # there was a data draw to compare


def test_a_modified_checkout_is_refused_in_one_line_naming_what(tmp_path, checkout, capsys):
    path, out = _study(tmp_path, ONE_JOB), tmp_path / "run"
    (checkout / "src" / "mod.py").write_text("x = 2\n")  # a tracked file modified
    assert main(["run", str(path), "--out", str(out), "--quiet", "--confirmatory", *IN_PROCESS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bnmem: error: --confirmatory needs an unmodified checkout")
    assert "1 tracked file(s) modified (src/mod.py)" in err
    assert not out.exists() and (checkout / prov.ATTEMPTS_LOG).read_text() == ""  # nothing written, nothing logged
    _git(checkout, "checkout", "--", "src/mod.py")
    (checkout / "studies").mkdir()
    (checkout / "studies" / "new.yaml").write_text("name: x\n")  # an untracked study
    (checkout / "notes.txt").write_text("scratch\n")  # untracked outside src/ and studies/: allowed
    assert main(["run", str(path), "--out", str(out), "--quiet", "--confirmatory", *IN_PROCESS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "1 untracked file(s) under src/ or studies/ or docs/analysis-plan.md (studies/new.yaml)" in err
    assert "notes.txt" not in err
    (checkout / "studies" / "new.yaml").unlink()
    # the attempts log may only grow: rewriting a committed line is a modification
    (checkout / prov.ATTEMPTS_LOG).write_text('{"kind": "start"}\n')
    _git(checkout, "commit", "-q", "-am", "one attempt")
    (checkout / prov.ATTEMPTS_LOG).write_text('{"kind": "resume"}\n')
    assert main(["run", str(path), "--out", str(out), "--quiet", "--confirmatory", *IN_PROCESS]) == 2
    assert "may only be appended to" in capsys.readouterr().err


def _refusal(checkout: Path, tmp_path: Path, capsys) -> str:
    out = tmp_path / "run"
    assert main(["run", str(_study(tmp_path, ONE_JOB)), "--out", str(out), "--quiet", "--confirmatory",
                 *IN_PROCESS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not out.exists() and (checkout / prov.ATTEMPTS_LOG).read_text() == ""
    return err


def test_an_untracked_file_under_src_is_refused(tmp_path, checkout, capsys):
    (checkout / "src" / "new_module.py").write_text("y = 1\n")
    assert "1 untracked file(s) under src/ or studies/ or docs/analysis-plan.md (src/new_module.py)" in _refusal(
        checkout, tmp_path, capsys)


def test_a_staged_only_change_is_refused(tmp_path, checkout, capsys):
    (checkout / "src" / "mod.py").write_text("x = 3\n")
    _git(checkout, "add", "src/mod.py")  # staged; the working copy equals the index: git diff shows nothing
    assert _git(checkout, "diff", "--name-only") == ""
    assert "1 tracked file(s) modified (src/mod.py)" in _refusal(checkout, tmp_path, capsys)


def test_a_staged_new_file_and_an_untracked_plan_are_refused(tmp_path, checkout, capsys):
    (checkout / "src" / "added.py").write_text("z = 1\n")
    _git(checkout, "add", "src/added.py")  # staged, never committed
    assert "src/added.py" in _refusal(checkout, tmp_path, capsys)
    _git(checkout, "rm", "-q", "--cached", "src/added.py")
    (checkout / "src" / "added.py").unlink()
    (checkout / "docs" / "analysis-plan.md").write_text("# Analysis plan\n")  # not committed
    assert "(docs/analysis-plan.md)" in _refusal(checkout, tmp_path, capsys)


def test_outside_a_git_checkout_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prov, "checkout_root", lambda: None)
    assert main(["run", str(_study(tmp_path, ONE_JOB)), "--out", str(tmp_path / "run"), "--quiet",
                 "--confirmatory", *IN_PROCESS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a git checkout" in err and not (tmp_path / "run").exists()
    assert prov.checkout_state(tmp_path).refusal()  # a folder git does not know: no commit to record


def test_every_start_is_logged_before_the_first_job_and_the_report_names_the_attempts(tmp_path, checkout,
                                                                                       monkeypatch):
    import bnmem.study.execute as ex

    path = _study(tmp_path, ONE_JOB)
    log = checkout / prov.ATTEMPTS_LOG
    seen_at_first_job = []
    real_pending = ex.pending

    def pending(*a, **k):  # what the study runs is decided here, right before its first job
        seen_at_first_job.append(len(log.read_text().splitlines()))
        return real_pending(*a, **k)

    monkeypatch.setattr(ex, "pending", pending)
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["run", str(path), "--out", str(first), "--quiet", "--confirmatory", *IN_PROCESS]) == 0
    assert main(["run", str(path), "--out", str(first), "--quiet", "--confirmatory", *IN_PROCESS]) == 0  # resume
    assert main(["run", str(path), "--out", str(second), "--quiet", "--confirmatory", *IN_PROCESS]) == 0
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["kind"] for e in logged] == ["start", "end", "resume", "end", "start", "end"]
    assert seen_at_first_job == [1, 3, 5]  # each line was written before that run's first job
    ends = [e for e in logged if e["kind"] == "end"]
    tree = _git(checkout, "rev-parse", "HEAD^{tree}").strip()
    for e in logged:
        assert e["tree"] == tree and e["cpus"] >= 1 and len(e["load"]) == 3
    assert [e["reason"] for e in ends] == ["finished"] * 3 and all(e["unmodified"] for e in ends)
    assert [e["attempt"] for e in ends] == [logged[0]["time"], logged[2]["time"], logged[4]["time"]]
    # each run directory carries its own entries, the same lines
    own = [json.loads(line) for line in (first / prov.RUN_ATTEMPTS).read_text().splitlines()]
    assert own == logged[:4]
    entries = [e for e in logged if e["kind"] != "end"]
    head = _git(checkout, "rev-parse", "HEAD").strip()
    rec = io.read_json(first / "study.json")[CONFIRMATORY_KEY]
    assert rec["commit"] == head and rec["started"] == entries[0]["time"] == entries[1]["started"]
    for e, out in zip(entries, (first, first, second)):
        assert e["study"] == "conf" and e["out"] == str(out.resolve()) and e["workers"] == 1
        assert e["plan_sha256"] == plan_sha256() and e["plan_version"] == PLAN_VERSION
        assert e["source_sha256"] == prov.source_sha256() and e["commit"] == head
        assert e["study_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    # the report: two starts of this study under this plan, and which one each run is
    text = check_plan(first).provenance
    assert f"commit {head}" in text and "the deciding source is the same now" in text
    assert "2 start(s) of study conf under this plan, 1 resume(s); this run is start 1 of 2" in text
    assert "this run is start 2 of 2" in check_plan(second).provenance
    # summary.md names them too
    from bnmem.report.build import build_report

    report = build_report(second)
    assert "this run is start 2 of 2" in report.markdown.read_text()
    assert "this run is start 2 of 2" in report.html.read_text()
    # and names the earlier attempt of the same study, how it ended
    earlier = (f"Earlier attempts of study conf: {entries[0]['time']} (plan {PLAN_VERSION}, commit {head[:7]}, "
               "1 resume(s), ended finished after")
    assert earlier in report.markdown.read_text() and earlier in report.html.read_text()


def test_a_rows_chances_count_every_earlier_attempt_that_may_have_been_read():
    from bnmem.report.attempts import chances, earlier_attempts

    def start(study, time, lenses):
        return {"kind": "start", "study": study, "time": time, "started": time, "lenses": lenses, "commit": "c" * 40}

    def end(study, time, reason, at):
        return {"kind": "end", "study": study, "started": time, "reason": reason, "time": at, "seconds": 5}

    log = [start("a", "t1", ["memorize", "lira"]), end("a", "t1", "finished", "t2"),  # read: counts for 1 and 3a
           start("b", "t3", ["gradnorms"]), end("b", "t3", "interrupted", "t4"),  # stopped, nothing read
           start("c", "t5", ["memorize"]),  # an earlier attempt of this study, no end record: may have been read
           start("d", "t6", None),  # lenses unknown (no study file at a commit): counted for every claim
           start("c", "t7", ["memorize"]),  # this run
           start("e", "t8", ["memorize"])]  # later: cannot have been read before this run
    got = chances(["1", "2", "3a"], log, "c", "t7")
    assert got["1"] == ["a t1 (ended finished after 5 s)", "c t5 (no end record)", "d t6 (no end record)"]
    assert got["2"] == ["c t5 (no end record)", "d t6 (no end record)"]  # b was interrupted before this run
    assert got["3a"] == ["a t1 (ended finished after 5 s)", "c t5 (no end record)", "d t6 (no end record)"]
    assert earlier_attempts(log, "c", "t7") == ["t5 (plan None, commit ccccccc, no end record)"]


@pytest.mark.parametrize("how, reason", [("ctrl-c", "interrupted"), ("sigterm", "interrupted"),
                                         ("error", "failed")])
def test_an_interrupted_or_failed_run_logs_its_end(tmp_path, checkout, monkeypatch, how, reason):
    import os
    import signal

    import bnmem.study.execute as ex

    def pending(*a, **k):  # the run stops right before its first job
        if how == "ctrl-c":
            raise KeyboardInterrupt
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        raise RuntimeError("a job's machine went away")

    monkeypatch.setattr(ex, "pending", pending)
    path, out = _study(tmp_path, ONE_JOB), tmp_path / "run"
    before = signal.getsignal(signal.SIGTERM)
    expected = {"ctrl-c": KeyboardInterrupt, "sigterm": SystemExit, "error": RuntimeError}[how]
    with pytest.raises(expected) as caught:
        ex.run_study(load_study(path), out, progress=False, confirmatory=True, study_file=path)
    if how == "sigterm":
        assert caught.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the run's only
    logged = [json.loads(line) for line in (checkout / prov.ATTEMPTS_LOG).read_text().splitlines()]
    assert [e["kind"] for e in logged] == ["start", "end"]
    end = logged[1]
    assert end["reason"] == reason and end["attempt"] == logged[0]["time"] and end["study"] == "conf"
    assert end["cpus"] >= 1 and end["tree"] and "seconds" in end
    assert (how == "error") == ("a job's machine went away" in end.get("error", ""))
    assert [json.loads(line) for line in (out / prov.RUN_ATTEMPTS).read_text().splitlines()] == logged
