"""`bnmem verify DIR`: a generated confirmatory folder passes; one changed number in the deciding table, one seed,
or one line of the plan text each makes it fail, naming what differs; a folder without the table says so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import bnmem.provenance as prov
from bnmem.cli import main
from bnmem.report.verify import EXIT_MISMATCH, EXIT_NO_TABLE, EXIT_OK

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="git is not installed")
SRC = Path(__file__).resolve().parents[1] / "src"
# Small, but every kind of decision: per-layer tests (4), the toy model's arrays (5a, 5b), a paired difference
# over replicates (7); memorize is read though claim 1 cannot be decided on 80 examples.
TINY = {"name": "tiny", "data": {"dataset": "digits", "train_size": 80, "val_fraction": 0.1},
        "train": {"epochs": 1, "batch_size": 32},
        "grid": {"norms": ["batch", "none"], "seeds": [0], "replicates": 2, "outliers": [{"label_noise": 0.1}]},
        "lenses": {"memorize": {}, "gamma-sigma": {}, "theory": {"steps": 5, "plot": False}}}


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[Path, Path]:
    """(a checkout holding this bnmem's package, plan and study, committed; a confirmatory run of the study from
    it, with its report): what a published folder and its repository are."""
    from bnmem.analysis_plan import render_markdown

    base = tmp_path_factory.mktemp("verify")
    repo = base / "repo"
    shutil.copytree(prov.PACKAGE, repo / "src" / "bnmem", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (repo / "docs").mkdir()
    (repo / "docs" / "analysis-plan.md").write_text(render_markdown(), encoding="utf-8")
    (repo / prov.ATTEMPTS_LOG).write_text("")
    (repo / "studies").mkdir()
    (repo / "studies" / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")
    out = base / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prov, "checkout_root", lambda: repo)
        assert main(["run", str(repo / "studies" / "tiny.yaml"), "--out", str(out), "--quiet", "--confirmatory",
                     "--workers", "1"]) == 0
    assert main(["report", str(out)]) == 0
    return repo, out


def _verify(folder: Path, repo: Path, capsys) -> tuple[int, str]:
    code = main(["verify", str(folder), "--repo", str(repo)])
    return code, capsys.readouterr().out


def _copy(folder: Path, dst: Path) -> Path:
    shutil.copytree(folder, dst, ignore=shutil.ignore_patterns("*.png", "*.npz", "*.npy", "report.html"))
    return dst


def test_a_generated_folder_passes(published, capsys):
    repo, out = published
    code, text = _verify(out, repo, capsys)
    assert code == EXIT_OK, text
    assert "MISMATCH" not in text and "not checked" not in text
    lines = text.splitlines()
    for cid in ("4", "5a", "5b", "7"):
        line = next(x for x in lines if x.strip().startswith(f"{cid} "))
        assert " ok: " in line and "(= published)" in line and "not run" not in line, line
    assert "plan      ok: docs/analysis-plan.md at commit" in text
    assert "source    ok: src/bnmem at commit" in text
    assert "seeds     ok: 2 replicates' seeds, 1 study-wide seed(s) equal their derivation 2" in text
    assert "attempts  ok: docs/confirmatory-attempts.jsonl holds the start" in text and "(finished after" in text


def test_the_table_is_small_and_holds_every_number_it_decides_by(published):
    import pandas as pd

    from bnmem.report.deciding import COLUMNS, DECIDING_CSV

    _, out = published
    df = pd.read_csv(out / DECIDING_CSV, dtype=str, keep_default_na=False)
    assert tuple(df.columns) == COLUMNS and (out / DECIDING_CSV).stat().st_size < 2 * 1024 * 1024
    deciding = df[df["claim"] != ""]
    assert {"4", "5a 5b", "7", "4 7"} <= set(deciding["claim"])
    assert set(deciding.loc[deciding["lens"] == "gamma-sigma", "arm"]) >= {"batch"}
    assert set(df["replicate"]) == {"0", "1", ""}  # per replicate; "" the study-wide toy model


def _tampered_number(folder: Path) -> str:
    """Change one number of the toy model's live BN step (the first element of one of its arrays): claim 5b's
    slope through the origin reads every element."""
    from bnmem.report.deciding import DECIDING_CSV, DecidingTable, read_table

    rows = read_table(folder / DECIDING_CSV)
    row = next(r for r in rows if json.loads(r["path"])[-1:] == ["dm_bn_w"])
    values = json.loads(row["text"])  # [steps][outliers]
    first = values
    while isinstance(first[0], list):
        first = first[0]
    first[0] = first[0] * 3 + 1.0
    row["text"] = json.dumps(values, separators=(",", ":"))
    DecidingTable(rows).write(folder / DECIDING_CSV)
    return "5b"


def test_one_changed_number_in_the_table_fails_naming_the_claim(published, tmp_path, capsys):
    repo, out = published
    folder = _copy(out, tmp_path / "run")
    cid = _tampered_number(folder)
    code, text = _verify(folder, repo, capsys)
    assert code == EXIT_MISMATCH, text
    bad = [x for x in text.splitlines() if "MISMATCH" in x and not x.startswith("verify:")]
    assert bad and all(x.strip().startswith(f"{cid} ") for x in bad), bad  # only the claim that reads it
    assert "value: recomputed" in bad[0] and "published" in bad[0]


def test_one_changed_seed_fails_naming_it(published, tmp_path, capsys):
    repo, out = published
    folder = _copy(out, tmp_path / "run")
    doc = json.loads((folder / "study.json").read_text())
    was = doc["confirmatory"]["replicates"]["r1"]["data_seed"]
    doc["confirmatory"]["replicates"]["r1"]["data_seed"] = was + 1
    (folder / "study.json").write_text(json.dumps(doc))
    code, text = _verify(folder, repo, capsys)
    assert code == EXIT_MISMATCH
    assert f"seeds     MISMATCH: r1 data_seed {was + 1} is not its derivation {was}" in text


def test_one_changed_line_of_the_plan_text_at_the_commit_fails(published, tmp_path, capsys):
    repo, out = published
    clone = tmp_path / "repo"
    _git(tmp_path, "clone", "-q", str(repo), str(clone))
    plan = clone / "docs" / "analysis-plan.md"
    lines = plan.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[4] = lines[4].rstrip("\n") + " (edited)\n"
    plan.write_text("".join(lines), encoding="utf-8")
    _git(clone, "commit", "-q", "--amend", "-am", "init")  # the same history, one plan line different
    folder = _copy(out, tmp_path / "run")
    doc = json.loads((folder / "study.json").read_text())
    doc["confirmatory"]["commit"] = _git(clone, "rev-parse", "HEAD").strip()
    (folder / "study.json").write_text(json.dumps(doc))
    shutil.copy(repo / prov.ATTEMPTS_LOG, clone / prov.ATTEMPTS_LOG)
    code, text = _verify(folder, clone, capsys)
    assert code == EXIT_MISMATCH
    assert "plan      MISMATCH: docs/analysis-plan.md at commit" in text and "hashes to" in text
    assert "source    ok: src/bnmem at commit" in text  # only the plan moved


def test_the_installed_plan_must_be_the_runs(published, capsys, monkeypatch):
    import bnmem.analysis_plan as ap

    repo, out = published
    text = ap.render_markdown()
    monkeypatch.setattr(ap, "render_markdown", lambda: text.replace("\n", "\n ", 1))
    code, out_text = _verify(out, repo, capsys)
    assert code == EXIT_MISMATCH and "plan      MISMATCH: the installed plan" in out_text


def test_a_folder_without_the_table_says_so_and_exits_3(published, tmp_path, capsys):
    repo, out = published
    folder = _copy(out, tmp_path / "run")
    (folder / "deciding.csv.gz").unlink()
    code, text = _verify(folder, repo, capsys)
    assert code == EXIT_NO_TABLE
    assert "claims: NOT RECOMPUTED" in text and "holds no deciding table" in text
    assert "verify: no deciding table: the verdicts were not recomputed (exit 3)" in text


def test_without_git_the_commit_checks_say_not_checked(published, tmp_path, capsys):
    _, out = published
    code, text = _verify(out, tmp_path, capsys)  # a folder that is no git checkout
    assert "plan      not checked: the plan text at the run's commit: no git" in text
    assert "attempts  ok: " in text and "attempts.jsonl" in text  # the folder's own copy of its entries
    assert code == EXIT_OK, text


def test_a_bad_folder_is_one_line(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a directory" in err


@pytest.mark.slow
def test_verify_imports_no_torch(published):
    repo, out = published
    heavy = "sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'opacus'))"
    code = (f"import sys\nfrom bnmem.cli import main\n"
            f"assert main(['verify', {str(out)!r}, '--repo', {str(repo)!r}]) == 0\n"
            f"assert not {heavy}, {heavy}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_run_rebuilt_from_its_deciding_table_is_decided_as_the_run(seed, tmp_path):
    """The oracle: the verdicts of the whole run (evaluate_claims on every results file) against the traced
    evaluation and against the run rebuilt from the table, on synthetic LiRA and memorize results of random
    effects and replicate counts, every summary.csv column equal."""
    import numpy as np
    from synthetic_runs import lira_run, make_cell, make_run, memorize_data

    from bnmem.names import MEMORIZE
    from bnmem.report.claims import evaluate_claims
    from bnmem.report.deciding import DECIDING_CSV, evaluate_traced, read_table, rebuild
    from bnmem.report.summary import claim_rows

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 6))
    run = lira_run([rng.normal(0.03 * seed, 0.02, 8) for _ in range(n)])
    for r, cell in enumerate(run.cells):  # memorize beside lira in each replicate
        acc = rng.uniform(0, 1, (2, 6)).cumsum(axis=1) / 6
        cell.lenses[MEMORIZE] = make_cell("x", r, {MEMORIZE: memorize_data(acc, acc * rng.uniform(0.5, 1))}
                                          ).lenses[MEMORIZE]
    plain = claim_rows(evaluate_claims(run))
    traced, table = evaluate_traced(run)
    assert claim_rows(traced) == plain
    assert {r["status"] for r in plain} - {"not run"}  # something was decided
    table.write(tmp_path / DECIDING_CSV)
    assert claim_rows(evaluate_claims(rebuild(read_table(tmp_path / DECIDING_CSV), tmp_path))) == plain
    # and what the rows say decides: one tampered array of AUCs changes the verdicts
    rows = read_table(tmp_path / DECIDING_CSV)
    auc = next(r for r in rows if json.loads(r["path"])[-1:] == ["auc_per_target"] and "3a" in r["claim"])
    auc["text"] = json.dumps([x + 0.5 for x in json.loads(auc["text"])])
    assert claim_rows(evaluate_claims(rebuild(rows, tmp_path))) != plain


def test_a_changed_robustness_panel_row_fails_naming_its_estimand(published, tmp_path, capsys):
    """Plan 6.0's panel rows are recomputed too: one published panel row's status changed is a mismatch on its
    claim's line, naming the estimand."""
    import csv

    repo, out = published
    folder = _copy(out, tmp_path / "run")
    path = folder / "summary.csv"
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    i = next(i for i, r in enumerate(rows) if r.get("role") == "robustness" and r["status"] != "not run")
    rows[i]["status"] = "contradicted" if rows[i]["status"] != "contradicted" else "reproduced"
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    code, text = _verify(folder, repo, capsys)
    assert code == EXIT_MISMATCH, text
    bad = [x for x in text.splitlines() if "MISMATCH" in x and not x.startswith("verify:")]
    assert len(bad) == 1 and bad[0].strip().startswith(f"{rows[i]['id']} "), bad
    assert f"panel {rows[i]['estimand']!r}: status: recomputed" in bad[0], bad[0]


def test_later_installed_code_recomputing_a_run_is_said_not_failed(published, capsys, monkeypatch):
    """CI verifies the published study on every later commit: a different installed source is reported (the rules
    recomputing are later code's), and the run's own files are still checked at its commit."""
    from bnmem.report import verify as verify_mod

    repo, out = published
    monkeypatch.setattr(prov, "recorded_source_now", lambda conf: "f" * 64)
    code, text = _verify(out, repo, capsys)
    assert code == EXIT_OK, text
    assert "source    not checked: whether the run's own code recomputes these verdicts" in text
    assert "source    ok: src/bnmem at commit" in text
    monkeypatch.setattr(verify_mod, "files_sha256_at", lambda repo, commit: "0" * 64)
    code, text = _verify(out, repo, capsys)
    assert code == EXIT_MISMATCH and "source    MISMATCH: src/bnmem at commit" in text
