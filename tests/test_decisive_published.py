"""The published decisive study (docs/decisive/) names the plan and commit it ran under, consistently.

Its summary's plan hash and commit must be study.json's; the plan hash must be the hash of the analysis plan as
committed at that commit (docs/analysis-plan.md is the plan's rendered text, whose SHA-256 is the plan hash);
the attempts log must hold the start; the README's section must quote every verdict summary.csv gives.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "docs" / "decisive"
REPORT_BUDGET = 5 * 1024 * 1024


def _study() -> dict:
    return json.loads((PUBLISHED / "study.json").read_text(encoding="utf-8"))


def _rows() -> list[dict[str, str]]:
    with (PUBLISHED / "summary.csv").open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_the_published_run_is_confirmatory_and_names_one_plan_and_commit():
    study = _study()
    conf, plan = study["confirmatory"], study["analysis_plan"]
    assert conf["plan_sha256"] == plan["sha256"] and conf["plan_version"] == plan["version"]
    assert len(conf["commit"]) == 40 and int(conf["commit"], 16) >= 0
    rows = _rows()
    assert rows and {r["plan_sha256"] for r in rows} == {plan["sha256"]}
    assert {r["plan_version"] for r in rows} == {plan["version"]}
    summary = (PUBLISHED / "summary.md").read_text(encoding="utf-8")
    assert summary.splitlines()[2].startswith("**confirmatory")
    assert plan["sha256"] in summary and conf["commit"] in summary
    assert (PUBLISHED / "report.html").stat().st_size <= REPORT_BUDGET


def test_the_attempts_log_holds_the_published_start():
    conf = _study()["confirmatory"]
    log = [json.loads(line) for line in (ROOT / "docs" / "confirmatory-attempts.jsonl").read_text().splitlines()
           if line.strip()]
    starts = [e for e in log if e.get("kind") == "start" and e.get("study") == "decisive"
              and e.get("commit") == conf["commit"]]
    assert starts, "no start of the published decisive run in docs/confirmatory-attempts.jsonl"
    assert {e["plan_sha256"] for e in starts} == {conf["plan_sha256"]}
    assert {e["source_sha256"] for e in starts} == {conf["source_sha256"]}


def test_the_plan_hash_is_the_plan_at_that_commit():
    """The plan committed at the run's commit hashes to the recorded plan hash (needs the commit in history)."""
    conf = _study()["confirmatory"]
    git = shutil.which("git")
    if git is None or subprocess.run([git, "-C", str(ROOT), "cat-file", "-e", f"{conf['commit']}^{{commit}}"],
                                     capture_output=True).returncode != 0:
        pytest.skip("the run's commit is not in this checkout's history (a shallow clone or an archive)")
    text = subprocess.run([git, "-C", str(ROOT), "show", f"{conf['commit']}:docs/analysis-plan.md"],
                          capture_output=True, check=True).stdout
    assert hashlib.sha256(text).hexdigest() == conf["plan_sha256"]


def test_the_readme_quotes_every_published_verdict():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## What the decisive study found"):]
    section = section[:section.index("\n## ", 5)]
    table = {line.split("|")[1].strip().split(" ")[0]: line for line in section.splitlines()
             if line.startswith("| ") and not line.startswith("| claim")}
    for r in _rows():
        assert r["id"] in table, f"claim {r['id']} is missing from the README's decisive table"
        assert r["status"] in table[r["id"]], f"claim {r['id']}: README does not say {r['status']!r}"
    assert _study()["confirmatory"]["commit"][:7] in section
