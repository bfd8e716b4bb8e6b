"""bnmem.io and bnmem.rundir: atomic files, DONE markers, run directories and resume safety.

Crash safety by fault injection (a failing rename or writer) is in tests/test_oracles.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from bnmem import __version__, io, rundir
from bnmem.errors import BnmemError


def test_ensure_dir_creates_parents_and_returns_the_path(tmp_path):
    got = io.ensure_dir(tmp_path / "a" / "b")
    assert got == tmp_path / "a" / "b" and got.is_dir()
    assert io.ensure_dir(str(got)) == got  # existing is fine, strings are accepted


def test_ensure_dir_file_in_the_way_is_one_user_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(BnmemError, match=r"cannot create directory .*f/sub: a file is in the way"):
        io.ensure_dir(tmp_path / "f" / "sub")
    with pytest.raises(BnmemError, match="a file is in the way"):
        io.ensure_dir(tmp_path / "f")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_ensure_dir_read_only_is_one_user_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(BnmemError, match="permission denied"):
        io.ensure_dir(ro / "sub")
    with pytest.raises(BnmemError, match="cannot write into"):
        io.ensure_dir(ro)


def test_ensure_dir_unwritable_existing_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(io.os, "access", lambda path, mode: False)
    with pytest.raises(BnmemError, match=r"cannot write into .*: permission denied"):
        io.ensure_dir(tmp_path)


def test_ensure_dir_permission_error_message(tmp_path, monkeypatch):
    def denied(self, *a, **k):
        raise PermissionError

    monkeypatch.setattr(Path, "mkdir", denied)
    with pytest.raises(BnmemError, match=r"^cannot create directory .*x: permission denied$"):
        io.ensure_dir(tmp_path / "x")


def test_atomic_path_temp_is_hidden_next_to_the_target(tmp_path):
    target = tmp_path / "sub" / "out.bin"
    with io.atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(".out.bin.") and tmp.name.endswith(".tmp")
        assert tmp.exists() and not target.exists()
        tmp.write_bytes(b"abc")
    assert target.read_bytes() == b"abc" and sorted(p.name for p in target.parent.iterdir()) == ["out.bin"]


def test_json_roundtrip_numpy_paths_and_nan(tmp_path):
    p = tmp_path / "x.json"
    io.write_json(p, {"i": np.int64(3), "f": np.float32(0.5), "a": np.arange(3), "p": Path("/tmp/y"),
                      "n": float("nan"), "u": "γ/σ"})
    text = p.read_text(encoding="utf-8")
    assert text.endswith("}\n") and "\n  \"i\": 3," in text and "NaN" in text  # indented, nan allowed
    got = io.read_json(p)
    assert got["i"] == 3 and got["f"] == 0.5 and got["a"] == [0, 1, 2] and got["p"] == "/tmp/y"
    assert np.isnan(got["n"]) and got["u"] == "γ/σ"
    with pytest.raises(TypeError, match="not JSON serializable: object"):
        io.write_json(p, {"bad": object()})
    assert io.read_json(p)["i"] == 3  # the failed write left the old file


def test_text_is_utf8(tmp_path):
    io.write_text(tmp_path / "t.md", "σ → γ")
    assert (tmp_path / "t.md").read_bytes() == "σ → γ".encode("utf-8")


def test_npy_npz_and_torch_roundtrip(tmp_path):
    io.write_npy(tmp_path / "a.npy", [[1, 2], [3, 4]])
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), [[1, 2], [3, 4]])
    io.write_npz(tmp_path / "b.npz", x=np.ones(3), y=[1, 2])
    with np.load(tmp_path / "b.npz") as z:
        assert sorted(z.files) == ["x", "y"] and z["y"].tolist() == [1, 2]
    state = {"w": torch.arange(4.0), "meta": {"epoch": 2}}
    io.save_torch(tmp_path / "m.pt", state)
    back = io.load_torch(tmp_path / "m.pt")
    assert torch.equal(back["w"], state["w"]) and back["meta"] == {"epoch": 2}


def test_npy_refuses_object_arrays(tmp_path):
    """Arrays are stored without pickles, so loading them never runs code."""
    with pytest.raises(ValueError, match="pickle"):
        io.write_npy(tmp_path / "o.npy", np.array([{"a": 1}, None], dtype=object))
    assert list(tmp_path.iterdir()) == []


def test_load_torch_refuses_pickled_code(tmp_path):
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")  # a whole module, not a state dict
    with pytest.raises(Exception):
        io.load_torch(tmp_path / "module.pt")


def test_done_marker(tmp_path):
    assert not io.is_done(tmp_path)
    io.mark_done(tmp_path)
    assert io.is_done(str(tmp_path)) and io.read_json(tmp_path / "DONE") == {}
    io.mark_done(tmp_path / "job", {"epochs": 3})
    assert io.read_json(tmp_path / "job" / io.DONE) == {"epochs": 3} and io.DONE == "DONE"



def test_done_seconds_total_sums_every_marker_or_says_none(tmp_path):
    """A job's work in several folders: their DONE seconds summed; None where one folder is unfinished or its
    marker recorded no seconds (a total without it would under-count the job)."""
    for name, secs in (("a", 2.5), ("b", 4.0)):
        io.mark_done(tmp_path / name, {"seconds": secs})
    io.mark_done(tmp_path / "untimed")
    assert io.done_seconds_total([tmp_path / "a", tmp_path / "b"]) == 6.5
    assert io.done_seconds_total(p for p in (tmp_path / "a",)) == 2.5
    assert io.done_seconds_total([tmp_path / "a", tmp_path / "missing"]) is None
    assert io.done_seconds_total([tmp_path / "a", tmp_path / "untimed"]) is None
    assert io.done_seconds_total([]) == 0.0


def test_prepare_run_dir_writes_config_and_environment(tmp_path):
    out = rundir.prepare_run_dir(tmp_path / "run", {"a": 1, "p": Path("/x"), "t": (1, 2)})
    assert out == tmp_path / "run"
    assert io.read_json(out / "config.json") == {"a": 1, "p": "/x", "t": [1, 2]}
    env = io.read_json(out / "environment.json")
    assert env["bnmem"] == __version__ and env["torch"] == torch.__version__ and env["numpy"] == np.__version__
    assert set(env) == {"bnmem", "python", "torch", "numpy", "platform", "cuda"} and env["cuda"] in (True, False)
    assert env["python"].count(".") == 2


def test_prepare_run_dir_same_config_resumes_other_config_refused(tmp_path):
    rundir.prepare_run_dir(tmp_path, {"a": 1}, name="lens.json")
    rundir.prepare_run_dir(tmp_path, {"a": 1}, name="lens.json")  # a rerun with the same config resumes
    with pytest.raises(BnmemError, match=r"holds a run with a different configuration \(lens.json\); use a new --out"):
        rundir.prepare_run_dir(tmp_path, {"a": 2}, name="lens.json")
    assert io.read_json(tmp_path / "lens.json") == {"a": 1}
    assert not (tmp_path / "config.json").exists()


def test_prepare_run_dir_replaces_an_unreadable_config(tmp_path):
    (tmp_path / "config.json").write_text("{half written")
    rundir.prepare_run_dir(tmp_path, {"a": 1})
    assert json.loads((tmp_path / "config.json").read_text()) == {"a": 1}
