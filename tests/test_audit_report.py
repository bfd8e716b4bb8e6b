"""`bnmem report AUDIT_DIR`: the audit as one self-contained HTML page (headline, findings, ROC, advice)."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest
from waiting import HANG_GUARD_S
from audit_scenario import write_scenario

from bnmem.cli import main

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("hospital")
    s = write_scenario(root)
    out = root / "audit"
    assert main(["audit", "--quiet", *s["flags"], "--shadow-models", "4", "--canaries", "100", "--out", str(out)]) == 0
    return out


def test_report_writes_a_self_contained_audit_page(audit_dir, capsys):
    assert main(["report", str(audit_dir)]) == 0
    page = (audit_dir / "audit.html").read_text()
    res = json.loads((audit_dir / "audit.json").read_text())
    assert f"audit report: {audit_dir / 'audit.html'}" in capsys.readouterr().out
    assert f"Risk: {res['risk']['level']}" in re.sub(r"<[^>]+>", "", page)
    assert html.escape(res["risk"]["headline"].split(" (")[0]) in page and "the 30 files listed as mislabeled" in page
    assert page.count('class="badge"') >= len(res["risk"]["findings"]) + 1  # the level and one per finding
    assert page.count("signal: ") == res["risk"]["finding_kinds"].count("explains")  # signals are not risk levels
    assert '<img src="data:image/png;base64,' in page and (audit_dir / "audit_roc.png").stat().st_size > 5000
    assert "GammaSigmaPenalty</code>" in page and 'id="recommendations"' in page
    # everything audit.md has after its answer is on the page: every section, every memorized file
    md = (audit_dir / "audit.md").read_text()
    for heading in re.findall(r"^## (.+)$", md, flags=re.M)[1:]:
        assert f"<h2>{html.escape(heading)}</h2>" in page, heading
    for f in res["membership"]["memorization_scores"]["top_memorized"]["file"]:
        assert f"<code>{f}</code>" in page, f
    recipe = res["membership"]["train"]
    assert f"momentum {recipe['momentum']}" in page and f"weight_decay {recipe['weight_decay']}" in page
    # self-contained: no scripts, no links or sources outside the page but the most exposed files' own images
    assert "<script" not in page and not re.search(r'src="(?!data:)', page)
    top = res["membership"]["exposure"]["top"]
    links = re.findall(r'href="([^"]*)"', page)
    # relative to the page's folder: no absolute file:// paths, and each link opens its image from there
    assert links and not any(link.startswith(("file:", "/")) for link in links)
    assert [(audit_dir / unquote(link)).resolve() for link in links] == \
        [(Path(res["data"]["source"]) / r["path"]).resolve() for r in top]
    assert all(Path(r["path"]).suffix == ".png" and (Path(res["data"]["source"]) / r["path"]).is_file() for r in top)


def test_report_refuses_a_folder_without_a_finished_audit(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "audit.json").write_text(json.dumps({"model": {}}))
    assert main(["report", str(tmp_path / "a")]) == 2
    assert "older bnmem" in capsys.readouterr().err


@pytest.mark.chromium
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_audit_page_renders_in_headless_chromium(audit_dir, tmp_path):
    import matplotlib.image as mpimg

    assert main(["report", str(audit_dir)]) == 0
    uri = (audit_dir / "audit.html").resolve().as_uri()
    run = [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*run, "--dump-dom", uri], capture_output=True, text=True, timeout=HANG_GUARD_S).stdout
    for element in ('id="risk"', 'id="headline"', 'class="findings"', 'class="leakage"', 'id="recommendations"'):
        assert element in dom, element
    shot = tmp_path / "shot.png"
    subprocess.run([*run, f"--screenshot={shot}", "--window-size=1280,1600", uri], capture_output=True,
                   timeout=HANG_GUARD_S)
    img = mpimg.imread(shot)
    assert img.shape[:2] == (1600, 1280) and img[..., :3].mean(axis=2).std() > 0.05  # drawn, not blank


def test_exposure_csv_ranks_every_training_file_and_its_top_row_is_the_headlines(audit_dir):
    """exposure.csv: one row per training file, sorted by exposure; its first row is the file the headline names;
    audit.json keeps its first rows; the listed mislabeled files carry their group."""
    import csv

    res = json.loads((audit_dir / "audit.json").read_text())
    rows = list(csv.DictReader((audit_dir / "exposure.csv").open()))
    section = res["membership"]["exposure"]
    assert len(rows) == res["data"]["n_train"] == section["n"] and list(rows[0]) == section["columns"]
    paths = [r["path"] for r in rows]
    assert len(set(paths)) == len(paths) and all(p.startswith("train/") for p in paths)
    lr = [float(r["log_lr"]) for r in rows]
    assert lr == sorted(lr, reverse=True) and [int(r["rank"]) for r in rows] == list(range(1, len(rows) + 1))
    assert f"The most exposed file is {rows[0]['path']} (" in res["risk"]["headline"]
    assert [r["path"] for r in section["top"]] == paths[: len(section["top"])]
    mislabeled = {line.strip() for line in (audit_dir.parent / "mislabeled.csv").read_text().splitlines()[1:]}
    assert {r["path"] for r in rows if r["group"] == "outlier"} == mislabeled
    assert all(float(r["log_lr_lo"]) <= float(r["log_lr"]) <= float(r["log_lr_hi"]) for r in rows)
    md = (audit_dir / "audit.md").read_text()
    assert "## Most exposed training files (exposure.csv: all 480, ranked)" in md and f"`{paths[0]}`" in md


def test_the_one_run_floor_stands_beside_the_multi_run_one(audit_dir):
    """The scenario's recipe (plain SGD at lr 0.005, 10 epochs) trained once with 100 noise canaries: its floor and
    the shadow copies' ε lower bound, both stated as floors, side by side (audit.json, audit.md, the HTML page)."""
    res = json.loads((audit_dir / "audit.json").read_text())
    one, eps = res["one_run"], res["risk"]["epsilon"]
    assert eps is not None and one["multi_run"]["eps_lb"] == eps["eps_lb"]
    assert one["multi_run"]["attack"] == eps["attack"]
    assert f"the multi-run ε lower bound over the shadow copies is {eps['eps_lb']:.3g}" in one["text"]
    assert one["training"]["recipe"]["epochs"] == 10  # the recipe as given: one copy on the whole set, as the model
    page = (audit_dir / "audit.html").read_text() if (audit_dir / "audit.html").exists() else ""
    assert one["text"] in (audit_dir / "audit.md").read_text() and (not page or html.escape(one["text"]) in page)
