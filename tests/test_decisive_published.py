"""The published decisive studies name the plan and commit they ran under, consistently: plan 5.0's run and its
follow-ups (docs/decisive/v5/, v5/claim6/, v5/claim2/, their tables on docs/decisive/v5/index.md).

Each summary's plan hash and commit must be its study.json's; the plan hash must be the hash of the analysis plan
as committed at that commit (docs/analysis-plan.md is the plan's rendered text, whose SHA-256 is the plan hash);
the attempts log must hold the start; the page quoting a run (the README for the current study) must quote every
verdict it decides.
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
DOCS = ROOT / "docs" / "decisive"
V5 = DOCS / "v5"
REPORT_BUDGET = 5 * 1024 * 1024
# folder -> (study name, the page quoting it, that page's table header line, the rows the table must quote: None =
# every row)
PUBLISHED = {
    "decisive": (DOCS, "decisive", ROOT / "README.md", "## What the decisive study found", None),
    "v5": (V5, "decisive", V5 / "index.md", "# The decisive study under plan 5.0", None),
    "v5-claim6": (V5 / "claim6", "decisive-claim6", V5 / "index.md", "## The follow-ups", ("6", "3c")),
    "v5-claim2": (V5 / "claim2", "decisive-claim2", V5 / "index.md", "## The follow-ups", ("2",)),
}
RUNS = pytest.mark.parametrize("run", sorted(PUBLISHED))


def _study(run: str) -> dict:
    return json.loads((PUBLISHED[run][0] / "study.json").read_text(encoding="utf-8"))


def _rows(run: str) -> list[dict[str, str]]:
    with (PUBLISHED[run][0] / "summary.csv").open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


@RUNS
def test_the_published_run_is_confirmatory_and_names_one_plan_and_commit(run):
    folder, name, _, _, _ = PUBLISHED[run]
    study = _study(run)
    assert study["name"] == name
    conf, plan = study["confirmatory"], study["analysis_plan"]
    assert conf["plan_sha256"] == plan["sha256"] and conf["plan_version"] == plan["version"]
    assert len(conf["commit"]) == 40 and int(conf["commit"], 16) >= 0
    rows = _rows(run)
    assert rows and {r["plan_sha256"] for r in rows} == {plan["sha256"]}
    assert {r["plan_version"] for r in rows} == {plan["version"]}
    summary = (folder / "summary.md").read_text(encoding="utf-8")
    assert summary.splitlines()[2].startswith("**confirmatory")
    assert plan["sha256"] in summary and conf["commit"] in summary
    assert (folder / "report.html").stat().st_size <= REPORT_BUDGET
    assert (folder / "design.txt").read_text(encoding="utf-8").startswith(f"# bnmem design studies/{name}.yaml")


@RUNS
def test_the_attempts_log_holds_the_published_start(run):
    name = PUBLISHED[run][1]
    conf = _study(run)["confirmatory"]
    log = [json.loads(line) for line in (ROOT / "docs" / "confirmatory-attempts.jsonl").read_text().splitlines()
           if line.strip()]
    starts = [e for e in log if e.get("kind") == "start" and e.get("study") == name
              and e.get("commit") == conf["commit"]]
    assert starts, f"no start of the published {name} run in docs/confirmatory-attempts.jsonl"
    assert {e["plan_sha256"] for e in starts} == {conf["plan_sha256"]}
    assert {e["source_sha256"] for e in starts} == {conf["source_sha256"]}


@RUNS
def test_the_plan_hash_is_the_plan_at_that_commit(run):
    """The plan committed at the run's commit hashes to the recorded plan hash (needs the commit in history)."""
    conf = _study(run)["confirmatory"]
    git = shutil.which("git")
    if git is None or subprocess.run([git, "-C", str(ROOT), "cat-file", "-e", f"{conf['commit']}^{{commit}}"],
                                     capture_output=True).returncode != 0:
        pytest.skip("the run's commit is not in this checkout's history (a shallow clone or an archive)")
    text = subprocess.run([git, "-C", str(ROOT), "show", f"{conf['commit']}:docs/analysis-plan.md"],
                          capture_output=True, check=True).stdout
    assert hashlib.sha256(text).hexdigest() == conf["plan_sha256"]


def _quoted_table(page: Path, header: str) -> tuple[str, dict[str, str]]:
    text = page.read_text(encoding="utf-8")
    section = text[text.index(header):]
    end = section.find("\n#", 5)  # the next heading of any level: each table has its own
    section = section if end < 0 else section[:end]
    table = {line.split("|")[1].strip().split(" ")[0]: line for line in section.splitlines()
             if line.startswith("| ") and not line.startswith("| claim")}
    return section, table


@RUNS
def test_the_page_quotes_every_published_verdict(run):
    _, name, page, header, ids = PUBLISHED[run]
    section, table = _quoted_table(page, header)
    # the verdict rows (plan 6.0's robustness-panel rows are summed up in one line per claim, not each quoted)
    rows = [r for r in _rows(run) if (ids is None or r["id"] in ids) and r.get("role", "verdict") == "verdict"]
    assert rows, f"{name}: none of the rows {page.name} quotes is in its summary.csv"
    for r in rows:
        assert r["id"] in table, f"{name}: claim {r['id']} is missing from {page.name}'s table under {header!r}"
        assert r["status"] in table[r["id"]], f"{name}: claim {r['id']}: {page.name} does not say {r['status']!r}"
    assert _study(run)["confirmatory"]["commit"][:7] in section


@pytest.mark.parametrize("run", sorted(r for r in PUBLISHED if r.startswith("v5")))
def test_verify_says_a_plan_5_folder_cannot_be_recomputed_and_still_checks_its_seeds(run, capsys):
    """Plan 5.0's folders were published before the deciding table existed: bnmem verify says so (and does not
    pass them), and recomputes their seeds by derivation 1, which their records used."""
    from bnmem.cli import main

    folder = PUBLISHED[run][0]
    code = main(["verify", str(folder), "--repo", str(ROOT)])
    out = capsys.readouterr().out
    assert code != 0 and f"claims: NOT RECOMPUTED: {folder} holds no deciding table" in out
    n = len(_study(run)["confirmatory"]["replicates"])
    assert f"seeds     ok: {n} replicates' seeds" in out and "equal their derivation 1 from the recorded key" in out


def test_verify_recomputes_every_row_of_the_published_plan_6_study(capsys):
    """docs/decisive/ (plan 6.0) holds its deciding table: every verdict and robustness row is recomputed from it
    and equals the published one; its seeds, plan and attempts check (CI also runs `bnmem verify docs/decisive`)."""
    from bnmem.cli import main

    code = main(["verify", str(DOCS), "--repo", str(ROOT)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "MISMATCH" not in out and "NOT RECOMPUTED" not in out
    n = len(_study("decisive")["confirmatory"]["replicates"])
    assert f"seeds     ok: {n} replicates' seeds" in out
