"""The tidy results table (bnmem.results.load, bnmem export) and bnmem compare.

The table is checked against the report: claim 1's matched-progress differences (plan 5.0: an
interpolation along each pair's per-epoch curves, written here in plain Python) and claim 3a's
paired per-target differences (a pandas group-by) are recomputed from the DataFrame alone, with a
Student t-interval written here, and must equal summary.csv.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as sps

from bnmem.cli import main
from bnmem.report.tidy import COLUMNS
from bnmem.results import load

# The studies run in this process (--workers 1): their results are the same bytes for any worker count
# (tests/test_study_graph.py), and spawned workers would import torch again.
IN_PROCESS = ("--workers", "1")

DOCS = Path(__file__).resolve().parents[1] / "docs" / "results.md"

STUDY = {
    "name": "tidy",
    "data": {"dataset": "digits", "train_size": 200, "val_fraction": 0.1},
    # Small batches and 3 epochs: enough steps that every no-norm model's clean training accuracy reaches a
    # level BN's had at one of its epochs (between two of its own epochs), so claim 1 (plan 5.0: matched
    # clean-training progress) is decided here, not "not run" as with 2 epochs of batch 32.
    "train": {"epochs": 3, "batch_size": 8},
    # The paper's protocol alone: the tidy table's columns and recomputations, not the recipes (tests/test_study.py).
    "grid": {"norms": ["batch", "none"], "seeds": [0, 1], "replicates": 2,
             "outliers": [{"label_noise": 0.1}, {}], "recipes": ["shared"]},
    "lenses": {"memorize": {}, "lira": {"shadow_models": 4}},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("tidy")
    (base / "tidy.yaml").write_text(yaml.safe_dump(STUDY))
    out = base / "run"
    assert main(["run", str(base / "tidy.yaml"), "--out", str(out), "--quiet", *IN_PROCESS]) == 0
    assert main(["report", str(out)]) == 0
    return out


def summary(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "summary.csv", encoding="utf-8", newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def t_interval(x: np.ndarray) -> tuple[float, float]:
    half = sps.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return x.mean() - half, x.mean() + half


def check(row: dict[str, str], replicate_means: pd.Series) -> None:
    x = replicate_means.to_numpy(float)
    lo, hi = t_interval(x)
    assert float(row["value"]) == pytest.approx(x.mean(), rel=1e-5, abs=1e-9)
    assert float(row["ci_low"]) == pytest.approx(lo, rel=1e-5, abs=1e-9)
    assert float(row["ci_high"]) == pytest.approx(hi, rel=1e-5, abs=1e-9)


def test_columns_and_conditions(run):
    df = load(run)
    assert list(df.columns) == list(COLUMNS)
    assert set(df["lens"]) == {"memorize", "lira"}
    assert set(df["replicate"]) == {0, 1}
    assert set(df["label_noise"]) == {0.1, 0.0}
    mem = df[df.lens == "memorize"]
    # 2 settings x 2 replicates x 2 norms x 2 seeds x 3 epochs x (clean, test; + noisy, noisy-original)
    assert len(mem) == 2 * 2 * 2 * 2 * 3 * 2 + 2 * 2 * 2 * 3 * 2
    lira = df[(df.lens == "lira") & (df.metric == "auc") & (df.subset == "all") & (df.method == "online")]
    assert set(lira["unit"]) == {"target"} and sorted(set(lira["unit_id"])) == [0, 1, 2, 3]
    assert df["value"].notna().all()


def first_reach(curve: list[float], level: float) -> float | None:
    """The first (fractional) epoch at which a per-epoch curve (value i after epoch i + 1) reaches ``level``,
    linearly interpolated between its two recorded epochs; None when it never does or was already above it at
    epoch 1 (when it crossed is not measured). Written from the plan's text, independently of the report."""
    for i, c in enumerate(curve):
        if c >= level:
            if i == 0:
                return 1.0 if c == level else None
            return i + (level - curve[i - 1]) / (c - curve[i - 1])  # epochs i and i + 1 bracket the crossing
    return None


def at(curve: list[float], t: float) -> float:
    """A per-epoch curve read at fractional epoch t (1 <= t <= len(curve)) by linear interpolation."""
    i = min(int(math.floor(t)), len(curve) - 1)  # the recorded epoch at or below t (1-based), or the last but one
    return curve[i - 1] + (t - i) * (curve[i] - curve[i - 1]) if t > i else curve[i - 1]


