"""Atomic files and completion markers for run directories.

Every file a run writes goes to a temporary name in the same directory and is
renamed into place, so a killed run never leaves a half-written file that looks
finished. A job is finished when its ``DONE`` marker exists; the marker is
written last.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from bnmem.errors import BnmemError, DiskFullError

DONE = "DONE"
_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows.

    Linux reports it in /proc/self/status; elsewhere it is read by setting and
    restoring it under a lock (the only portable way; the lock keeps two bnmem
    threads from racing each other).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def file_mode() -> int:
    """Mode of a new results file: what ``open()`` would give, 0o666 & ~umask (0o644 under 022)."""
    return 0o666 & ~current_umask()


def ensure_dir(path: str | Path) -> Path:
    """Create ``path`` (and parents); a permission problem becomes a BnmemError."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except PermissionError as e:
        raise BnmemError(f"cannot create directory {path}: permission denied") from e
    except (FileExistsError, NotADirectoryError) as e:
        raise BnmemError(f"cannot create directory {path}: a file is in the way") from e
    if not os.access(path, os.W_OK):
        raise BnmemError(f"cannot write into {path}: permission denied")
    return path


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


def free_bytes(path: str | Path) -> int:
    """Free bytes on the filesystem that holds ``path`` (its nearest existing ancestor)."""
    p = Path(path).expanduser().resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def _free_text(path: Path) -> str:
    """'1.2 MB free' on the filesystem holding ``path``, or '' when it cannot be read."""
    try:
        free = free_bytes(path)
    except OSError:
        return ""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if free >= size:
            return f"{free / size:.1f} {unit} free"
    return f"{free} bytes free"


def disk_full(path: str | Path) -> DiskFullError:
    """The one-line error for a full disk while writing ``path``."""
    path = Path(path)
    free = _free_text(path.parent)
    return DiskFullError(f"disk full while writing {path}" + (f" ({free} on its filesystem)" if free else "")
                         + "; nothing half-written was kept. Free some space and rerun the same command to "
                         "resume: finished jobs are kept")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    Raises:
        DiskFullError: the disk or quota filled up (the temporary file is removed).
    """
    path = Path(path)
    tmp_path: Path | None = None
    try:
        ensure_dir(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        yield tmp_path
        # mkstemp creates 0600; results on a shared filesystem must be as readable
        # as any file the user creates, so the umask decides (before the rename, so
        # the file never appears under its name with the wrong mode).
        os.chmod(tmp_path, file_mode())
        os.replace(tmp_path, path)
    except OSError as e:
        if e.errno in DISK_FULL_ERRNOS:
            raise disk_full(path) from None
        raise
    finally:
        if tmp_path is not None and tmp_path.exists():
            tmp_path.unlink()


def _write_file(path: Path, data: bytes) -> None:
    """Write and flush ``data`` to the disk (one place every results file goes through)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically.

    Raises:
        DiskFullError: the disk filled up (nothing is left under ``path``).
    """
    with atomic_path(path) as tmp:
        _write_file(tmp, data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON (numpy scalars/arrays allowed), atomically."""
    write_text(path, json.dumps(obj, indent=2, default=_json_default, allow_nan=True) + "\n")


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_npy(path: str | Path, array: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    write_bytes(path, buf.getvalue())


def write_npz(path: str | Path, **arrays: np.ndarray) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    write_bytes(path, buf.getvalue())


def save_torch(path: str | Path, obj: Any) -> None:
    """torch.save, atomically. Store state dicts and plain data, not modules."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    write_bytes(path, buf.getvalue())


def load_torch(path: str | Path) -> Any:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks (a model file may be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_done(directory: str | Path) -> bool:
    """True when ``directory`` holds a completion marker."""
    return (Path(directory) / DONE).exists()


def mark_done(directory: str | Path, info: dict[str, Any] | None = None) -> None:
    """Write the completion marker last, after every other file of the job."""
    write_json(Path(directory) / DONE, info or {})


def done_seconds(directory: str | Path) -> float | None:
    """The seconds ``directory``'s completion marker recorded (None: no marker, or none recorded)."""
    try:
        doc = read_json(Path(directory) / DONE)
    except (OSError, ValueError):
        return None
    s = doc.get("seconds") if isinstance(doc, dict) else None
    return float(s) if isinstance(s, (int, float)) else None


def done_seconds_total(directories: Iterable[str | Path]) -> float | None:
    """The seconds the completion markers of ``directories`` recorded, summed (None: one has no marker, or
    recorded none): a job's work that ran in several folders (its runs, its chunks)."""
    each = [done_seconds(d) for d in directories]
    return None if None in each else float(sum(each))
