"""A practitioner's own images in a class-per-folder tree (the torchvision ``ImageFolder`` layout).

Two layouts::

    PATH/train/<class>/*.png   PATH/test/<class>/*.png     (given split)
    PATH/<class>/*.png                                     (seeded, per-class split)

Images are decoded with Pillow, converted to 3 channels (RGB, as torchvision's
``ImageFolder`` does) or 1, resized to a square ``image_size`` when given,
scaled to [0, 1], then normalized per
channel with a given mean/std or the statistics of the training split. A
``transform`` (any Python callable ``PIL.Image -> (C, H, W) float tensor``)
replaces the decoding for anything else; normalization still follows unless
switched off. A CSV of known-mislabeled file names marks those training
examples as corrupted (``is_noisy``), so the audit can count them among the
largest gradient norms.
"""

from __future__ import annotations

import csv
import importlib
import importlib.util
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
Transform = Callable[[Any], Any]


class ImageFolderConfig(BaseModel):
    """Where the images are and how they become tensors."""

    # Like bnmem.config.StrictModel (data does not import the config module): unknown keys are errors.
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    path: Path
    image_size: int | None = Field(None, ge=1, description="resize to this square size (None: keep; sizes must agree)")
    # 3 like torchvision's ImageFolder, whose default loader converts every image to RGB: a model trained
    # through it expects 3 channels even when the files are grayscale.
    channels: int = Field(3, description="1 (grayscale) or 3 (RGB, torchvision ImageFolder's default)")
    mean: list[float] | None = Field(None, description="per-channel mean (None: from the training split)")
    std: list[float] | None = Field(None, description="per-channel std (None: from the training split)")
    normalize: bool = Field(True, description="normalize per channel (given or computed mean/std)")
    test_fraction: float = Field(0.2, gt=0, lt=1, description="test share of each class, single-folder layout")
    seed: int = Field(0, description="seed of the single-folder split")
    transform: str | None = Field(None, description="'module:function' or 'file.py:function', image -> tensor")
    mislabeled: Path | None = Field(None, description="CSV of training file names known to be mislabeled")