def claim1_matched(df: pd.DataFrame, reach=first_reach) -> tuple[pd.Series, list[float]]:
    """Claim 1 under plan 5.0 from the tidy table: per pair (replicate, seed) the mean over BN's epochs of BN's
    flipped-label training accuracy minus the no-norm model's at the epoch its clean training accuracy first
    reaches BN's; the mean over a replicate's pairs (a pair with no match left out). Also every matched t'."""
    m = df[(df.lens == "memorize") & (df.metric == "accuracy") & (df.label_noise > 0)]
    curves: dict[tuple, list[float]] = {}
    for (rep, norm, seed, sub), g in m.groupby(["replicate", "norm", "unit_id", "subset"]):
        curves[rep, norm, seed, sub] = [float(v) for v in g.sort_values("epoch")["value"]]
    per_pair: dict[int, list[float]] = {}
    times: list[float] = []
    for (rep, norm, seed, sub), bn_clean in curves.items():
        if norm != "batch" or sub != "clean":
            continue
        bn_noisy = curves[rep, "batch", seed, "noisy"]
        none_clean, none_noisy = curves[rep, "none", seed, "clean"], curves[rep, "none", seed, "noisy"]
        diffs = []
        for a, v in zip(bn_clean, bn_noisy):
            t = reach(none_clean, a)
            if t is not None:
                times.append(t)
                diffs.append(v - at(none_noisy, t))
        if diffs:
            per_pair.setdefault(rep, []).append(sum(diffs) / len(diffs))
    return pd.Series({rep: sum(d) / len(d) for rep, d in sorted(per_pair.items())}), times


def test_claim1_recomputed_from_the_table_matches_summary(run):
    """Claim 1's matched-progress statistic recomputed from the table equals summary.csv, and the fixture
    really exercises the interpolation: some matches fall between recorded epochs, and the statistic is not
    plan 4.0's same-epoch mean over epochs."""
    df = load(run)
    diff, times = claim1_matched(df)
    assert diff.size == 2 and summary(run)["1"]["status"] != "not run"
    assert any(t != int(t) for t in times), times
    check(summary(run)["1"], diff)
    m = df[(df.lens == "memorize") & (df.subset == "noisy") & (df.metric == "accuracy")]
    area = m.groupby(["replicate", "norm", "unit_id"])["value"].mean().unstack("norm")
    same_epoch = (area["batch"] - area["none"]).groupby("replicate").mean()
    assert abs(same_epoch.mean() - diff.mean()) > 1e-3


def test_claim1_recompute_catches_a_wrong_interpolation(run):
    """The check above can fail: read the no-norm model at the recorded epoch after the crossing (no
    interpolation) and the recomputed value no longer matches summary.csv."""
    def rounded_up(curve, level):
        t = first_reach(curve, level)
        return None if t is None else float(math.ceil(t))

    wrong, _ = claim1_matched(load(run), reach=rounded_up)
    with pytest.raises(AssertionError):
        check(summary(run)["1"], wrong)


def test_claim3a_paired_differences_from_the_table_match_summary(run):
    df = load(run)
    t = df[(df.lens == "lira") & (df.method == "online") & (df.subset == "all") & (df.metric == "auc")
           & (df.label_noise > 0)]
    wide = t.pivot_table(index=["replicate", "unit_id"], columns="norm", values="value")
    diff = (wide["batch"] - wide["none"]).groupby("replicate").mean()
    check(summary(run)["3a"], diff)


def test_export_csv_and_parquet_equal_load(run, tmp_path):
    df = load(run)
    assert main(["export", str(run), "--out", str(tmp_path / "r.csv")]) == 0
    back = pd.read_csv(tmp_path / "r.csv")
    assert list(back.columns) == list(COLUMNS) and len(back) == len(df)
    np.testing.assert_allclose(back["value"].to_numpy(), df["value"].to_numpy(), rtol=1e-12)
    assert (back["cell"] == df["cell"]).all()
    # Stable dtypes: pd.read_csv infers each chunk of a large file on its own, and a text column whose chunk
    # is all empty would come back as float (the "mixed types" warning). Small chunks show it on a small file.
    text = [c for c in COLUMNS if df[c].dtype == object or pd.api.types.is_string_dtype(df[c])]
    assert {"ood_source", "method"} <= set(text)
    for chunk in pd.read_csv(tmp_path / "r.csv", chunksize=25):
        assert [c for c in text if not pd.api.types.is_string_dtype(chunk[c])] == []
    assert set(back.loc[back.ood == 0, "ood_source"]) == {"-"}
    assert set(back.loc[back.lens == "memorize", "method"]) == {"-"}
    pytest.importorskip("pyarrow")
    assert main(["export", str(run), "--format", "parquet", "--out", str(tmp_path / "r.parquet")]) == 0
    pq = pd.read_parquet(tmp_path / "r.parquet")
    pd.testing.assert_frame_equal(pq, df, check_dtype=False)


