"""A newcomer's lens, registered from this file alone: it runs in a study, in the CLI and in the report.

Nothing under src/bnmem is edited for it; this is the README's "Extending bnmem" walk-through as a test.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from bnmem import io
from bnmem.config import ExperimentConfig
from bnmem.lenses import registry
from bnmem.lenses.conditions import conditions
from bnmem.lenses.registry import Lens


class LabelCountConfig(ExperimentConfig):
    """Toy lens config: one option of its own."""

    top: int = 3


def run_label_count(cfg: LabelCountConfig, out, *, progress: bool = True, executor: Any = None) -> dict:
    """Count training labels per class (and how many are flipped): no training at all."""
    from bnmem.data import load_dataset
    from bnmem.rundir import prepare_run_dir

    out = prepare_run_dir(out, cfg.model_dump(mode="json"))
    ds = load_dataset(cfg.data)
    counts = np.bincount(ds.y_train.numpy(), minlength=ds.num_classes)
    result = LENS.stamp({"counts": counts.tolist(), "top": np.argsort(-counts)[: cfg.top].tolist(),
                         "n_noisy": int(ds.is_noisy.sum()), "conditions": conditions(cfg)})
    io.write_json(out / "label_count.json", result)
    return result


def summary(result: dict) -> str:
    return f"most frequent classes: {result['top']}; flipped labels: {result['n_noisy']}"


LENS = Lens(name="label-count", config=LabelCountConfig, run=run_label_count, results="label_count.json",
            title="Label counts (toy lens)", summary=summary)


@pytest.fixture
def toy_lens():
    registry.register(LENS)
    yield LENS
    registry.unregister(LENS.name)


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
