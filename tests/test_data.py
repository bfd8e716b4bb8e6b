"""Tests of bnmem.data: sources, corruption bookkeeping, normalization, and error messages.

MNIST/Fashion-MNIST/CIFAR tests run on tiny files written here in the real
on-disk formats (IDX, plain and gzipped; CIFAR pickles), so nothing is
downloaded.
"""

from __future__ import annotations

import gzip
import pickle
import struct
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from bnmem.config import DataConfig
from bnmem.data import (
    OutlierDataset,
    dataset_shape,
    default_data_root,
    heldout_classes,
    load_dataset,
    load_source,
    model_shape,
)
from bnmem.data import corruption as C
from bnmem.data.sources import read_idx
from bnmem.errors import BnmemError

# ---------------------------------------------------------------- writers of the real file formats


def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> Path:
    """Write ``array`` (uint8) in the IDX format: 0, 0, type 0x08, ndim, big-endian dims, data."""
    array = np.asarray(array, dtype=np.uint8)
    payload = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(payload))
    else:
        path.write_bytes(payload)
    return path


def make_idx_dataset(root: Path, folder: str, n_train: int, n_test: int, seed: int, gz: bool) -> dict:
    """Write a fake MNIST-layout dataset; returns the uint8 arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": np.arange(n_train, dtype=np.uint8) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": (np.arange(n_test, dtype=np.uint8) * 3) % 10,
    }
    for name, a in arrays.items():
        write_idx(root / folder / "raw" / name, a, gz=gz)
    return arrays


def write_cifar_pickle(path: Path, data: np.ndarray, labels, label_key: bytes = b"labels") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump({b"batch_label": b"fake", b"data": data, label_key: labels}, f, protocol=2)


def make_cifar10(root: Path, per_batch: int = 4, n_test: int = 6, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        n = n_test if name == "test_batch" else per_batch
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, n)]  # the real files hold a list
        write_cifar_pickle(root / "cifar-10-batches-py" / name, data, labels)
        out[name] = (data, labels)
    return out


def make_cifar100(root: Path, n_train: int = 30, n_test: int = 5, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, n in (("train", n_train), ("test", n_test)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 100, n)]
        write_cifar_pickle(root / "cifar-100-python" / name, data, labels, label_key=b"fine_labels")
        out[name] = (data, labels)
    return out


def assert_same(a: OutlierDataset, b: OutlierDataset) -> None:
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.y_test, b.y_test)
    for name in ("y_train_orig", "is_noisy", "is_ood", "mean", "std"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def raw_pixels(ds: OutlierDataset) -> np.ndarray:
    """Undo the normalization (to the [0,1] pixel scale)."""
    return ds.x_train.numpy() * ds.std[None, :, None, None] + ds.mean[None, :, None, None]


# ---------------------------------------------------------------- digits source


def test_digits_split_is_stratified_fixed_and_independent_of_seed():
    raw = load_source("digits")
    assert raw.x_train.shape == (898, 1, 8, 8) and raw.x_test.shape == (899, 1, 8, 8)
    assert raw.x_train.dtype == np.float32 and raw.y_train.dtype == np.int64
    assert 0.0 <= raw.x_train.min() and raw.x_train.max() <= 1.0
    # Stratified 50/50: every class is split evenly, up to one example.
    tr, te = np.bincount(raw.y_train, minlength=10), np.bincount(raw.y_test, minlength=10)
    assert np.all(np.abs(tr - te) <= 1)
    # Cached and read-only, so no caller can corrupt the next one's data.
    assert load_source("digits") is raw
    with pytest.raises(ValueError):
        raw.x_train[0, 0, 0, 0] = 1.0
    # The run seed changes the corruption, never the split.
    a = load_dataset(DataConfig(seed=0, label_noise=0.1))
    b = load_dataset(DataConfig(seed=5, label_noise=0.1))
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.y_test, b.y_test)
    np.testing.assert_array_equal(a.y_train_orig, raw.y_train)


def test_dataset_shape_and_default_root(monkeypatch, tmp_path):
    assert dataset_shape("digits") == ((1, 8, 8), 10)
    assert dataset_shape("fashion-mnist") == ((1, 28, 28), 10)
    assert dataset_shape("cifar100") == ((3, 32, 32), 100)
    with pytest.raises(BnmemError, match="unknown dataset 'svhn'"):
        dataset_shape("svhn")
    assert model_shape(DataConfig(ood_source="heldout-classes")) == ((1, 8, 8), 8)
    monkeypatch.setenv("BNMEM_DATA", str(tmp_path / "d"))
    assert default_data_root() == tmp_path / "d"
    monkeypatch.delenv("BNMEM_DATA")
    assert default_data_root() == Path("~/.cache/bnmem/data").expanduser()


# ---------------------------------------------------------------- label flips


def test_label_flip_bookkeeping():
    clean = load_dataset(DataConfig())
    ds = load_dataset(DataConfig(label_noise=0.2, seed=3))
    n = clean.n_train
    assert ds.n_train == n and ds.is_noisy.sum() == round(0.2 * n) and not ds.is_ood.any()
    y, y0 = ds.y_train.numpy(), ds.y_train_orig
    np.testing.assert_array_equal(y0, clean.y_train.numpy())  # original labels kept
    assert np.all(y[ds.is_noisy] != y0[ds.is_noisy])  # every flip changes the class
    np.testing.assert_array_equal(y[~ds.is_noisy], y0[~ds.is_noisy])  # nothing else changes
    assert torch.equal(ds.x_train, clean.x_train)  # flips touch labels only: same images, same stats
    assert_same(ds, load_dataset(DataConfig(label_noise=0.2, seed=3)))
    other = load_dataset(DataConfig(label_noise=0.2, seed=4))
    assert not np.array_equal(other.is_noisy, ds.is_noisy)


def test_flip_targets_are_uniform_over_the_other_classes():
    y = np.zeros(18000, dtype=np.int64)
    y_new, noisy = C.flip_labels(y, 0.5, 10, C.make_rng(0, C.STREAM_FLIP))
    assert noisy.sum() == 9000
    counts = np.bincount(y_new[noisy], minlength=10)
    assert counts[0] == 0
    # 1,000 expected per class; a 5-sigma band (sigma ~ 30) catches a biased draw.
    assert np.all(np.abs(counts[1:] - 1000) < 150)


# ---------------------------------------------------------------- OOD injection


def test_noise_ood_counts_masks_and_pixels():
    n_in = load_dataset(DataConfig()).n_train
    ds = load_dataset(DataConfig(ood=0.1, seed=1))
    n_ood = round(0.1 * n_in / 0.9)
    assert ds.is_ood.sum() == n_ood and ds.n_train == n_in + n_ood
    assert abs(ds.is_ood.mean() - 0.1) < 1 / ds.n_train
    assert ds.is_ood[n_in:].all() and not ds.is_ood[:n_in].any()  # appended at the end
    assert np.all(ds.y_train_orig[ds.is_ood] == -1) and np.all(ds.y_train_orig[~ds.is_ood] >= 0)
    y_ood = ds.y_train.numpy()[ds.is_ood]
    assert y_ood.min() >= 0 and y_ood.max() < 10 and len(np.unique(y_ood)) > 5
    pix = raw_pixels(ds)[ds.is_ood]
    assert pix.min() >= -1e-5 and pix.max() <= 1 + 1e-5  # clipped to [0,1]
    assert_same(ds, load_dataset(DataConfig(ood=0.1, seed=1)))


def test_label_noise_and_ood_combined():
    ds = load_dataset(DataConfig(label_noise=0.1, ood=0.05, seed=2))
    n_in = int((~ds.is_ood).sum())
    assert ds.is_noisy.sum() == round(0.1 * n_in)
    assert not (ds.is_noisy & ds.is_ood).any()  # disjoint masks
    assert ds.is_outlier.sum() == ds.is_noisy.sum() + ds.is_ood.sum()
    assert ds.summary()["n_ood"] == round(0.05 * n_in / 0.95)
    # Separate random streams: adding OOD does not move the label flips.
    only_flips = load_dataset(DataConfig(label_noise=0.1, seed=2))
    np.testing.assert_array_equal(only_flips.is_noisy, ds.is_noisy[:n_in])


def test_heldout_classes_ood():
    raw = load_source("digits")
    ds = load_dataset(DataConfig(ood=0.1, ood_source="heldout-classes", seed=0))
    assert ds.num_classes == 8 and ds.info["heldout_classes"] == [8, 9]
    assert ds.info["kept_classes"] == list(range(8))
    in_train = raw.y_train < 8
    n_in = int(in_train.sum())
    assert ds.is_ood.sum() == round(0.1 * n_in / 0.9)
    assert ds.y_train.max() < 8 and ds.y_test.max() < 8
    assert len(ds.y_test) == int((raw.y_test < 8).sum())
    # OOD images are training images of the held-out classes, none repeated.
    held = raw.x_train[~in_train].reshape(int((~in_train).sum()), -1)
    ood = raw_pixels(ds)[ds.is_ood].reshape(int(ds.is_ood.sum()), -1)
    dist = np.abs(ood[:, None, :] - held[None, :, :]).max(axis=2)
    match = dist.argmin(axis=1)
    assert np.all(dist.min(axis=1) < 1e-5) and len(np.unique(match)) == len(match)
    # A clean baseline of the same experiment predicts the same 8 classes.
    assert load_dataset(DataConfig(ood_source="heldout-classes")).num_classes == 8


def test_custom_heldout_classes_are_relabeled_in_order():
    ds = load_dataset(DataConfig(ood=0.05, ood_source="heldout-classes", heldout_classes=[0, 5]))
    assert ds.info["kept_classes"] == [1, 2, 3, 4, 6, 7, 8, 9]
    raw = load_source("digits")
    kept = ~np.isin(raw.y_train, [0, 5])
    expect = np.searchsorted([1, 2, 3, 4, 6, 7, 8, 9], raw.y_train[kept])
    np.testing.assert_array_equal(ds.y_train_orig[~ds.is_ood], expect)
    assert heldout_classes(DataConfig(dataset="cifar100", ood_source="heldout-classes")) == list(range(80, 100))


def test_normalization_uses_final_training_split():
    ds = load_dataset(DataConfig(ood=0.2, label_noise=0.1))
    x = ds.x_train
    assert x.dtype == torch.float32 and x.is_contiguous() and ds.y_train.dtype == torch.int64
    np.testing.assert_allclose(x.mean(dim=(0, 2, 3)).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(dim=(0, 2, 3), unbiased=False).numpy(), 1.0, atol=1e-5)
    # The statistics include the outliers: they differ from the clean split's.
    assert not np.allclose(ds.mean, load_dataset(DataConfig()).mean)
    # Test images use the training statistics.
    raw = load_source("digits")
    np.testing.assert_allclose(ds.x_test.numpy(), (raw.x_test - ds.mean[0]) / ds.std[0], atol=1e-5)


def test_train_size_subsamples_before_corruption():
    raw = load_source("digits")
    ds = load_dataset(DataConfig(train_size=100, label_noise=0.1, ood=0.2, seed=7))
    assert (~ds.is_ood).sum() == 100 and ds.is_noisy.sum() == 10 and ds.is_ood.sum() == 25
    assert len(ds.y_test) == len(raw.y_test)  # the test split is untouched
    # The kept examples are real training examples, in their original order.
    pix = raw_pixels(ds)[~ds.is_ood].reshape(100, -1)
    flat = raw.x_train.reshape(len(raw.x_train), -1)
    idx = [int(np.abs(flat - p).max(axis=1).argmin()) for p in pix]
    assert idx == sorted(idx)
    np.testing.assert_array_equal(ds.y_train_orig[~ds.is_ood], raw.y_train[idx])
    assert_same(ds, load_dataset(DataConfig(train_size=100, label_noise=0.1, ood=0.2, seed=7)))
    with pytest.raises(BnmemError, match=r"train_size 5000 is outside 1\.\.898"):
        load_dataset(DataConfig(train_size=5000))


# ---------------------------------------------------------------- MNIST / Fashion-MNIST on disk


@pytest.mark.parametrize("gz", [False, True])
def test_idx_loader(tmp_path, gz):
    arrays = make_idx_dataset(tmp_path, "MNIST", 20, 10, seed=0, gz=gz)
    raw = load_source("mnist", tmp_path)
    assert raw.x_train.shape == (20, 1, 28, 28) and raw.x_test.shape == (10, 1, 28, 28)
    np.testing.assert_allclose(raw.x_train[:, 0], arrays["train-images-idx3-ubyte"] / 255.0, atol=1e-7)
    np.testing.assert_array_equal(raw.y_test, arrays["t10k-labels-idx1-ubyte"])
    assert raw.y_train.dtype == np.int64


def test_fashion_mnist_ood_into_mnist(tmp_path):
    make_idx_dataset(tmp_path, "MNIST", 20, 10, seed=0, gz=False)
    fashion = make_idx_dataset(tmp_path, "FashionMNIST", 30, 5, seed=1, gz=True)
    ds = load_dataset(DataConfig(dataset="mnist", data_root=tmp_path, ood=0.2, ood_source="fashion-mnist"))
    assert ds.is_ood.sum() == 5 and ds.n_train == 25 and ds.input_shape == (1, 28, 28)
    # Every OOD image is a distinct Fashion-MNIST training image.
    pool = fashion["train-images-idx3-ubyte"].reshape(30, -1) / 255.0
    ood = raw_pixels(ds)[ds.is_ood].reshape(5, -1)
    dist = np.abs(ood[:, None] - pool[None]).max(axis=2)
    assert np.all(dist.min(axis=1) < 1e-5) and len(set(dist.argmin(axis=1))) == 5


def test_download_uses_torchvision_lazily(tmp_path, monkeypatch):
    calls = []

    class FakeMNIST:  # stands in for torchvision.datasets.MNIST: writes the raw files
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            make_idx_dataset(Path(root), "MNIST", 8, 4, seed=0, gz=True)

    fake_datasets = types.SimpleNamespace(MNIST=FakeMNIST)
    monkeypatch.setitem(sys.modules, "torchvision", types.SimpleNamespace(datasets=fake_datasets))
    monkeypatch.setitem(sys.modules, "torchvision.datasets", fake_datasets)
    raw = load_source("mnist", tmp_path / "new", download=True)
    assert len(raw.y_train) == 8 and calls == [(str(tmp_path / "new"), True, True), (str(tmp_path / "new"), False, True)]

    class Offline:
        def __init__(self, root, train, download):
            raise RuntimeError("Error downloading train-images-idx3-ubyte.gz\nmore detail")

    fake_datasets.FashionMNIST = Offline
    with pytest.raises(BnmemError, match=r"^downloading fashion-mnist into .* failed: Error downloading"):
        load_source("fashion-mnist", tmp_path, download=True)


# ---------------------------------------------------------------- CIFAR on disk


def test_cifar10_loader(tmp_path):
    written = make_cifar10(tmp_path)
    raw = load_source("cifar10", tmp_path)
    assert raw.x_train.shape == (20, 3, 32, 32) and raw.x_test.shape == (6, 3, 32, 32)
    data, labels = written["data_batch_2"]
    # Rows are 1024 red, then green, then blue pixel values, each row-major.
    np.testing.assert_allclose(raw.x_train[4:8], data.reshape(4, 3, 32, 32) / 255.0, atol=1e-7)
    np.testing.assert_array_equal(raw.y_train[4:8], labels)
    np.testing.assert_array_equal(raw.y_test, written["test_batch"][1])


def test_cifar100_loader_and_ood_into_cifar10(tmp_path):
    make_cifar10(tmp_path)
    written = make_cifar100(tmp_path)
    raw = load_source("cifar100", tmp_path)
    assert raw.num_classes == 100 and raw.x_train.shape == (30, 3, 32, 32)
    np.testing.assert_array_equal(raw.y_train, written["train"][1])
    ds = load_dataset(DataConfig(dataset="cifar10", data_root=tmp_path, ood=0.2, ood_source="cifar100"))
    assert ds.is_ood.sum() == 5 and ds.num_classes == 10 and ds.input_shape == (3, 32, 32)
    x = ds.x_train
    np.testing.assert_allclose(x.mean(dim=(0, 2, 3)).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(dim=(0, 2, 3), unbiased=False).numpy(), 1.0, atol=1e-5)
    assert ds.mean.shape == (3,) and ds.std.shape == (3,)


# ---------------------------------------------------------------- errors a user can cause


def test_missing_dataset_names_directory_and_flag(tmp_path):
    with pytest.raises(BnmemError) as e:
        load_source("mnist", tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"mnist not found in {tmp_path} ")
    assert str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte") + "[.gz]" in msg
    assert "--download" in msg and "--data-root" in msg
    with pytest.raises(BnmemError, match=r"cifar10 not found in .*cifar-10-batches-py/data_batch_1\); pass --download"):
        load_dataset(DataConfig(dataset="cifar10", data_root=tmp_path))
    # One missing file of four is reported by name.
    make_idx_dataset(tmp_path, "FashionMNIST", 4, 2, seed=0, gz=False)
    (tmp_path / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(BnmemError, match="t10k-labels-idx1-ubyte"):
        load_source("fashion-mnist", tmp_path)


def test_bad_idx_files(tmp_path):
    make_idx_dataset(tmp_path, "MNIST", 6, 3, seed=0, gz=False)
    images = tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte"
    good = images.read_bytes()

    images.write_bytes(b"")
    with pytest.raises(BnmemError, match=r"train-images-idx3-ubyte is empty"):
        load_source("mnist", tmp_path)
    images.write_bytes(good[:-100])
    with pytest.raises(BnmemError, match=r"is truncated: dimensions \(6, 28, 28\) need 4704 bytes of data, found 4604"):
        load_source("mnist", tmp_path)
    images.write_bytes(good[:10])
    with pytest.raises(BnmemError, match="truncated or corrupt"):
        load_source("mnist", tmp_path)
    images.write_bytes(b"\x1f\x8b\x08\x08" + good[4:])
    with pytest.raises(BnmemError, match="not an IDX file"):
        load_source("mnist", tmp_path)
    images.write_bytes(good + b"\0")
    with pytest.raises(BnmemError, match="1 bytes after the data"):
        load_source("mnist", tmp_path)
    write_idx(images, np.zeros((6, 8, 8)))
    with pytest.raises(BnmemError, match=r"expected uint8 \[N, 28, 28\]"):
        load_source("mnist", tmp_path)
    write_idx(images, np.zeros((5, 28, 28)))
    with pytest.raises(BnmemError, match=r"labels of shape \(6,\), expected \[5\]"):
        load_source("mnist", tmp_path)

    # A gzipped file cut short, or not gzip at all.
    gz = write_idx(tmp_path / "x" / "labels", np.arange(100), gz=True)
    gz.write_bytes(gz.read_bytes()[:-8])
    with pytest.raises(BnmemError, match="not a valid gzip file"):
        read_idx(gz)
    gz.write_bytes(b"plain text, not gzip")
    with pytest.raises(BnmemError, match="not a valid gzip file"):
        read_idx(gz)


class CallsOnLoad:
    """Unpickling this calls os.getcwd (harmless, but any function could stand there)."""

    def __reduce__(self):
        import os

        return (os.getcwd, ())


def test_cifar_pickle_with_python2_numpy_names_loads(tmp_path):
    # The original CIFAR files were written by Python 2 and numpy 1, whose
    # arrays refer to numpy.core.multiarray; numpy 2 calls it numpy._core.
    make_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    blob = pickle.dumps({b"data": data, b"labels": [3, 4]}, protocol=2)
    legacy = blob.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")
    assert b"numpy.core.multiarray\n" in legacy  # protocol 2 names globals as text
    batch.write_bytes(legacy)
    raw = load_source("cifar10", tmp_path)
    np.testing.assert_allclose(raw.x_train[:2], data.reshape(2, 3, 32, 32) / 255.0, atol=1e-7)
    np.testing.assert_array_equal(raw.y_train[:2], [3, 4])


def test_bad_cifar_files(tmp_path):
    make_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"

    batch.write_bytes(b"")
    with pytest.raises(BnmemError, match="data_batch_3 is empty"):
        load_source("cifar10", tmp_path)
    batch.write_bytes(b"this is not a pickle at all")
    with pytest.raises(BnmemError, match="data_batch_3 is not a valid CIFAR pickle"):
        load_source("cifar10", tmp_path)
    good = pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}, protocol=2)
    batch.write_bytes(good[: len(good) // 2])
    with pytest.raises(BnmemError, match="not a valid CIFAR pickle"):
        load_source("cifar10", tmp_path)
    # A pickle that would call a function on load is refused, not executed.
    batch.write_bytes(pickle.dumps(CallsOnLoad()))
    with pytest.raises(BnmemError, match=r"refusing to load global (posix|os|nt)\.getcwd"):
        load_source("cifar10", tmp_path)
    batch.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(BnmemError, match="holds a list, not a dict"):
        load_source("cifar10", tmp_path)
    write_cifar_pickle(batch, np.zeros((2, 3072), np.uint8), [0, 1], label_key=b"fine_labels")
    with pytest.raises(BnmemError, match="no 'labels' key"):
        load_source("cifar10", tmp_path)
    write_cifar_pickle(batch, np.zeros((2, 1024), np.uint8), [0, 1])
    with pytest.raises(BnmemError, match=r"'data' has shape \(2, 1024\), expected \[N, 3072\]"):
        load_source("cifar10", tmp_path)
    write_cifar_pickle(batch, np.zeros((2, 3072), np.uint8), [0, 1, 2])
    with pytest.raises(BnmemError, match=r"'labels' has shape \(3,\), expected \[2\]"):
        load_source("cifar10", tmp_path)
    write_cifar_pickle(batch, np.zeros((2, 3072), np.uint8), [0, 10])
    with pytest.raises(BnmemError, match=r"labels that are not integers in 0\.\.9"):
        load_source("cifar10", tmp_path)


def test_bad_rates():
    for rate in (1.0, -0.1, float("nan"), "abc"):
        with pytest.raises(BnmemError, match=r"label_noise"):
            C.flip_labels(np.zeros(10, dtype=np.int64), rate, 10, C.make_rng(0, 0))
        with pytest.raises(BnmemError, match=r"ood"):
            C.ood_count(rate, 100)
    # The config rejects them too; a config built around validation still fails clearly.
    with pytest.raises(ValueError, match=r"outside \[0, 1\)"):
        DataConfig(ood=1.0)
    with pytest.raises(BnmemError, match=r"ood rate 1.5 is outside \[0, 1\)"):
        load_dataset(DataConfig.model_construct(**{**DataConfig().model_dump(), "ood": 1.5}))
    with pytest.raises(BnmemError, match="non-negative"):
        load_dataset(DataConfig(seed=-1))


def test_bad_ood_sources(tmp_path):
    with pytest.raises(BnmemError, match=r"ood_source 'mnist' has images of shape \(1, 28, 28\), but digits has \(1, 8, 8\)"):
        load_dataset(DataConfig(ood=0.1, ood_source="mnist"))
    with pytest.raises(BnmemError, match=r"ood_source 'cifar100' has images of shape \(3, 32, 32\), but mnist"):
        load_dataset(DataConfig(dataset="mnist", data_root=tmp_path, ood=0.1, ood_source="cifar100"))
    with pytest.raises(BnmemError, match="unknown ood_source 'gaussian'"):
        load_dataset(DataConfig(ood=0.1, ood_source="gaussian"))
    with pytest.raises(BnmemError, match="is the training dataset itself"):
        load_dataset(DataConfig(ood=0.1, ood_source="digits"))
    with pytest.raises(BnmemError, match="heldout_classes only applies with ood_source='heldout-classes'"):
        load_dataset(DataConfig(ood=0.1, heldout_classes=[9]))
    with pytest.raises(BnmemError, match=r"heldout_classes \[10\] are outside 0\.\.9"):
        load_dataset(DataConfig(ood=0.1, ood_source="heldout-classes", heldout_classes=[10]))
    with pytest.raises(BnmemError, match="fewer than two classes"):
        load_dataset(DataConfig(ood_source="heldout-classes", heldout_classes=list(range(9))))
    with pytest.raises(BnmemError, match=r"needs \d+ OOD images but the held-out classes \[8, 9\] has only \d+"):
        load_dataset(DataConfig(ood=0.5, ood_source="heldout-classes"))
    # A missing OOD dataset fails like a missing training dataset.
    make_idx_dataset(tmp_path, "MNIST", 10, 2, seed=0, gz=False)
    with pytest.raises(BnmemError, match="fashion-mnist not found in .*--download"):
        load_dataset(DataConfig(dataset="mnist", data_root=tmp_path, ood=0.2, ood_source="fashion-mnist"))
