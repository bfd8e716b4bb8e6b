"""Raw image sources: the bundled digits, MNIST, Fashion-MNIST, CIFAR-10/100.

Every loader returns float32 NCHW images in [0, 1] and int64 labels, for a
train and a test split. Files on disk use torchvision's layout, so a data root
torchvision already filled works as is; the files are parsed here with numpy
(IDX) or a restricted unpickler (CIFAR) so that a missing, empty, truncated or
corrupt file ends in one clear :class:`BnmemError` line instead of a parser
traceback. torchvision is imported only when ``download=True`` is asked for.
"""

from __future__ import annotations

import gzip
import os
import pickle
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from bnmem.errors import BnmemError
from bnmem.names import DATASETS, DatasetInfo  # the one table of datasets

# Split seed of the digits train/test split. Fixed on purpose: the run seed
# varies the corruption, never which images are train and which are test.
DIGITS_SPLIT_SEED = 0

DATA_ENV = "BNMEM_DATA"


@dataclass(frozen=True)
class RawData:
    """A dataset as read from its source, before any corruption.

    Attributes:
        name: dataset name.
        x_train, x_test: float32 NCHW images in [0, 1].
        y_train, y_test: int64 labels in ``0..num_classes-1``.
        num_classes: number of classes.
        source: where the data came from (a path or a description).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    source: str


def dataset_shape(name: str) -> tuple[tuple[int, int, int], int]:
    """Input shape and class count of a dataset, without loading it.

    Args:
        name: a dataset name (see ``DATASETS``).

    Returns:
        ``((C, H, W), num_classes)``.

    Raises:
        BnmemError: the name is not a known dataset.
    """
    info = _info(name)
    return info.input_shape, info.num_classes


def default_data_root() -> Path:
    """``$BNMEM_DATA`` if set, else ``~/.cache/bnmem/data``."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/bnmem/data").expanduser()


def load_source(name: str, root: str | Path | None = None, download: bool = False) -> RawData:
    """Load a dataset's train and test splits as float32 NCHW in [0, 1].

    Args:
        name: ``digits``, ``mnist``, ``fashion-mnist``, ``cifar10`` or ``cifar100``.
        root: data root in torchvision's layout (default: :func:`default_data_root`).
            Ignored for ``digits``, which ships with scikit-learn.
        download: fetch a missing dataset with torchvision.

    Returns:
        The raw splits. Arrays of ``digits`` are cached and read-only; copy
        before writing.

    Raises:
        BnmemError: unknown name, missing data without ``download``, a file that
            is empty, truncated or corrupt, or a failed download.
    """
    _info(name)
    if name == "digits":
        return _load_digits()
    root = Path(root).expanduser() if root is not None else default_data_root()
    if name in _IDX_FOLDERS:
        return _load_idx_dataset(name, root, download)
    return _load_cifar(name, root, download)


def missing_files(name: str, root: str | Path | None = None) -> list[Path]:
    """The files of dataset ``name`` that are not under ``root`` (empty when it can be loaded without a
    download; ``digits`` ships with scikit-learn). Presence only: contents are checked when loaded.

    Raises:
        BnmemError: unknown name.
    """
    _info(name)
    if name == "digits":
        return []
    root = Path(root).expanduser() if root is not None else default_data_root()
    if name in _IDX_FOLDERS:
        raw_dir = root / _IDX_FOLDERS[name] / "raw"
        bases = [raw_dir / f for split in ("train", "test") for f in _IDX_FILES[split]]
        return [b for b in bases if _idx_path(b) is None]
    folder, train_files, test_files, _ = _CIFAR[name]
    return [root / folder / f for f in train_files + test_files if not (root / folder / f).is_file()]


def fetch_if_missing(name: str, root: str | Path | None = None) -> None:
    """Download dataset ``name`` into ``root`` when any of its files is missing.

    Raises:
        BnmemError: unknown name, or the download failed.
    """
    if missing_files(name, root):
        _download(name, Path(root).expanduser() if root is not None else default_data_root())


def _info(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except (KeyError, TypeError):
        raise BnmemError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}") from None


def _readonly(*arrays: np.ndarray) -> None:
    # Cached arrays are shared by every caller in the process; a write would
    # silently corrupt every later experiment, so make it fail loudly instead.
    for a in arrays:
        a.setflags(write=False)


def _not_found(name: str, root: Path, looked_for: Path, suffix: str = "") -> BnmemError:
    return BnmemError(
        f"{name} not found in {root} (looked for {looked_for}{suffix}); "
        f"pass --download to fetch it or --data-root DIR to point at it"
    )


