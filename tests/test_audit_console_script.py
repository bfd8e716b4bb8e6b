"""The installed ``bnmem`` console script finds the model's class the way the README says: run the audit from the
folder of the class's module (``mynet.py``), or keep the module beside the model file.

Through the script itself (not ``python -m bnmem``, which puts the working directory on the import path on its
own): PYTHONPATH holds only bnmem's source, never the folder of ``mynet.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bnmem

SCRIPT = Path(sys.executable).with_name("bnmem")
MYNET = '''
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))

    def forward(self, x):
        return self.body(x)
'''


@pytest.fixture
def saved_model(tmp_path, monkeypatch):
    """``mynet.py`` and ``model.pt`` (a pickled mynet.Net) in ``tmp_path/project``; mynet forgotten afterwards."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "mynet.py").write_text(MYNET)
    monkeypatch.syspath_prepend(str(project))
    import mynet

    torch.manual_seed(0)
    torch.save(mynet.Net().eval(), project / "model.pt")
    monkeypatch.delitem(sys.modules, "mynet")
    return project


def run_script(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(bnmem.__file__).parents[1]), "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(SCRIPT), "audit", "--quiet", *args, "--max-examples", "20", "--top-k", "2"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not SCRIPT.is_file(), reason="the bnmem console script is not installed beside this Python")
def test_the_console_script_finds_the_models_module(saved_model, tmp_path):
    # from the module's folder, as the README says
    proc = run_script(saved_model, "--model", "model.pt", "--out", "a")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((saved_model / "a" / "audit.json").read_text())["model"]["class"] == "Net"
    # from elsewhere: the model file's folder holds the module
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_script(elsewhere, "--model", str(saved_model / "model.pt"), "--out", "b")
    assert proc.returncode == 0, proc.stderr
    assert (elsewhere / "b" / "audit.json").is_file()
    # neither: one line that says where the module must be
    (saved_model / "model.pt").rename(elsewhere / "model.pt")
    (saved_model / "mynet.py").rename(saved_model / "other.py")
    proc = run_script(elsewhere, "--model", "model.pt", "--out", "c")
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "No module named 'mynet'" in lines[0], proc.stderr
