"""benchmarks/gpu_check.py's CPU version (tiny sizes) runs here, so the GPU check script cannot rot without a GPU:
every engine's float64 step against one by one (a), the throughput table with its per-architecture verdicts (c),
and the LiRA cell of studies/cifar10-fast.yaml through ``bnmem run`` (d), with the JSON docs/numbers.json reads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
def test_gpu_check_cpu_version(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out_json = tmp_path / "check.json"
    assert mod.main(["--device", "cpu", "--out", str(tmp_path), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.count("engine vs one by one: one float64 step") == 5 and "FAIL" not in out
    for arch in ("resnet20", "fastnet"):
        for norm in ("batch", "none"):
            assert f"(c) {arch} {norm}: best " in out
    assert "(d) CIFAR-10-sized LiRA cell" in out and "accuracy not measured" in out and "all checks passed" in out
    record = json.loads(out_json.read_text())
    assert {r["method"] for r in record["throughput"]} == {"sequential", "vmap", "grouped"}
    assert all(r["images_per_s"] > 0 for r in record["throughput"])
    assert record["arch"] == "fastnet" and record["shadow_models_per_norm"] == 4 and not record["accuracy_measured"]
    # what benchmarks/docs_numbers.py --gpu-cell reads
    assert set(record["train_s_per_shadow_model_epoch"]) == {"batch", "none"} and record["cell_wall_s"] > 0


def test_gpu_check_throughput_stops_at_its_time_budget(capsys):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--device", "cpu", "--checks", "c", "--throughput-budget", "0"]) == 0
    out = capsys.readouterr().out
    assert out.count("skipped (the check's time budget") == len(mod._plan("cpu", False)) == 12
    assert "images/s" not in out and out.count("no verdict") == 4