# ---------------------------------------------------------------- digits


@lru_cache(maxsize=1)
def _load_digits() -> RawData:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    y = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=0.5, stratify=y, random_state=DIGITS_SPLIT_SEED
    )
    x_tr, x_te = np.ascontiguousarray(x_tr), np.ascontiguousarray(x_te)
    y_tr, y_te = np.ascontiguousarray(y_tr), np.ascontiguousarray(y_te)
    _readonly(x_tr, x_te, y_tr, y_te)
    return RawData("digits", x_tr, y_tr, x_te, y_te, 10, "sklearn.datasets.load_digits (stratified 50/50, seed 0)")


# ---------------------------------------------------------------- IDX (MNIST, Fashion-MNIST)

_IDX_FOLDERS = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}
_IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# IDX type byte -> big-endian numpy dtype.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Parse one IDX file (plain or ``.gz``) into a numpy array.

    The format: two zero bytes, a type byte, a byte with the number of
    dimensions, one big-endian uint32 per dimension, then the data, row-major
    and big-endian.

    Args:
        path: the file.

    Returns:
        The array, in native byte order.

    Raises:
        BnmemError: the file is unreadable, empty, not IDX, truncated, or has
            trailing bytes.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise BnmemError(f"cannot read {path}: {e.strerror or e}") from e
    if not raw:
        raise BnmemError(f"{path} is empty; delete it and pass --download to fetch it again")
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise BnmemError(f"{path} is not a valid gzip file ({e}); delete it and download it again") from e
        if not raw:
            raise BnmemError(f"{path} decompresses to nothing; delete it and download it again")
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise BnmemError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise BnmemError(f"{path} is truncated or corrupt (header of {ndim} dimensions does not fit)")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    found = len(raw) - header
    if found < expected:
        raise BnmemError(
            f"{path} is truncated: dimensions {dims} need {expected} bytes of data, found {found}; "
            f"delete it and download it again"
        )
    if found > expected:
        raise BnmemError(f"{path} is corrupt: {found - expected} bytes after the data its header {dims} describes")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def _idx_path(base: Path) -> Path | None:
    """The plain file if present, else its ``.gz``, else None."""
    if base.is_file():
        return base
    gz = base.with_name(base.name + ".gz")
    return gz if gz.is_file() else None


def _load_idx_dataset(name: str, root: Path, download: bool) -> RawData:
    raw_dir = root / _IDX_FOLDERS[name] / "raw"
    bases = [raw_dir / f for split in ("train", "test") for f in _IDX_FILES[split]]
    if download and any(_idx_path(b) is None for b in bases):
        _download(name, root)
    for base in bases:
        if _idx_path(base) is None:
            raise _not_found(name, root, base, "[.gz]")
    splits = {}
    for split, (img_name, lbl_name) in _IDX_FILES.items():
        img_path, lbl_path = _idx_path(raw_dir / img_name), _idx_path(raw_dir / lbl_name)
        images, labels = read_idx(img_path), read_idx(lbl_path)
        shape = DATASETS[name].input_shape
        if images.ndim != 3 or images.shape[1:] != shape[1:] or images.dtype != np.uint8:
            raise BnmemError(
                f"{img_path} holds {images.dtype} images of shape {images.shape}, expected uint8 [N, {shape[1]}, {shape[2]}]"
            )
        if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
            raise BnmemError(f"{lbl_path} holds labels of shape {labels.shape}, expected [{images.shape[0]}] to match {img_path.name}")
        x = images[:, None, :, :].astype(np.float32)
        x /= np.float32(255.0)
        splits[split] = (x, _check_labels(labels, DATASETS[name].num_classes, lbl_path))
    (x_tr, y_tr), (x_te, y_te) = splits["train"], splits["test"]
    return RawData(name, x_tr, y_tr, x_te, y_te, DATASETS[name].num_classes, str(raw_dir))


def _check_labels(labels: np.ndarray, num_classes: int, path: Path) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.size and (not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= num_classes):
        raise BnmemError(f"{path} has labels that are not integers in 0..{num_classes - 1}")
    return labels.astype(np.int64)


# ---------------------------------------------------------------- CIFAR pickles

_CIFAR = {
    # name: (folder, train files, test files, label key)
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], "labels"),
    "cifar100": ("cifar-100-python", ["train"], ["test"], "fine_labels"),
}


