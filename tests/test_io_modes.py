"""Results files are as readable as the umask says (not the 0600 of a temporary file)."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from bnmem import io


@pytest.fixture
def umask():
    """Set the umask for one test and restore it afterwards."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600), (0o027, 0o640)])
def test_every_writer_gives_the_umask_mode(tmp_path, umask, mask, mode) -> None:
    umask(mask)
    assert io.current_umask() == mask and io.current_umask() == mask  # reading it does not change it
    io.write_json(tmp_path / "a.json", {"x": 1})
    io.write_text(tmp_path / "b.txt", "x")
    io.write_npy(tmp_path / "c.npy", np.zeros(3))
    io.write_npz(tmp_path / "d.npz", x=np.zeros(3))
    io.save_torch(tmp_path / "e.pt", {"x": 1})
    io.mark_done(tmp_path / "job")
    with io.atomic_path(tmp_path / "f.npy") as tmp:  # the memmap path the query step uses
        np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(2,))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 7
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == mode, (p.name, oct(p.stat().st_mode))


def test_a_plain_open_agrees(tmp_path, umask) -> None:
    """The mode is what open() gives a new file under the same umask."""
    umask(0o022)
    with open(tmp_path / "plain", "w") as f:
        f.write("x")
    io.write_text(tmp_path / "ours", "x")
    assert stat.S_IMODE((tmp_path / "ours").stat().st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode)
