"""exposure.csv's numbers against a slow, obviously-correct loop over the examples (float64, scipy's t interval)."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from scipy import stats

from bnmem.attacks import spec as attack_spec
from bnmem.auditing.exposure import FIXED, csv_text, exposure_rows, top_sentence, exposure_section

EXPOSED = attack_spec.the(attack_spec.EXPOSURE)  # the attack whose log Λ is exposure.csv's log_lr


def oracle(scores: dict[str, np.ndarray], members: np.ndarray) -> dict[int, dict]:
    out = {}
    for i in range(members.shape[1]):
        x = scores[EXPOSED][members[:, i], i]
        lo = hi = None
        if len(x) >= 2:
            lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
        out[i] = {"log_lr": x.mean(), "lo": lo, "hi": hi, "n": len(x),
                  **{f"{a}_in": s[members[:, i], i].mean() for a, s in scores.items()},
                  **{f"{a}_out": s[~members[:, i], i].mean() for a, s in scores.items()}}
    return out


@pytest.mark.parametrize("targets", [4, 8, 16])
def test_rows_match_the_loop_and_are_ranked_by_exposure(targets):
    rng = np.random.default_rng(targets)
    n = 50
    members = np.zeros((targets, n), bool)
    for i in range(n):  # each example IN for exactly half the targets, as the keep matrix makes it
        members[rng.permutation(targets)[: targets // 2], i] = True
    scores = {a: rng.normal(size=(targets, n)) + members * rng.uniform(0, 2, n) for a in ("online", EXPOSED,
                                                                                             "rmia")}
    masks = {"all": np.ones(n, bool), "outliers": np.arange(n) < 5, "rare": (np.arange(n) >= 3) & (np.arange(n) < 8)}
    files = [f"train/{i % 10}/{i:04d}.png" for i in range(n)]
    norms = np.where(np.arange(n) % 3 == 0, np.nan, rng.uniform(1, 5, n))
    cols, rows = exposure_rows(scores, members, masks, files, norms)
    want = oracle(scores, members)
    assert cols[: len(FIXED)] == list(FIXED) and "online_in" in cols and f"{EXPOSED}_in" not in cols
    assert [r["rank"] for r in rows] == list(range(1, n + 1)) and sorted(r["index"] for r in rows) == list(range(n))
    assert all(a["log_lr"] >= b["log_lr"] for a, b in zip(rows, rows[1:]))
    for r in rows:
        w, i = want[r["index"]], r["index"]
        assert r["log_lr"] == pytest.approx(w["log_lr"], rel=1e-12) and r["copies_in"] == w["n"] == targets // 2
        assert (r["log_lr_lo"], r["log_lr_hi"]) == pytest.approx((w["lo"], w["hi"]), rel=1e-9)
        assert r["online_out"] == pytest.approx(w["online_out"]) and r["rmia_in"] == pytest.approx(w["rmia_in"])
        assert r["path"] == files[i] and r["group"] == ("outlier" if i < 5 else "rare" if i < 8 else "other")
        assert (r["gradient_norm"] is None) == (i % 3 == 0)
    parsed = list(csv.DictReader(io.StringIO(csv_text(cols, rows))))
    assert [int(p["index"]) for p in parsed] == [r["index"] for r in rows]
    assert all(float(p["log_lr"]) == r["log_lr"] for p, r in zip(parsed, rows))  # full precision
    assert all((p["gradient_norm"] == "") == (r["gradient_norm"] is None) for p, r in zip(parsed, rows))
    top = exposure_section(cols, rows, None)
    assert f"is {rows[0]['path']} ({rows[0]['group']})" in top_sentence(top) and top["n"] == n


def test_one_copy_in_gives_no_interval():
    members = np.array([[True, False], [False, True]])
    scores = {EXPOSED: np.array([[1.0, 2.0], [3.0, 4.0]])}
    _, rows = exposure_rows(scores, members, {}, None, None)
    assert [(r["index"], r["log_lr"], r["log_lr_lo"], r["copies_in"]) for r in rows] == [(1, 4.0, None, 1),
                                                                                       (0, 1.0, None, 1)]
    assert rows[0]["path"] == "" and "training example 1" in top_sentence(exposure_section(["x"], rows, None))


def test_every_column_is_documented():
    """docs/results.md names each column of exposure.csv (the fixed ones and each audit attack's pair)."""
    import re
    from pathlib import Path

    from bnmem.attacks import spec
    from bnmem.auditing.exposure import columns

    text = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text(encoding="utf-8")
    section = text[text.index("## The audit's per-file table: `exposure.csv`"):]
    named = set(re.findall(r"`([a-z_]+)`", section))
    assert set(columns(list(spec.shown_in(spec.AUDIT)))) <= named