def _numpy_globals() -> dict[tuple[str, str], object]:
    """The only globals a CIFAR pickle needs: how numpy rebuilds an array."""
    import codecs

    try:  # numpy >= 2 moved numpy.core to numpy._core
        from numpy._core import multiarray, numeric
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]
    allowed: dict[tuple[str, str], object] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,
    }
    for pkg in ("numpy.core", "numpy._core"):
        allowed[(f"{pkg}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{pkg}.multiarray", "scalar")] = multiarray.scalar
        if hasattr(numeric, "_frombuffer"):
            allowed[(f"{pkg}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


class _ArrayUnpickler(pickle.Unpickler):
    # A pickle can run arbitrary code on load; a data file has no business
    # doing more than rebuilding numpy arrays, so refuse every other global.
    _allowed = _numpy_globals()

    def find_class(self, module: str, name: str) -> object:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}") from None


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            if not f.read(1):
                raise BnmemError(f"{path} is empty; delete it and pass --download to fetch it again")
            f.seek(0)
            obj = _ArrayUnpickler(f, encoding="bytes").load()
    except BnmemError:
        raise
    except OSError as e:
        raise BnmemError(f"cannot read {path}: {e.strerror or e}") from e
    except Exception as e:  # noqa: BLE001 - unpickling corrupt bytes can raise nearly anything
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BnmemError(f"{path} is not a valid CIFAR pickle ({detail}); delete it and download it again") from e
    if not isinstance(obj, dict):
        raise BnmemError(f"{path} is not a valid CIFAR pickle (holds a {type(obj).__name__}, not a dict)")
    # The original files are Python 2 pickles with byte-string keys; files
    # re-saved under Python 3 may have str keys. Accept both.
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _cifar_batch(path: Path, label_key: str, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    batch = _unpickle(path)
    missing = [k for k in ("data", label_key) if k not in batch]
    if missing:
        raise BnmemError(f"{path} is not a valid CIFAR pickle (no {', '.join(repr(m) for m in missing)} key)")
    data = np.asarray(batch["data"])
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise BnmemError(f"{path}: 'data' has shape {data.shape}, expected [N, 3072]")
    if data.dtype != np.uint8:
        if not np.issubdtype(data.dtype, np.integer) or (data.size and (data.min() < 0 or data.max() > 255)):
            raise BnmemError(f"{path}: 'data' is {data.dtype}, expected uint8 pixel values")
    labels = np.asarray(batch[label_key])
    if labels.ndim != 1 or labels.shape[0] != data.shape[0]:
        raise BnmemError(f"{path}: {label_key!r} has shape {labels.shape}, expected [{data.shape[0]}]")
    return data.astype(np.uint8, copy=False), _check_labels(labels, num_classes, path)


def _load_cifar(name: str, root: Path, download: bool) -> RawData:
    folder, train_files, test_files, label_key = _CIFAR[name]
    base = root / folder
    paths = [base / f for f in train_files + test_files]
    if download and not all(p.is_file() for p in paths):
        _download(name, root)
    for p in paths:
        if not p.is_file():
            raise _not_found(name, root, p)
    num_classes = DATASETS[name].num_classes

    def read(files: list[str]) -> tuple[np.ndarray, np.ndarray]:
        parts = [_cifar_batch(base / f, label_key, num_classes) for f in files]
        data = np.concatenate([d for d, _ in parts])
        x = data.reshape(-1, 3, 32, 32).astype(np.float32)
        x /= np.float32(255.0)
        return x, np.concatenate([y for _, y in parts])

    (x_tr, y_tr), (x_te, y_te) = read(train_files), read(test_files)
    return RawData(name, x_tr, y_tr, x_te, y_te, num_classes, str(base))


# ---------------------------------------------------------------- download


_TORCHVISION_CLASSES = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST", "cifar10": "CIFAR10", "cifar100": "CIFAR100"}


def _download(name: str, root: Path) -> None:
    """Fetch ``name`` into ``root`` with torchvision (imported only here)."""
    from bnmem.io import ensure_dir

    ensure_dir(root)
    try:
        import torchvision.datasets as tvd
    except ImportError as e:
        raise BnmemError(f"downloading {name} needs torchvision, which failed to import: {e}") from e
    cls = getattr(tvd, _TORCHVISION_CLASSES[name])
    try:
        for train in (True, False):
            cls(str(root), train=train, download=True)
    except Exception as e:  # noqa: BLE001 - network/integrity errors come in many types
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BnmemError(f"downloading {name} into {root} failed: {detail}") from e
