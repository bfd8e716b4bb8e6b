"""`bnmem audit --data-folder`: a practitioner's own PNG tree, written by the test, read and audited."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from bnmem.cli import main
from bnmem.data.image_folder import ImageFolderConfig, load_image_folder
from bnmem.errors import BnmemError
from bnmem.measure.gradnorms import per_sample_grad_norms

CLASSES = ("circle", "cross", "square")


def _image(cls: int, rng: np.random.Generator, size: int = 10) -> np.ndarray:
    """A 10x10 grayscale picture whose brightest region depends on the class, plus noise."""
    img = rng.integers(0, 60, (size, size)).astype(np.uint8)
    if cls == 0:
        img[3:7, 3:7] += 180
    elif cls == 1:
        img[size // 2, :] += 180
        img[:, size // 2] += 180
    else:
        img[:2, :] += 180
    return img


def write_tree(root, split: bool = True, per_class: int = 10, rgb: bool = False):
    rng = np.random.default_rng(0)
    names = []
    for s, n in ((("train", per_class), ("test", 4)) if split else (("", per_class + 4),)):
        for c, name in enumerate(CLASSES):
            d = root / s / name if s else root / name
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                arr = _image(c, rng)
                im = Image.fromarray(np.stack([arr] * 3, -1) if rgb else arr, mode="RGB" if rgb else "L")
                im.save(d / f"{name}_{i:02d}.png")
                names.append((d / f"{name}_{i:02d}.png").relative_to(root).as_posix())
    return names


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("pictures")
    write_tree(root)
    (root / "mislabeled.csv").write_text("file\ntrain/circle/circle_03.png\ncross_07.png\n")
    return root


def test_reads_layout_labels_normalization_and_mislabeled(tree):
    ds = load_image_folder(ImageFolderConfig(path=tree, channels=1, mislabeled=tree / "mislabeled.csv"))
    assert ds.info["classes"] == list(CLASSES) and ds.num_classes == 3
    assert ds.x_train.shape == (30, 1, 10, 10) and ds.x_test.shape == (12, 1, 10, 10)
    assert ds.y_train.tolist() == [0] * 10 + [1] * 10 + [2] * 10
    # normalized with the training split's own statistics
    assert abs(float(ds.x_train.mean())) < 1e-5 and abs(float(ds.x_train.std()) - 1) < 0.02
    raw = np.asarray(Image.open(tree / "train" / "cross" / "cross_00.png"), dtype=np.float32) / 255
    np.testing.assert_allclose(ds.x_train[10, 0].numpy(), (raw - ds.mean[0]) / ds.std[0], rtol=1e-5, atol=1e-5)
    files = ds.info["files"]
    assert [files[i] for i in np.flatnonzero(ds.is_noisy)] == ["train/circle/circle_03.png",
                                                               "train/cross/cross_07.png"]
    assert ds.info["masks_known"] and (ds.y_train_orig[ds.is_noisy] == -1).all()


def test_single_folder_seeded_split_resize_rgb_and_given_stats(tmp_path):
    write_tree(tmp_path, split=False, rgb=True)
    cfg = ImageFolderConfig(path=tmp_path, image_size=6, mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25], seed=3)
    a, b = load_image_folder(cfg), load_image_folder(cfg)
    assert a.x_train.shape == (33, 3, 6, 6) and a.x_test.shape == (9, 3, 6, 6)  # 14 per class, 3 to test
    assert torch.equal(a.x_train, b.x_train) and a.info["normalization"] == "given"
    c = load_image_folder(cfg.model_copy(update={"seed": 4}))
    assert not torch.equal(a.y_test, c.y_test) or not torch.equal(a.x_test, c.x_test)
    gray = load_image_folder(cfg.model_copy(update={"channels": 1, "mean": None, "std": None, "normalize": False}))
    assert gray.x_train.shape[1] == 1 and float(gray.x_train.max()) <= 1.0


def test_transform_hook_from_a_file(tree, tmp_path):
    hook = tmp_path / "prep.py"
    hook.write_text("import numpy as np, torch\n"
                    "def crop(im):\n"
                    "    return torch.tensor(np.asarray(im, dtype=np.float32)[None, 2:8, 2:8] / 255.0)\n")
    ds = load_image_folder(ImageFolderConfig(path=tree, transform=f"{hook}:crop", normalize=False))
    raw = np.asarray(Image.open(tree / "train" / "circle" / "circle_00.png"), dtype=np.float32)[2:8, 2:8] / 255
    np.testing.assert_allclose(ds.x_train[0, 0].numpy(), raw, rtol=1e-6)


@pytest.mark.parametrize("setup,match", [
    (lambda r: None, "is not a directory"),
    (lambda r: (r / "train" / "a").mkdir(parents=True), "no test/ folder"),
    (lambda r: [(r / c).mkdir(parents=True) for c in ("a", "b")], "no images"),
])
def test_layout_errors_are_one_line(tmp_path, setup, match):
    root = tmp_path / "data"
    setup(root)
    with pytest.raises(BnmemError, match=match):
        load_image_folder(ImageFolderConfig(path=root))


@pytest.mark.parametrize("split", [True, False])
def test_an_empty_class_folder_is_one_line_naming_it(tmp_path, capsys, split):
    """An empty class folder used to count as a class: the error then blamed the model's number of outputs."""
    root = tmp_path / "data"
    write_tree(root, split=split)
    empty = (root / "train" if split else root) / "dog"
    empty.mkdir()
    with pytest.raises(BnmemError, match=f"class folder {empty} holds no training images"):
        load_image_folder(ImageFolderConfig(path=root))
    torch.save(nn.Sequential(nn.Flatten(), nn.Linear(300, 4)), tmp_path / "m.pt")
    code = main(["audit", "--quiet", "--model", str(tmp_path / "m.pt"), "--data-folder", str(root),
                 "--out", str(tmp_path / "o")])
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and str(empty) in lines[0] and "outputs" not in lines[0], lines
    assert not (tmp_path / "o").exists()