def _files(class_dir: Path) -> list[Path]:
    return sorted(p for p in class_dir.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _classes(split_dir: Path) -> list[str]:
    return sorted(d.name for d in split_dir.iterdir() if d.is_dir() and not d.name.startswith("."))


def scan(cfg: ImageFolderConfig) -> tuple[list[str], list[tuple[Path, int]], list[tuple[Path, int]]]:
    """Class names and the (file, label) lists of the training and test splits.

    Raises:
        BnmemError: a missing folder, no class folders, no images, or test classes the training split lacks.
    """
    root = cfg.path
    if not root.is_dir():
        raise BnmemError(f"--data-folder {root} is not a directory")
    if (root / "train").is_dir():
        classes = _classes(root / "train")
        if not (root / "test").is_dir():
            raise BnmemError(f"{root} has train/ but no test/ folder (or drop train/ for a seeded split)")
        extra = sorted(set(_classes(root / "test")) - set(classes))
        if extra:
            raise BnmemError(f"{root}/test has classes the training split lacks: {', '.join(extra[:5])}")
        train = [(f, i) for i, c in enumerate(classes) for f in _files(root / "train" / c)]
        test = [(f, i) for i, c in enumerate(classes) for f in _files(root / "test" / c)]
    else:
        classes = _classes(root)
        rng = np.random.default_rng([cfg.seed, 0xF01D])
        train, test = [], []
        for i, c in enumerate(classes):
            files = _files(root / c)
            order = rng.permutation(len(files))
            n_test = int(round(cfg.test_fraction * len(files))) if len(files) > 1 else 0
            test += [(files[j], i) for j in sorted(order[:n_test])]
            train += [(files[j], i) for j in sorted(order[n_test:])]
    if len(classes) < 2:
        raise BnmemError(f"{root} must hold at least two class folders (ImageFolder layout), found {len(classes)}")
    if not train:
        raise BnmemError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in the class folders of {root}")
    # An empty class folder would still count as a class (and a label the model was never trained on), so the
    # error would later blame the model's outputs; torchvision's ImageFolder refuses such a folder too.
    labels = {label for _, label in train}
    empty = [c for i, c in enumerate(classes) if i not in labels]
    if empty:
        where = root / "train" if (root / "train").is_dir() else root
        names = ", ".join(str(where / c) for c in empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        raise BnmemError(f"class folder {names} holds no training images ({', '.join(IMAGE_SUFFIXES)}); add its "
                         "images or remove the folder (torchvision's ImageFolder refuses an empty class folder too)")
    return classes, train, test


def load_transform(spec: str) -> Transform:
    """The callable named by ``'package.module:function'`` or ``'path/to/file.py:function'``.

    Raises:
        BnmemError: a malformed spec, a module that cannot be imported, or a missing name.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise BnmemError(f"--transform must be 'module:function' or 'file.py:function', got {spec!r}")
    try:
        if module_name.endswith(".py"):
            loc = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
            if loc is None or not Path(module_name).is_file():
                raise BnmemError(f"--transform: no file {module_name}")
            module = importlib.util.module_from_spec(loc)
            loc.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise BnmemError(f"--transform: cannot import {module_name} ({e})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise BnmemError(f"--transform: {module_name} has no callable {attr!r}")
    return fn


def _decode(path: Path, mode: str, size: int | None) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert(mode)
        if size is not None and im.size != (size, size):
            im = im.resize((size, size), Image.Resampling.BILINEAR)
        arr = np.asarray(im, dtype=np.float32) / 255.0
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def _mode(cfg: ImageFolderConfig) -> str:
    if cfg.channels not in (1, 3):
        raise BnmemError(f"--channels must be 1 or 3, got {cfg.channels}")
    return "L" if cfg.channels == 1 else "RGB"


def _stack(files: list[tuple[Path, int]], read: Callable[[Path], Any], root: Path) -> torch.Tensor:
    images = []
    for f, _ in files:
        try:
            images.append(torch.as_tensor(np.asarray(read(f), dtype=np.float32)))
        except OSError as e:
            raise BnmemError(f"cannot read image {f.relative_to(root)}: {e}") from None
    shapes = {tuple(t.shape) for t in images}
    if len(shapes) > 1:
        raise BnmemError(f"images in {root} have different shapes {sorted(shapes)[:3]}; give --image-size")
    if images and images[0].ndim != 3:
        raise BnmemError(f"images must become (C, H, W) tensors, got shape {tuple(images[0].shape)}")
    return torch.stack(images) if images else torch.empty(0)


def read_mislabeled(csv_path: Path, root: Path, train: list[tuple[Path, int]],
                    test: list[tuple[Path, int]]) -> tuple[np.ndarray, int]:
    """Training mask of the files a CSV names (first column; an optional header ``file``/``filename``/``path``).

    A name matches a file's path relative to the data folder, relative to its
    split folder, or its bare file name when that is unique.

    Returns:
        The (n_train,) bool mask and how many listed files are in the test split.

    Raises:
        BnmemError: a missing or binary CSV, or names that match no image.
    """
    if not csv_path.is_file():
        raise BnmemError(f"--mislabeled {csv_path} does not exist")
    try:
        # UTF-8 whatever the locale (file names are not ASCII everywhere); -sig: a spreadsheet's byte-order mark
        with open(csv_path, newline="", encoding="utf-8-sig") as f:
            names = [row[0].strip() for row in csv.reader(f) if row and row[0].strip()]
    except (UnicodeDecodeError, csv.Error) as e:
        raise BnmemError(f"--mislabeled {csv_path} is not a text CSV of file names (UTF-8): "
                         f"{type(e).__name__}") from None
    if names and names[0].lower() in ("file", "filename", "path", "file_name", "name"):
        names = names[1:]
    index: dict[str, tuple[str, int]] = {}
    basenames: dict[str, list[tuple[str, int]]] = {}
    for split, files in (("train", train), ("test", test)):
        for i, (p, _) in enumerate(files):
            rel = p.relative_to(root).as_posix()
            index[rel] = (split, i)
            parts = rel.split("/")
            if parts[0] in ("train", "test"):
                index.setdefault("/".join(parts[1:]), (split, i))
            basenames.setdefault(p.name, []).append((split, i))
    mask = np.zeros(len(train), dtype=bool)
    unknown, ambiguous, in_test = [], [], 0
    for name in names:
        key = name.replace("\\", "/").lstrip("./")
        hit = index.get(key) or (basenames[key][0] if len(basenames.get(key, [])) == 1 else None)
        if hit is None and len(basenames.get(key, [])) > 1:
            where = [(train if split == "train" else test)[i][0].relative_to(root).as_posix()
                     for split, i in basenames[key]]
            ambiguous.append(f"{name} matches {len(where)} files: {', '.join(where[:3])}")
        elif hit is None:
            unknown.append(name)
        elif hit[0] == "train":
            mask[hit[1]] = True
        else:
            in_test += 1
    if ambiguous:
        raise BnmemError(f"--mislabeled {csv_path}: {len(ambiguous)} bare file names match more than one image "
                         f"({'; '.join(ambiguous[:2])}); give the path relative to the folder instead")
    if unknown:
        raise BnmemError(f"--mislabeled {csv_path}: {len(unknown)} names match no image in {root} "
                         f"(e.g. {', '.join(unknown[:3])}); give paths relative to the folder")
    return mask, in_test


def image_reader(cfg: ImageFolderConfig, transform: Transform | None = None) -> Callable[[Path], Any]:
    """How one image file becomes a (C, H, W) array: ``transform`` (or ``cfg.transform``), else decoded as
    ``cfg`` says (channels, size), scaled to [0, 1]; not normalized."""
    if transform is None and cfg.transform:
        transform = load_transform(cfg.transform)
    if transform is not None:
        from PIL import Image

        def read(p: Path) -> Any:
            with Image.open(p) as im:
                return transform(im)
        return read
    mode = _mode(cfg)
    return lambda p: _decode(p, mode, cfg.image_size)


def read_like_training(cfg: ImageFolderConfig, files: list[tuple[Path, int]], root: Path,
                       mean: np.ndarray, std: np.ndarray) -> torch.Tensor:
    """Images read exactly as the training split of ``cfg`` was (decoding or transform, then its per-channel
    ``mean`` / ``std``, recorded in the training dataset): e.g. a held-out set queried on the same model.

    Raises:
        BnmemError: an unreadable image or images of different shapes, in one line.
    """
    x = _stack(files, image_reader(cfg), root)
    if x.numel() and (cfg.normalize or cfg.mean is not None):
        shape = (1, x.shape[1], 1, 1)
        x = (x - torch.tensor(mean, dtype=torch.float32).view(shape)) / torch.tensor(std, dtype=torch.float32).view(shape)
    return x.contiguous()


def load_image_folder(cfg: ImageFolderConfig, transform: Transform | None = None) -> OutlierDataset:
    """Read an ImageFolder tree into an :class:`OutlierDataset` (normalized float32 NCHW).

    Args:
        cfg: the folder and its preprocessing.
        transform: a callable image -> (C, H, W) tensor replacing the default
            decoding (overrides ``cfg.transform``).

    Returns:
        The dataset; ``is_noisy`` marks the files of ``cfg.mislabeled`` (original labels unknown: -1).

    Raises:
        BnmemError: layout, image, transform or CSV problems, in one line.
    """
    root = cfg.path
    classes, train, test = scan(cfg)
    read = image_reader(cfg, transform)
    x_train, x_test = _stack(train, read, root), _stack(test, read, root)
    if x_test.numel() and x_test.shape[1:] != x_train.shape[1:]:
        raise BnmemError(f"test images are {tuple(x_test.shape[1:])}, training images {tuple(x_train.shape[1:])}")
    c = x_train.shape[1]
    if cfg.mean is not None or cfg.std is not None:
        if cfg.mean is None or cfg.std is None or len(cfg.mean) != c or len(cfg.std) != c:
            raise BnmemError(f"--mean and --std must both give {c} values (one per channel)")
        if min(cfg.std) <= 0:
            raise BnmemError("--std values must be positive")
        mean, std = np.asarray(cfg.mean, float), np.asarray(cfg.std, float)
        source = "given"
    elif cfg.normalize:
        mean = x_train.double().mean(dim=(0, 2, 3)).numpy()
        std = x_train.double().std(dim=(0, 2, 3)).clamp_min(1e-6).numpy()
        source = "training split"
    else:
        mean, std, source = np.zeros(c), np.ones(c), "none"
    if cfg.normalize or source == "given":
        shape = (1, c, 1, 1)
        m, s = torch.tensor(mean, dtype=torch.float32).view(shape), torch.tensor(std, dtype=torch.float32).view(shape)
        x_train, x_test = (x_train - m) / s, ((x_test - m) / s if x_test.numel() else x_test)
    if not x_test.numel():
        x_test = x_train[:0]
    y_train = torch.tensor([label for _, label in train], dtype=torch.long)
    y_test = torch.tensor([label for _, label in test], dtype=torch.long)
    noisy, in_test = (read_mislabeled(cfg.mislabeled, root, train, test) if cfg.mislabeled is not None
                      else (np.zeros(len(train), dtype=bool), 0))
    return OutlierDataset(
        name=f"image folder {root.name}", x_train=x_train.contiguous(), y_train=y_train,
        y_train_orig=np.where(noisy, -1, y_train.numpy()), is_noisy=noisy, is_ood=np.zeros(len(train), dtype=bool),
        x_test=x_test.contiguous(), y_test=y_test, num_classes=len(classes),
        input_shape=tuple(int(v) for v in x_train.shape[1:]), mean=mean, std=std, seed=cfg.seed,
        info={"source": str(root), "classes": classes, "layout": "train/test" if (root / "train").is_dir()
              else f"one folder, seeded split (test fraction {cfg.test_fraction}, seed {cfg.seed})",
              "normalization": source, "transform": cfg.transform or ("python callable" if transform else None),
              "masks_known": cfg.mislabeled is not None, "mislabeled_in_test": in_test,
              "files": [p.relative_to(root).as_posix() for p, _ in train]},
    )
