"""Fuzzer, family 3: audit inputs (model files, image folders, mislabeled/outlier lists); see tests/test_fuzz.py."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import (FINISHED, TINY_STUDY, assets, check_outcome, engine_stubs, error_line, examples,
                          files_under, in_directory, invoke, run_case, stubs)

def _write_image(path: Path, kind: str) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(len(path.name))
    rgb = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
    if kind == "zero-byte":
        path.write_bytes(b"")
    elif kind == "corrupt":
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 5)
    elif kind == "text":
        path.write_text("not an image")
    elif kind == "cmyk":
        Image.fromarray(rgb, "RGB").convert("CMYK").save(path.with_suffix(".jpg"))
    elif kind == "16-bit":
        Image.fromarray(rng.integers(0, 65535, (8, 8), dtype=np.uint16)).save(path)
    elif kind == "palette":
        Image.fromarray(rgb, "RGB").convert("P").save(path)
    elif kind == "rgba":
        Image.fromarray(rng.integers(0, 255, (8, 8, 4), dtype=np.uint8), "RGBA").save(path)
    elif kind == "gray":
        Image.fromarray(rgb[..., 0], "L").save(path)
    elif kind == "big":
        Image.fromarray(rng.integers(0, 255, (40, 24, 3), dtype=np.uint8), "RGB").save(path)
    elif kind == "1-bit":
        Image.fromarray(rgb[..., 0] > 127).save(path)


IMAGE_DAMAGE = ["zero-byte", "corrupt", "text", "cmyk", "16-bit", "palette", "rgba", "gray", "big", "1-bit"]
FOLDER_DAMAGE = ["empty-class", "one-class", "non-ascii", "image", "image", "image", "drop-class-images",
                 "nested", "hidden-file", "train-test-split", "train-only", "image-class-2"]
LIST_DAMAGE = ["unknown", "duplicate", "empty", "header-only", "binary", "absolute", "no-header", "test-file",
               "non-ascii", "ok"]


@st.composite
def audit_case(draw):
    return {
        "model": draw(st.sampled_from(["ok"] * 6 + ["state_dict", "dict", "tensor", "junk", "empty", "missing",
                                                    "wrong-outputs", "one-output", "wrong-channels", "directory"])),
        # the train/ and test/ layouts last: the other damages name files of the flat layout
        "folder": sorted(draw(st.lists(st.sampled_from(FOLDER_DAMAGE), max_size=2, unique=True)),
                         key=lambda d: d.startswith("train")),
        "image": draw(st.sampled_from(IMAGE_DAMAGE)),
        "list": draw(st.sampled_from([None, None, *LIST_DAMAGE])),
        "list_flag": draw(st.sampled_from(["--mislabeled", "--outliers"])),
        "flags": draw(st.lists(st.sampled_from([
            ["--image-size", "8"], ["--image-size", "0"], ["--image-size", "-3"], ["--image-size", "5"],
            ["--channels", "1"], ["--channels", "3"], ["--channels", "2"], ["--mean", "0.5,0.5,0.5"],
            ["--mean", "0.5"], ["--std", "0,0,0"], ["--test-fraction", "0.5"], ["--test-fraction", "1"],
            ["--test-fraction", "0"], ["--no-normalize"], ["--top-k", "0"], ["--top-k", "-1"],
            ["--max-examples", "0"], ["--max-examples", "1"], ["--shadow-models", "1"], ["--shadow-models", "4"],
            ["--transform", "nowhere.py:f"], ["--label-noise", "0.1"], ["--max-memory", "1KB"]]), max_size=2)),
    }


def build_audit_inputs(case: dict, assets, tmp: Path) -> list[str]:
    """Copy the good folder and model into ``tmp``, damage them as ``case`` says; the audit's argv."""
    import torch
    from torch import nn

    folder = tmp / "pictures"
    shutil.copytree(assets["pictures"], folder)
    for damage in case["folder"]:
        if damage == "empty-class":
            (folder / "c_empty").mkdir(exist_ok=True)
        elif damage == "one-class":
            for c in ("c1", "c2"):
                shutil.rmtree(folder / c, ignore_errors=True)
        elif damage == "non-ascii":
            if (folder / "c1").exists():
                (folder / "c1").rename(folder / "клас-ü")
            if (folder / "c0" / "img1.png").exists():
                (folder / "c0" / "img1.png").rename(folder / "c0" / "图像 1.png")
        elif damage == "image":
            _write_image(folder / "c0" / "img0.png", case["image"])
        elif damage == "image-class-2" and (folder / "c2").exists():
            _write_image(folder / "c2" / "img5.png", case["image"])
        elif damage == "drop-class-images":
            for p in (folder / "c2").glob("*") if (folder / "c2").exists() else []:
                p.unlink()
        elif damage == "nested":
            (folder / "c0" / "sub").mkdir(exist_ok=True)
            shutil.copy(assets["pictures"] / "c0" / "img2.png", folder / "c0" / "sub" / "x.png")
        elif damage == "hidden-file":
            (folder / "c0" / ".DS_Store").write_bytes(b"\x00\x01")
        elif damage in ("train-test-split", "train-only") and not (folder / "train").exists():
            classes = [p for p in folder.iterdir() if p.is_dir()]
            (folder / "train").mkdir()
            for c in classes:
                c.rename(folder / "train" / c.name)
            if damage == "train-test-split":
                shutil.copytree(folder / "train", folder / "test")
    model = tmp / "model.pt"
    good = torch.load(assets["folder_model"], weights_only=False)
    kind = case["model"]
    if kind == "ok":
        shutil.copy(assets["folder_model"], model)
    elif kind == "state_dict":
        torch.save(good.state_dict(), model)
    elif kind == "dict":
        torch.save({"model": "not one", "epoch": 3}, model)
    elif kind == "tensor":
        torch.save(torch.zeros(3), model)
    elif kind == "junk":
        model.write_bytes(b"\x80\x04junk" * 9)
    elif kind == "empty":
        model.write_bytes(b"")
    elif kind == "directory":
        model.mkdir()
    elif kind == "wrong-outputs":
        torch.save(nn.Sequential(*list(good)[:-1], nn.Linear(4 * 8 * 8, 7)), model)
    elif kind == "one-output":
        torch.save(nn.Sequential(*list(good)[:-1], nn.Linear(4 * 8 * 8, 1)), model)
    elif kind == "wrong-channels":
        torch.save(nn.Sequential(nn.Conv2d(5, 4, 3, padding=1), *list(good)[1:]), model)
    argv = ["audit", "--model", model, "--data-folder", folder, "--out", tmp / "out", "--quiet", "--max-examples",
            "12", "--top-k", "3"]
    if case["list"] is not None:
        listing = tmp / "list.csv"
        text = {"unknown": "file\nc0/nope.png\n", "duplicate": "file\nc0/img2.png\nc0/img2.png\n", "empty": "",
                "header-only": "file\n", "absolute": f"file\n{folder / 'c0' / 'img2.png'}\n",
                "no-header": "c0/img2.png\n", "test-file": "file\ntest/c0/img2.png\n",
                "non-ascii": "file\nc0/图像 1.png\n", "ok": "file\nc0/img3.png\n"}.get(case["list"])
        if text is None:
            listing.write_bytes(b"\xff\xfe\x00bin")
        else:
            listing.write_text(text, encoding="utf-8")
        argv += [case["list_flag"], listing]
    return argv + [x for flag in case["flags"] for x in flag]


@examples(150)
@given(case=audit_case())
def test_fuzz_audit_inputs(stubs, assets, case):
    with tempfile.TemporaryDirectory(prefix="bnmem-fuzz-") as tmp:
        argv = build_audit_inputs(case, assets, Path(tmp))
        run_case(argv, cwd=Path(tmp))


def test_fuzz_audit_rerun_after_fix(assets, tmp_path):
    """A state_dict fails in one line; the audit of the module it came from then runs to its end (no stubs)."""
    import torch

    case = {"model": "state_dict", "folder": [], "image": "gray", "list": "ok", "list_flag": "--mislabeled",
            "flags": []}
    argv = build_audit_inputs(case, assets, tmp_path)
    r = run_case(argv, cwd=tmp_path)
    assert r.code == 2 and "state_dict" in error_line(r.err)
    assert not any(Path(p).name in FINISHED for p in files_under(tmp_path / "out"))
    torch.save(torch.load(assets["folder_model"], weights_only=False), tmp_path / "model.pt")
    r = run_case(argv, cwd=tmp_path)
    assert r.code == 0, r.err
    assert (tmp_path / "out" / "audit.json").exists()