def test_unknown_mislabeled_names_are_refused(tree, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("train/circle/nope.png\n")
    with pytest.raises(BnmemError, match="1 names match no image"):
        load_image_folder(ImageFolderConfig(path=tree, mislabeled=bad))


def test_a_bare_name_in_both_splits_says_it_matches_two(tree, tmp_path):
    """circle_01.png is in train/circle and test/circle: the error names both, not 'match no image'."""
    bad = tmp_path / "two.csv"
    bad.write_text("circle_01.png\n")
    with pytest.raises(BnmemError) as err:
        load_image_folder(ImageFolderConfig(path=tree, mislabeled=bad))
    text = str(err.value)
    assert "circle_01.png matches 2 files: train/circle/circle_01.png, test/circle/circle_01.png" in text, text
    assert "match no image" not in text and "relative to the folder" in text


def test_cli_audits_a_model_on_the_folder(tree, tmp_path, capsys):
    ds = load_image_folder(ImageFolderConfig(path=tree, channels=1))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(inplace=True),
                          nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(24, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(30):  # fit the folder's training split, mislabeled files included
        opt.zero_grad()
        nn.functional.cross_entropy(model(ds.x_train), ds.y_train).backward()
        opt.step()
    model.eval()
    torch.save(model, tmp_path / "model.pt")
    out = tmp_path / "audit"
    code = main(["audit", "--quiet", "--model", str(tmp_path / "model.pt"), "--data-folder", str(tree),
                 "--channels", "1",
                 "--mislabeled", str(tree / "mislabeled.csv"), "--top-k", "5", "--max-memory", "1GB",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    res = json.loads((out / "audit.json").read_text())
    assert res["data"]["n_train"] == 30 and res["data"]["n_noisy"] == 2 and res["data"]["classes"] == list(CLASSES)
    gn = res["gradient_norms"]
    assert gn["method"] == "ghost" and gn["max_memory"] == "1.0 GB"
    assert all(r["file"].startswith("train/") for r in gn["top_k"])
    oracle = per_sample_grad_norms(model, ds.x_train, ds.y_train, method="loop").norms
    np.testing.assert_allclose(np.load(out / "gradient_norms.npy"), oracle, rtol=1e-9)
    assert "`train/" in (out / "audit.md").read_text()


def test_cli_budget_too_small_is_one_error_line(tree, tmp_path, capsys):
    torch.save(nn.Sequential(nn.Flatten(), nn.Linear(300, 3)), tmp_path / "m.pt")
    code = main(["audit", "--quiet", "--model", str(tmp_path / "m.pt"), "--data-folder", str(tree),
                 "--max-memory", "2KB", "--out", str(tmp_path / "o")])
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "--max-memory 2.0 KB cannot hold" in lines[0], lines


@pytest.mark.parametrize("args,match", [
    (["--label-noise", "0.1"], "with --data-folder, name the known mislabeled files"),
    (["--mislabeled", "x.csv", "--no-folder"], "--mislabeled only apply with --data-folder"),
])
def test_cli_flag_combinations_are_refused(tree, tmp_path, capsys, args, match):
    torch.save(nn.Sequential(nn.Flatten(), nn.Linear(100, 3)), tmp_path / "m.pt")
    folder = [] if "--no-folder" in args else ["--data-folder", str(tree)]
    code = main(["audit", "--quiet", "--model", str(tmp_path / "m.pt"), *folder,
                 *[a for a in args if a != "--no-folder"], "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and match in err and not (tmp_path / "o").exists()
