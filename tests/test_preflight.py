"""`bnmem run` checks data and disk before its first job, and a full disk mid-run is one line.

- a study whose dataset is missing stops before any job, in one line, with nothing written;
- the disk check compares a patched free-space function with the dry-run estimate plus margin;
- ENOSPC injected into the one writer (bnmem.io) stops the study in one line; rerunning after
  "freeing space" gives results byte-identical to an uninterrupted run.
"""

from __future__ import annotations

import json

import errno
from pathlib import Path

import pytest
import yaml

from bnmem import io
from bnmem.cli import main
from bnmem.study import load_study, build_jobs
from bnmem.study import preflight as pf

ROOT = Path(__file__).resolve().parents[1]

TINY = {
    "name": "pre",
    "data": {"dataset": "digits", "train_size": 120, "val_fraction": 0.1},
    "train": {"epochs": 1, "batch_size": 32},
    "grid": {"norms": ["batch", "none"], "seeds": [0], "outliers": [{"label_noise": 0.1}]},
    "lenses": {"memorize": {}, "gamma-sigma": {}, "lira": {"shadow_models": 4}},
}
RESULT_SUFFIXES = (".json", ".npy", ".npz", ".pt")


# The faults are injected into this process's bnmem.io: the runs here stay in-process (--workers 1; `bnmem run`
# defaults to every available core, whose worker processes would not see the patch).
IN_PROCESS = ("--workers", "1")


def write_study(tmp_path: Path) -> Path:
    path = tmp_path / "pre.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def result_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in RESULT_SUFFIXES and p.name not in ("DONE", "environment.json")
            and not p.name.startswith(".")}


def error_lines(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


def test_missing_dataset_stops_before_any_job(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BNMEM_DATA", str(tmp_path / "empty"))
    out = tmp_path / "out"
    # --set train.device=cpu: the study declares cuda, which a machine without one refuses before the preflight
    assert main(["run", str(ROOT / "studies" / "mnist.yaml"), "--out", str(out), "--quiet",
                 "--set", "train.device=cpu"]) == 2
    err = error_lines(capsys)
    assert len(err) == 1, err
    assert "preflight: dataset mnist not found" in err[0] and "--download" in err[0]
    assert not out.exists() and not (tmp_path / "empty").exists()


def test_download_fetches_before_the_first_job(tmp_path, monkeypatch):
    """With download asked, a missing dataset is fetched once by the preflight (here: a stub)."""
    from bnmem.data import sources

    fetched = []
    monkeypatch.setattr(sources, "_download", lambda name, root: fetched.append((name, str(root))))
    monkeypatch.setenv("BNMEM_DATA", str(tmp_path / "empty"))
    study = load_study(ROOT / "studies" / "mnist.yaml", ["data.download=true"])
    pf.check_data(build_jobs(study)[1])
    assert sorted({n for n, _ in fetched}) == ["fashion-mnist", "mnist"]  # the OOD source is a dataset too
    assert len(fetched) == 2


def test_disk_check_uses_estimate_and_margin(tmp_path, monkeypatch, capsys):
    study_file = write_study(tmp_path)
    jobs = build_jobs(load_study(study_file))[1]
    out = tmp_path / "out"
    need = pf.pending_bytes(jobs, out)
    assert need > 0
    required = int(need * (1 + pf.DISK_MARGIN)) + pf.DISK_ALLOWANCE
    monkeypatch.setattr(pf, "free_bytes", lambda path: required)
    pf.check_disk(jobs, out)  # exactly enough
    monkeypatch.setattr(pf, "free_bytes", lambda path: required - 1)
    with pytest.raises(pf.BnmemError, match="--skip-disk-check"):
        pf.check_disk(jobs, out)
    assert main(["run", str(study_file), "--out", str(out), "--quiet"]) == 2
    err = error_lines(capsys)
    assert len(err) == 1 and "preflight:" in err[0] and "free at" in err[0], err
    assert not out.exists()


def test_free_bytes_of_a_path_not_yet_created(tmp_path):
    assert pf.free_bytes(tmp_path / "a" / "b") > 0


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("whole")
    out = base / "run"
    assert main(["run", str(write_study(base)), "--out", str(out), "--quiet", *IN_PROCESS]) == 0
    return out


def test_disk_full_mid_run_is_one_line_and_resume_is_identical(uninterrupted, tmp_path, monkeypatch, capsys):
    real = io._write_file
    calls = {"n": 0}

    def counting(path, data):
        calls["n"] += 1
        return real(path, data)

    monkeypatch.setattr(io, "_write_file", counting)
    (tmp_path / "count").mkdir()
    assert main(["run", str(write_study(tmp_path / "count")), "--out", str(tmp_path / "count" / "run"),
                 "--quiet", *IN_PROCESS]) == 0
    total = calls["n"]
    assert total > 10

    def full_after_half(path, data):
        calls["n"] += 1
        if calls["n"] > total // 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    calls["n"] = 0
    monkeypatch.setattr(io, "_write_file", full_after_half)
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["run", str(write_study(tmp_path)), "--out", str(out), "--quiet", *IN_PROCESS]) == 2
    err = error_lines(capsys)
    assert len(err) == 1, err
    assert "disk full while writing" in err[0] and "rerun the same command to resume" in err[0]
    assert "Traceback" not in err[0] and not io.is_done(out)
    partial = result_files(out)
    want = result_files(uninterrupted)
    assert partial and len(partial) < len(want)
    # Nothing half-written kept: every file the crash left is byte-identical to the finished run's, except
    # finished intermediates the finished run removes (a query chunk's φ, merged into phi.npy at the end;
    # where the crash lands depends on how many writes come first). The resume below must remove them.
    extra = [k for k in partial if k not in want]
    assert all("/query/" in k for k in extra), extra
    # study.json gains the selected recipes when the run ends (bnmem.study.recipes): the rest is as written first
    from bnmem.study.recipes import SELECTED_RECIPES_KEY

    def plain(k, data):
        return json.dumps({a: b for a, b in json.loads(data).items() if a != SELECTED_RECIPES_KEY}) \
            if k == "study.json" else data

    assert [k for k in partial if k in want and plain(k, partial[k]) != plain(k, want[k])] == []
    assert not [p for p in out.rglob("*.tmp")]

    monkeypatch.setattr(io, "_write_file", real)  # space freed
    assert main(["run", str(write_study(tmp_path)), "--out", str(out), "--quiet", *IN_PROCESS]) == 0
    got = result_files(out)
    assert got.keys() == want.keys()
    assert [k for k in got if got[k] != want[k]] == []