def test_export_load_and_recompute_show_progress(run, tmp_path, capsys):
    """export, compare --recompute and results.load show a bar over the cells on stderr (not with --quiet)."""
    assert main(["export", str(run), "--out", str(tmp_path / "r.csv")]) == 0
    assert "reading cells" in capsys.readouterr().err
    assert main(["export", str(run), "--out", str(tmp_path / "q.csv"), "--quiet"]) == 0
    assert "reading cells" not in capsys.readouterr().err
    load(run)
    assert "reading cells" in capsys.readouterr().err
    assert main(["compare", str(run), str(run), "--recompute"]) == 0
    assert "reading cells" in capsys.readouterr().err


def test_export_bad_format_one_line(run, tmp_path, capsys):
    assert main(["export", str(run), "--format", "xlsx", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "csv or parquet" in err[0] and not (tmp_path / "x").exists()


def test_every_column_is_documented():
    # The tidy table's columns are the "## Columns" section (summary.csv's power columns have their own).
    text = DOCS.read_text(encoding="utf-8").split("## Columns", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.M))
    assert documented == set(COLUMNS)


def test_compare_two_runs(run, tmp_path, capsys):
    """The same run under a doctored summary: the changed claim says what changed (claim 3a, in the report's
    AUC points), the others 'same'."""
    other = tmp_path / "other"
    other.mkdir()
    rows = list(csv.DictReader(open(run / "summary.csv", encoding="utf-8", newline="")))
    panel = [r for r in rows if r["role"] != "verdict"]  # plan 6.0's robustness rows: compare reads verdicts only
    rows = [r for r in rows if r["role"] == "verdict"]
    for r in rows:
        if r["id"] == "3a":
            r["status"], r["value"] = "contradicted", str(float(r["value"]) - 0.5)
    with open(other / "summary.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows + panel)
    capsys.readouterr()
    assert main(["compare", str(run), str(other)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("3a "))
    assert "contradicted" in line and "effect -50.0 points" in line and "status " in line
    assert "1 of" in out and "claims differ" in out
    assert main(["compare", str(run), str(other), "--markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("| # | claim |") and md.count("| same |") == len(rows) - 1
    cells = [r["claim"].replace("|", "\\|") for r in rows]  # a pipe escaped inside a markdown cell
    assert "…" not in md and all(f"| {c} |" in md for c in cells)  # markdown wraps: titles in full
    assert main(["compare", str(run), str(run), "--recompute"]) == 0
    assert "0 of" in capsys.readouterr().out


def test_compare_shows_claims_as_the_report_does():
    """Claim 3 in AUC points (as the report and the paper), and 3a/3b's titles, which share their first 48
    characters, in full so they do not read the same."""
    from bnmem.analysis_plan import PLAN
    from bnmem.report.compare import Checklist, compare_rows, effect

    row = {"id": "3a", "claim": PLAN["3a"].title,
           "value": "0.125", "ci_low": "0.081", "ci_high": "0.169", "ci_level": "0.95", "status": "reproduced"}
    assert effect(row) == "+12.5 [+8.1, +16.9] points"
    rows = {cid: {**row, "id": cid, "claim": PLAN[cid].title} for cid in ("3a", "3b", "1")}
    later = {**rows, "3a": {**rows["3a"], "value": "0.15"}}
    table = compare_rows(Checklist("A", "a", rows), Checklist("B", "b", later))
    titles = {r[0]: r[1] for r in table}
    assert titles["3a"] != titles["3b"] and titles["3a"] == PLAN["3a"].title
    assert "effect +2.5 points" in table[0][-1]
