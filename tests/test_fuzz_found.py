"""Regression tests of what the fuzzer (tests/test_fuzz.py) found: each was a traceback or a hang before its fix."""

from __future__ import annotations

import json

import pytest
import torch

from fuzz_support import error_line, invoke


def test_an_unknown_device_is_one_line_naming_the_flag(tmp_path):
    r = invoke(["memorize", "--device", "tpu", "--out", tmp_path / "o"])
    assert r.code == 2 and "--device" in error_line(r.err) and "tpu" in r.err
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", [["audit", "--model", "nowhere.pt"], ["memorize"], ["lira"]])
def test_a_missing_cuda_device_is_one_line_before_anything_is_read_or_written(tmp_path, command):
    r = invoke([*command, "--device", "cuda:0", "--out", tmp_path / "o"])
    line = error_line(r.err)
    assert r.code == 2 and "--device cuda:0" in line and "no cuda device" in line and "--device cpu" in line
    assert not (tmp_path / "o").exists()


def test_check_device_here_counts_devices(monkeypatch):
    from bnmem.train.device import check_device_here
    from bnmem.errors import BnmemError

    check_device_here("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_device_here("cuda")
    check_device_here("cuda:1")
    with pytest.raises(BnmemError, match="has 2 cuda device"):
        check_device_here("cuda:2")


def test_defenses_one_seed_rule_names_its_field(tmp_path):
    r = invoke(["defenses", "--seeds", "0,1", "--out", tmp_path / "o"])
    assert r.code == 2 and "seeds" in error_line(r.err).split("lens")[0]


def test_a_binary_mislabeled_list_is_one_line(tmp_path):
    from bnmem.data.image_folder import read_mislabeled
    from bnmem.errors import BnmemError

    listing = tmp_path / "list.csv"
    listing.write_bytes(b"\xff\xfe\x00bin")
    with pytest.raises(BnmemError, match="not a text CSV of file names"):
        read_mislabeled(listing, tmp_path, [], [])
    # UTF-8 with a spreadsheet's byte-order mark, non-ASCII names: read whatever the locale
    (tmp_path / "c0").mkdir()
    image = tmp_path / "c0" / "图像 1.png"
    image.write_bytes(b"")
    listing.write_text("\ufefffile\nc0/图像 1.png\n", encoding="utf-8")
    mask, in_test = read_mislabeled(listing, tmp_path, [(image, 0)], [])
    assert mask.tolist() == [True] and in_test == 0


def test_an_absurd_seed_count_is_one_line_not_a_memory_error(tmp_path):
    r = invoke(["memorize", "--n-seeds", "2000000000", "--out", tmp_path / "o"])
    assert r.code == 2 and "--n-seeds 2000000000" in error_line(r.err)


def test_absurd_replicates_are_one_line_not_an_hour_of_planning(tmp_path):
    import yaml

    from bnmem.study.schema import MAX_REPLICATES

    study = tmp_path / "s.yaml"
    for where in ("grid", "lens"):
        doc = {"name": "big", "grid": {"replicates": 1}, "lenses": {"memorize": {}}}
        if where == "grid":
            doc["grid"]["replicates"] = 10**6
        else:
            doc["lenses"]["memorize"]["replicates"] = 10**6
        study.write_text(yaml.safe_dump(doc))
        r = invoke(["design", study])
        assert r.code == 2 and "replicates" in error_line(r.err) and str(MAX_REPLICATES) in r.err


def test_a_cell_file_that_is_not_a_json_object_is_a_noted_problem_not_a_crash(tmp_path):
    from bnmem.report.rundata import _read_json

    problems: list[str] = []
    (tmp_path / "config.json").write_text("[1, 2, 3]")
    assert _read_json(tmp_path / "config.json", problems) is None
    assert "not a JSON object (a list)" in problems[0]
    (tmp_path / "config.json").write_bytes(b"\xff\x00")
    assert _read_json(tmp_path / "config.json", problems) is None and "unreadable" in problems[1]
    (tmp_path / "config.json").write_text(json.dumps({"a": 1}))
    assert _read_json(tmp_path / "config.json", problems) == {"a": 1} and len(problems) == 2


def test_a_missing_data_folder_is_named_before_any_channel_advice(tmp_path):
    """Found by the one-bad-flag family: a mistyped --data-folder got the channel advice (--channels 1) first."""
    from bnmem.data.sources import dataset_shape
    from bnmem.models import build_model

    shape, classes = dataset_shape("digits")
    torch.save(build_model("lenet", shape, classes, "batch"), tmp_path / "model.pt")  # 1 input channel
    r = invoke(["audit", "--model", tmp_path / "model.pt", "--data-folder", tmp_path / "nowhere",
                "--out", tmp_path / "o"])
    assert r.code == 2 and "--data-folder" in error_line(r.err) and "nowhere" in r.err and "--channels" not in r.err
