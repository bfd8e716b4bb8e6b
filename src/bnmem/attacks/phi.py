"""φ: the one per-(model, example, view) number every attack reads, and where it comes from.

φ = log p_y − log Σ_{y'≠y} p_{y'} = z_y − logsumexp_{y'≠y} z_{y'} is computed in
float64 from the logits and stored as float32 [n_models, n_examples, n_views]
(``phi.npy``, memory-mappable), plus its float32 rounding residual
(``phi_lo.npy``, φ64 − φ32): together C/2 times smaller than the logits.

What precision the attacks need. RMIA and the loss attack need nothing beyond
φ: p_y = sigmoid(φ), the loss is softplus(−φ) and log p_y its negative, and the
absolute error of log p_y (and of the loss) is at most |δφ|·(1 − p_y) ≤ |δφ|;
in the confident tail the loss ≈ e^{−φ} keeps the relative error |δφ| =
|φ|·2^-24. Unlike a stored probability, float32 φ does not round p_y = 1 − 1e-9
to 1. LiRA is what needs more: its score divides by the spread of the reference
φ, which for a confidently fitted example can be far below |φ|, so float32
rounding of φ is amplified. Measured on a digits run (16 models, no norm):
float32 φ alone flipped one member/non-member pair of online LiRA for one target
(its AUC moved by 5e-6) against φ from the logits. With the residual, φ is
reproduced to about |φ|·2^-48 and every attack's AUC equals the logits path's.
A legacy run directory without ``phi_lo.npy`` (or a ``phi.npy`` alone) still
evaluates, at float32 precision.

Readers are "sources" with one method, ``read(start, stop) -> float64 [M, stop −
start, V]``, so the streaming evaluator sees a phi.npy, a legacy logits.npy
(φ derived per block on load) or an in-memory array the same way, and never holds
more than one block.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
from scipy.special import logsumexp

from bnmem import io
from bnmem.errors import BnmemError

PHI_FILE = "phi.npy"
POPULATION_PHI_FILE = "population_phi.npy"


def lo_path(path: str | Path) -> Path:
    """Where the rounding residual of a stored φ lives: ``phi.npy`` -> ``phi_lo.npy``."""
    path = Path(path)
    return path.with_name(path.name[: -len(".npy")] + "_lo.npy")


def split_phi(phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 φ as float32 (hi) plus the float32 rounding residual (lo): hi + lo ≈ φ to |φ|·2^-48.

    Returns:
        ``(hi, lo)`` float32 arrays of φ's shape.
    """
    phi = np.asarray(phi, dtype=np.float64)
    hi = phi.astype(np.float32)
    return hi, (phi - hi.astype(np.float64)).astype(np.float32)
LOGITS_FILE = "logits.npy"
# Examples per block when deriving φ from logits: [M, block, V, C] float64 stays small.
_LOGIT_BLOCK_BYTES = 64 << 20


