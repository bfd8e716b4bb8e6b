"""Fuzzer, family 4: damaged run directories, and a few cases as real processes; see tests/test_fuzz.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_support import (FINISHED, TINY_STUDY, assets, check_outcome, engine_stubs, error_line, examples,
                          files_under, in_directory, invoke, run_case, stubs)

RUN_STUDY = {"name": "fzrun", "data": {"dataset": "digits", "train_size": 120}, "train": {"epochs": 1},
             "norms": ["batch", "none"], "grid": {"seeds": [0], "replicates": 2, "outliers": [{"label_noise": 0.1}]},
             "lenses": {"memorize": {}}}
REPORT_OUTPUTS = ("report.html", "summary.md", "summary.csv", "results.csv", "figures")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A real finished study (2 replicates of memorize, 1 epoch on 120 digits), without its report."""
    root = tmp_path_factory.mktemp("fuzz-run")
    (root / "study.yaml").write_text(yaml.safe_dump(RUN_STUDY))
    with in_directory(root):
        r = invoke(["run", "study.yaml", "--out", "run", "--workers", "1", "--quiet"])
    assert r.code == 0, r.err
    return root / "run"


DAMAGES = ["delete", "empty", "half", "json-list", "json-empty", "binary", "directory", "foreign-line"]


def damage(path: Path, how: str) -> None:
    """Damage one file (or folder) of a run as a crash, a full disk or a stray tool would."""
    if path.is_dir():
        shutil.rmtree(path)
        if how == "directory":
            path.write_text("a file where a folder was")
        return
    data = path.read_bytes()
    if how == "delete":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "half":
        path.write_bytes(data[: len(data) // 2])
    elif how == "json-list":
        path.write_text("[1, 2, 3]")
    elif how == "json-empty":
        path.write_text("{}")
    elif how == "binary":
        path.write_bytes(b"\x00\xff\xfe" * 11)
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "foreign-line":
        path.write_bytes(data + b"\n<<<<<<< foreign\n")


def run_files(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.name not in REPORT_OUTPUTS)


@examples(60)
@given(data=st.data())
def test_fuzz_damaged_run_directories(finished_run, data):
    damaged_run_property(finished_run, data, DAMAGES, ["report", "export", "export", "compare", "compare-recompute"])


def damaged_run_property(finished_run: Path, data, damages: list[str], commands: list[str],
                         only: str = "") -> None:
    names = [n for n in run_files(finished_run) if n.endswith(only)]
    picks = data.draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(damages)), min_size=1, max_size=2))
    command = data.draw(st.sampled_from(commands))
    with tempfile.TemporaryDirectory(prefix="bnmem-fuzz-") as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(finished_run, run)
        for name, how in picks:
            if (run / name).exists():
                damage(run / name, how)
        argv = {"report": ["report", run], "export": ["export", run, "--quiet"],
                "compare": ["compare", finished_run, run, "--quiet"],
                "compare-recompute": ["compare", run, finished_run, "--recompute", "--quiet"]}[command]
        run_case(argv, cwd=Path(tmp), watch=run)


def test_the_fuzzer_fails_when_a_validator_is_removed(finished_run, monkeypatch):
    """The planted bug of issue 39's 'done when': the run reader's check that a JSON document is an object, removed
    (its code before the fuzzer found the crash). The damaged-run family must then fail."""
    import json

    from bnmem.report import rundata

    def unchecked(path, problems):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            problems.append(f"{path}: unreadable ({e})")
            return None

    monkeypatch.setattr(rundata, "_read_json", unchecked)

    @settings(max_examples=40, deadline=None)
    @given(data=st.data())
    def fuzz(data):
        damaged_run_property(finished_run, data, ["json-list", "json-empty"], ["export"], only=".json")

    from hypothesis.errors import HypothesisException

    with pytest.raises(Exception) as caught:  # the crash (a traceback) or the property's assertion
        fuzz()
    assert not isinstance(caught.value, HypothesisException), caught.value
    # and without the planted bug the same cases pass
    monkeypatch.undo()
    fuzz()


@pytest.mark.parametrize("name, how", [("DONE", "delete"), ("index.json", "half"),
                                       ("digits-lenet-flip0.1-r0/memorize/metrics.json", "binary"),
                                       ("digits-lenet-flip0.1-r1/memorize/batch/seed1000/model.pt", "empty")])
def test_fuzz_damaged_run_resumes_or_fails_in_one_line_and_the_fixed_run_reports(finished_run, tmp_path, name, how):
    """Rerunning the study on a damaged run either repairs it or says what to remove; after the fix (the damaged
    piece removed), the rerun finishes and the report is written."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(RUN_STUDY))
    damage(run / name, how)
    argv = ["run", "study.yaml", "--out", "run", "--workers", "1", "--quiet"]
    r = run_case(argv, cwd=tmp_path, watch=run)
    if r.code == 2:
        target = run / name
        (shutil.rmtree if target.is_dir() else Path.unlink)(target)
        r = run_case(argv, cwd=tmp_path, watch=run)
    assert r.code == 0, r.err
    assert run_case(["report", run], cwd=tmp_path).code == 0
    assert (run / "summary.csv").exists()


# ---------------------------------------------------------------------------------------------- real processes

@pytest.mark.subprocess
@pytest.mark.parametrize("argv", [["memorize", "--arch", "vgg"], ["run", "NOFILE.yaml"],
                                  ["audit", "--model", "NOFILE.pt"], ["report", "."], ["lira", "--device", "tpu"]])
def test_fuzz_subprocess_one_line(tmp_path, argv):
    """The in-process property holds for a real process too (interpreter start, sys.exit, stderr encoding)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "bnmem", *argv], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 2, p.stderr
    error_line(p.stderr)
    assert not any(Path(f).name in FINISHED for f in files_under(tmp_path))
