"""Every number README.md and docs/ quote from a generated file matches docs/numbers.json.

docs/numbers.json records each such number as printed, its source (the command or benchmark that
writes the file it is read from) and the doc lines quoting it; benchmarks/docs_numbers.py regenerates
the numbers from those files. A doc edited without regenerating, or numbers regenerated without
editing the doc, fail here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import docs_numbers  # noqa: E402


@pytest.fixture(scope="module")
def data():
    return docs_numbers.load()


def test_every_quoted_number_matches_its_source(data):
    assert docs_numbers.stale(data) == []


def test_every_number_is_quoted_and_says_where_it_came_from(data):
    quoted = {k for q in data["quotes"] for k in docs_numbers.KEY.findall(q["text"])}
    assert quoted <= set(data["numbers"])  # a template naming no number would fail to render
    assert set(data["numbers"]) - quoted == set()  # no number kept that no doc quotes
    for key, n in data["numbers"].items():
        assert n["value"] and n["source"] and n["version"], key
    for q in data["quotes"]:
        assert (ROOT / q["doc"]).is_file() and docs_numbers.KEY.search(q["text"]), q


def test_a_changed_number_is_caught(data):
    """The check can fail: one number changed in numbers.json makes its doc line stale."""
    changed = json.loads(json.dumps(data))
    key = next(iter(changed["numbers"]))
    changed["numbers"][key]["value"] += "9"
    assert len(docs_numbers.stale(changed)) >= 1


def test_theory_numbers_come_from_theory_json(tmp_path, data):
    """The extractor reads every theory number the docs quote from the file `bnmem theory` writes (a small
    simulation here: the keys and formats, not the values, are what this checks)."""
    from bnmem.theory import TheoryConfig, run_theory

    run_theory(TheoryConfig(steps=12, counterfactual_seeds=2, plot=False), tmp_path)
    got = docs_numbers.theory_numbers(tmp_path / "theory.json")
    wanted = {k for k in data["numbers"] if k.startswith("theory.")}
    assert wanted and wanted <= set(got)
    assert docs_numbers.fmt(-31492.5, "group") == "−31 492" and docs_numbers.fmt(0.0037, ".0%") == "0%"