def phi_from_logits_block(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """φ of a block of logits, float64.

    Args:
        logits: [..., n_examples, n_views, n_classes] (any float dtype).
        labels: [n_examples] ints.

    Returns:
        float64 [..., n_examples, n_views].
    """
    z = np.asarray(logits, dtype=np.float64)
    idx = np.broadcast_to(np.asarray(labels, dtype=np.intp)[:, None, None], z.shape[:-1] + (1,))
    z_true = np.take_along_axis(z, idx, axis=-1)[..., 0]
    others = z.copy()
    np.put_along_axis(others, idx, -np.inf, axis=-1)
    return z_true - logsumexp(others, axis=-1)


class PhiSource(Protocol):
    """Anything the streaming evaluator reads φ from, one block of examples at a time."""

    shape: tuple[int, int, int]

    def read(self, start: int, stop: int) -> np.ndarray:
        """float64 [n_models, stop − start, n_views]."""
        ...


class ArrayPhi:
    """φ held in memory (tests, benchmarks, Python callers)."""

    def __init__(self, phi: np.ndarray):
        phi = np.asarray(phi)
        if phi.ndim != 3:
            raise BnmemError(f"phi must be [n_models, n_examples, n_views], got shape {phi.shape}")
        if not np.isfinite(phi).all():
            raise BnmemError("phi contains NaN or inf (diverged training?)")
        self.phi = phi
        self.shape = tuple(int(s) for s in phi.shape)

    def read(self, start: int, stop: int) -> np.ndarray:
        return np.asarray(self.phi[:, start:stop], dtype=np.float64)


def _data_offset(path: Path, shape: tuple[int, ...]) -> int | None:
    """Where the data of a C-ordered native float32 ``.npy`` of ``shape`` starts (None: another layout)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            got, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            got, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            return None
        ok = tuple(got) == tuple(shape) and not fortran and dtype == np.dtype(np.float32) and dtype.isnative
        return f.tell() if ok else None


def _pread_block(path: Path, offset: int, shape: tuple[int, int, int], start: int, stop: int) -> np.ndarray:
    """float32 [M, stop − start, V] of a C-ordered float32 array stored from ``offset``: one read per model."""
    m, n, v = shape
    out = np.empty((m, stop - start, v), dtype=np.float32)
    row = (stop - start) * v * 4
    view = memoryview(out).cast("B")
    fd = os.open(path, os.O_RDONLY)
    try:
        for i in range(m):
            at, done = offset + (i * n + start) * v * 4, 0
            while done < row:
                got = os.preadv(fd, [view[i * row + done:(i + 1) * row]], at + done)
                if got <= 0:
                    raise BnmemError(f"{path}: file ends before examples {start}..{stop - 1} of model {i}")
                done += got
    finally:
        os.close(fd)
    return out


class NpyPhi:
    """φ in a ``.npy`` file (plus its ``_lo`` residual when present), read a block at a time.

    A float32 C-ordered file (what bnmem writes) is read with one ``pread`` per model into a fresh buffer,
    which keeps the file's pages out of the process's resident set and costs no page faults on the file's
    pages; any other layout is memory-mapped afresh per read and the map dropped right after the copy (a map
    held open for the whole pass would count every page it touched).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        mm = np.load(self.path, mmap_mode="r")
        if mm.ndim != 3:
            raise BnmemError(f"{self.path}: phi must be [n_models, n_examples, n_views], got shape {mm.shape}")
        self.shape = tuple(int(s) for s in mm.shape)
        del mm
        lo = lo_path(self.path)
        self.lo = lo if lo.exists() else None
        if self.lo is not None:
            mm = np.load(self.lo, mmap_mode="r")
            if tuple(mm.shape) != self.shape:
                raise BnmemError(f"{self.lo} has shape {mm.shape}, {self.path} has {self.shape}")
            del mm
        self._offsets = {p: _data_offset(p, self.shape) if hasattr(os, "preadv") else None
                         for p in (self.path, self.lo) if p is not None}

    def _part(self, path: Path, start: int, stop: int) -> np.ndarray:
        """The stored values [M, stop − start, V] of one file, in its own dtype."""
        offset = self._offsets[path]
        if offset is not None:
            return _pread_block(path, offset, self.shape, start, stop)
        mm = np.load(path, mmap_mode="r")
        out = np.array(mm[:, start:stop])
        del mm
        return out

    def read(self, start: int, stop: int) -> np.ndarray:
        out = self._part(self.path, start, stop).astype(np.float64)
        if self.lo is not None:
            out += self._part(self.lo, start, stop)
        if not np.isfinite(out).all():
            raise BnmemError(f"{self.path}: phi contains NaN or inf in examples {start}..{stop - 1}")
        return out


class ViewSubset:
    """Some of a source's views (e.g. the identity view alone), read block by block."""

    def __init__(self, source: PhiSource, views: Sequence[int]):
        self.source = source
        self.views = [int(v) for v in views]
        self.shape = (source.shape[0], source.shape[1], len(self.views))

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.source.read(start, stop)[:, :, self.views]


class LogitsPhi:
    """φ derived, one block at a time, from a legacy ``logits.npy`` [M, N, V, C] (kept in float64)."""

    def __init__(self, path: str | Path, labels: np.ndarray):
        self.path = Path(path)
        mm = np.load(self.path, mmap_mode="r")
        if mm.ndim != 4:
            raise BnmemError(f"{self.path}: logits must be [n_models, n_examples, n_views, n_classes], got {mm.shape}")
        self.labels = np.asarray(labels)
        if self.labels.shape != (mm.shape[1],):
            raise BnmemError(f"labels must be [{mm.shape[1]}], got shape {self.labels.shape}")
        if self.labels.size and (self.labels.min() < 0 or self.labels.max() >= mm.shape[3]):
            raise BnmemError(f"labels must lie in [0, {mm.shape[3] - 1}]")
        self.shape = (int(mm.shape[0]), int(mm.shape[1]), int(mm.shape[2]))
        del mm

    def read(self, start: int, stop: int) -> np.ndarray:
        mm = np.load(self.path, mmap_mode="r")
        block = np.array(mm[:, start:stop])
        del mm
        if not np.isfinite(block).all():
            raise BnmemError(f"{self.path}: logits contain NaN or inf in examples {start}..{stop - 1}")
        return phi_from_logits_block(block, self.labels[start:stop])


def write_phi(path: str | Path, source: PhiSource, block: int | None = None) -> None:
    """Write a source's φ as float32 ``.npy`` plus its ``_lo`` residual, atomically, block by block.

    Args:
        path: destination.
        source: where φ comes from (e.g. :class:`LogitsPhi` to convert a legacy run).
        block: examples per block (default: about 64 MB of float64 per block).
    """
    m, n, v = source.shape
    block = block or max(1, _LOGIT_BLOCK_BYTES // max(1, 8 * m * v * 10))
    # The residual first: a phi.npy that exists always has its residual next to it.
    with io.atomic_path(path) as tmp, io.atomic_path(lo_path(path)) as tmp_lo:
        hi = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(m, n, v))
        lo = np.lib.format.open_memmap(tmp_lo, mode="w+", dtype=np.float32, shape=(m, n, v))
        for a in range(0, n, block):
            hi[:, a : a + block], lo[:, a : a + block] = split_phi(source.read(a, min(n, a + block)))
        hi.flush()
        lo.flush()
        del hi, lo


def open_phi(norm_dir: str | Path, labels: np.ndarray | None = None) -> PhiSource:
    """The φ source of a queried norm directory: ``phi.npy``, else φ derived from ``logits.npy``.

    Args:
        norm_dir: a directory the lira query step filled (any bnmem version).
        labels: the training labels (needed only for a legacy ``logits.npy``).

    Raises:
        BnmemError: neither file exists, or labels are missing for a legacy run.
    """
    norm_dir = Path(norm_dir)
    if (norm_dir / PHI_FILE).exists():
        return NpyPhi(norm_dir / PHI_FILE)
    if (norm_dir / LOGITS_FILE).exists():
        if labels is None:
            raise BnmemError(f"{norm_dir} holds only logits.npy; its labels are needed to derive φ")
        return LogitsPhi(norm_dir / LOGITS_FILE, labels)
    raise BnmemError(f"{norm_dir} holds neither {PHI_FILE} nor {LOGITS_FILE}")
