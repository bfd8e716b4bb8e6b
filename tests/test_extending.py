"""A newcomer's lens, registered from README.md's "Extending bnmem" block alone: it runs in a study, in the
CLI and in the report.

Nothing under src/bnmem is edited for it; the lens is the README's own code, read from the README and
executed here, so the walk-through cannot drift from what works.
"""

from __future__ import annotations

import json
import sys
import types

import pytest

from bnmem import io
from bnmem.lenses import registry

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from readme_blocks import named  # noqa: E402


@pytest.fixture
def toy_lens():
    """Execute the README block as a module of its own (its ``register`` call registers the lens)."""
    module = types.ModuleType("readme_label_count")
    sys.modules[module.__name__] = module  # pydantic resolves the config's annotations through it
    try:
        exec(compile(named("extending").text, "README.md (Extending bnmem)", "exec"), module.__dict__)
        yield module.LENS
    finally:
        registry.unregister("label-count")
        sys.modules.pop(module.__name__, None)


def test_toy_lens_runs_in_a_study_and_appears_in_the_report(toy_lens, tmp_path):
    from bnmem.report.build import build_report
    from bnmem.study import load_study, run_study

    study_file = tmp_path / "toy.yaml"
    study_file.write_text(
        "name: toy\n"
        "data: {dataset: digits, train_size: 120}\n"
        "grid: {outliers: [{label_noise: 0.1}], seeds: [0]}\n"
        "lenses: {label-count: {top: 2}}\n", encoding="utf-8")
    result = run_study(load_study(study_file), tmp_path / "run", progress=False)
    assert [j["status"] for j in result.jobs] == ["done"]
    folder = tmp_path / "run" / "digits-lenet-flip0.1" / "label-count"
    doc = io.read_json(folder / "label_count.json")
    assert doc["lens"] == "label-count" and doc["schema_version"] == 1
    assert len(doc["top"]) == 2 and doc["n_noisy"] == 12  # round(0.1 * 120)
    index = io.read_json(tmp_path / "run" / "index.json")
    assert index["cells"][0]["lenses"] == {"label-count": "digits-lenet-flip0.1/label-count"}

    rep = build_report(tmp_path / "run")
    html = rep.html.read_text(encoding="utf-8")
    assert 'id="lens-label-count"' in html and "Label counts (toy lens)" in html
    assert "flipped labels: 12" in html and "flipped labels: 12" in rep.markdown.read_text(encoding="utf-8")


def test_toy_lens_gets_a_generic_command(toy_lens, tmp_path, capsys):
    from bnmem.cli import main

    out = tmp_path / "lc"
    assert main(["label-count", "--train-size", "100", "--label-noise", "0.05", "--set", "top=4",
                 "--out", str(out)]) == 0
    assert "flipped labels: 5" in capsys.readouterr().out
    assert len(json.loads((out / "label_count.json").read_text())["top"]) == 4
    # Its config is validated before anything is written: a bad option leaves no folder behind.
    assert main(["label-count", "--set", "top=x", "--out", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()


def test_unknown_lens_in_a_study_is_one_line(tmp_path, capsys):
    from bnmem.cli import main

    study_file = tmp_path / "s.yaml"
    study_file.write_text("name: s\nlenses: [memorize, no-such-lens]\n", encoding="utf-8")
    assert main(["run", str(study_file), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown lens 'no-such-lens'" in err
    assert not (tmp_path / "r").exists()


def test_toy_lens_numbers_reach_the_tidy_export(toy_lens, tmp_path):
    """A plugin lens has no tidy reader of its own: the generic one exports every number, NaN included."""
    import math

    from bnmem.report.rundata import LensOutput
    from bnmem.report.tidy import generic_rows, reader_of

    assert reader_of("label-count") is generic_rows and reader_of("theory") is None
    data = {"lens": "label-count", "schema_version": 1, "counts": [3, 4, float("nan")], "top": [1, 0],
            "n_noisy": 12, "conditions": {"norms": ["batch"]}, "nested": {"a": [[1.5, 2.5]], "ok": True}}
    rows = list(generic_rows(LensOutput("label-count", tmp_path, data)))
    got = {(r["metric"], r["unit_id"]): r["value"] for r in rows}
    assert [k for k in got if k[0] == "counts"] == [("counts", 0), ("counts", 1), ("counts", 2)]
    assert math.isnan(got[("counts", 2)]) and got[("n_noisy", None)] == 12
    assert got[("nested.a[0]", 1)] == 2.5 and len(rows) == 3 + 2 + 1 + 2  # booleans and conditions are not numbers


@pytest.mark.slow
def test_toy_lens_in_a_study_reaches_bnmem_results_load(toy_lens, tmp_path):
    from bnmem.results import load
    from bnmem.study import load_study, run_study

    study_file = tmp_path / "toy.yaml"
    study_file.write_text("name: toy\ndata: {dataset: digits, train_size: 120}\n"
                          "grid: {outliers: [{label_noise: 0.1}], seeds: [0]}\n"
                          "lenses: {label-count: {top: 2}}\n", encoding="utf-8")
    run_study(load_study(study_file), tmp_path / "run", progress=False)
    df = load(tmp_path / "run")
    lc = df[df["lens"] == "label-count"]
    assert lc[lc["metric"] == "n_noisy"]["value"].tolist() == [12.0]
    assert len(lc[lc["metric"] == "counts"]) == 10 and set(lc["dataset"]) == {"digits"}
