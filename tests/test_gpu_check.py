"""benchmarks/gpu_check.py's CPU fallback runs here, so the GPU check script cannot rot without a GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
def test_gpu_check_cpu_fallback(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("vmap ensemble vs plain trainer") == 4 and "FAIL" not in out
    assert "(b) CIFAR-shaped study (every lens" in out and "(c) ResNet-20" in out and "all checks passed" in out
    assert "(d) CIFAR-10 LiRA cell" in out and "8 jobs in" in out
    assert (tmp_path / "study" / "report.html").is_file()
