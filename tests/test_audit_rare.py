"""Outliers by kind (issue 27, item 4): rare but correctly labelled images passed with --outliers.

The case: the digits folder of tests/audit_scenario.py with class 9 cut down to 6 training images (listed in
outliers.csv, nothing mislabeled), the small BN CNN trained long enough to fit them (20 epochs, lr 0.05,
momentum 0.9). Passed as --mislabeled (as the README allowed for "other known outliers") the audit called them
flipped labels to relabel; passed as --outliers they are a group of their own, described as rare.
"""

from __future__ import annotations

import json
import re

import pytest
from audit_scenario import N_RARE, write_rare_scenario

from bnmem.cli import main

# Words that describe a label as wrong; none may describe correctly labelled rare images.
MISLABELING = re.compile(r"mislabel|relabel|flipped|corrupt|wrong label|pure memorization", re.I)


@pytest.fixture(scope="module")
def rare(tmp_path_factory):
    root = tmp_path_factory.mktemp("rare")
    s = write_rare_scenario(root)
    out = root / "audit"
    assert main(["audit", "--quiet", *s["flags"], "--shadow-models", "4", "--out", str(out)]) == 0
    return s, json.loads((out / "audit.json").read_text()), (out / "audit.md").read_text(), out


def test_rare_images_are_their_own_group_in_their_own_words(rare):
    _, res, md, _ = rare
    risk = res["risk"]
    group = next(g for g in risk["groups"] if g["group"] == "rare")
    assert group["name"] == f"the {N_RARE} files listed as rare or atypical"
    assert res["data"]["n_rare"] == N_RARE and res["data"]["n_noisy"] == 0 and not res["data"]["outliers_known"]
    assert MISLABELING.search(md) is None, MISLABELING.search(md)
    assert any("listed as rare stand out" in r for r in risk["recommendations"])
    rows = [r for r in res["gradient_norms"]["top_k"] if r["flagged"]]
    assert rows and {r["flagged"] for r in rows} == {"rare"}
    assert res["accuracy"]["rare_acc"] is not None and "noisy_acc" not in res["accuracy"]


def test_memorization_scores_pick_out_the_rare_images(rare):
    """A copy that trained on one of the 6 nines answers 9 for it; one that did not has 2-4 other nines to learn
    from, so the scores of the rare images stand well above the rest's (measured: 0.5-0.7 against about 0.02)."""
    _, res, _, _ = rare
    by = res["membership"]["memorization_scores"]["by_subset"]
    assert by["rare"]["n"] == N_RARE and by["rare"]["mean"] > by["all"]["mean"] + 0.3


def test_the_gradient_norm_comparison_is_robust_and_explained(rare):
    _, res, _, _ = rare
    r = res["gradient_norms"]["rare"]
    assert r["rest_percentile"] == 95 and 0 <= r["above_rest_percentile"] <= 1
    finding = next(f for f in res["risk"]["findings"] if "examples listed as rare" in f and "gradient" in f)
    assert "above the others' 95th percentile" in finding and "×" not in finding
