"""Shadow models of one recipe: who trains on what, training in resumable chunks, loading.

Protocol (as in the LiRA reference code, tensorflow/privacy mi_lira_2021):
``keep = keep_matrix(M, n_train, keep_seed)`` puts every training example IN
for exactly half of the M models, and model m trains on its IN examples. The
training set is the corrupted one (label noise / OOD), so the outliers are
part of the population being attacked. Model m's seed and the keep matrix are
the same for every norm, so norms are compared model by model.

Training runs through an :class:`~bnmem.executors.Executor`: one job per chunk
of ``chunk_size`` consecutive models (a :class:`ShadowChunk`, :func:`train_shadow_chunk`). A job saves
each model's state dict atomically and then its ``DONE`` marker, so after any
interruption (even SIGKILL) a rerun trains only the chunks without a marker,
and — the job fixing its own thread count — ends with the same bits as an
uninterrupted run.

Layout of a norm's directory::

    <norm_dir>/shadow.json                     what the models depend on
    <norm_dir>/shadow/models_0000-0015/model_0000.pt ... DONE
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, Sequence

import numpy as np
from torch import nn

from bnmem import io
from bnmem.attacks import keep_matrix
from bnmem.data import OutlierDataset
from bnmem.data.loaded import load_once
from bnmem.errors import BnmemError
from bnmem.executors import Executor
from bnmem.shadow.config import ShadowConfig
from bnmem.rundir import prepare_run_dir
from bnmem.train.ensemble import StatesHook, train_models
from bnmem.train.trainer import seeded_model

SHADOW_DIR = "shadow"
IDENTITY_FILE = "shadow.json"


def chunk_name(models: Sequence[int]) -> str:
    return f"models_{models[0]:04d}-{models[-1]:04d}"


def chunk_dir(norm_dir: str | Path, models: Sequence[int]) -> Path:
    return Path(norm_dir) / SHADOW_DIR / chunk_name(models)


def model_file(norm_dir: str | Path, models: Sequence[int], m: int) -> Path:
    return chunk_dir(norm_dir, models) / f"model_{m:04d}.pt"


def shadow_keep(cfg: ShadowConfig, n_train: int) -> np.ndarray:
    """The keep matrix [M, n_train] of ``cfg`` (identical for every norm)."""
    return keep_matrix(cfg.shadow_models, n_train, cfg.keep_seed)


@dataclass(frozen=True)
class ShadowChunk:
    """One training (or query) job: a chunk of consecutive shadow models of one norm.

    It travels to worker processes and Ray pickled: the typed config, validated once where the chunk was
    made (a worker does not validate it again), and plain data.

    Attributes:
        run_dir: the norm's directory (resolved, a string).
        config: the models' :class:`ShadowConfig`, its recipe resolved.
        norm: their norm.
        models: the chunk's model indices (consecutive).
        progress: per-model progress bars inside the job (an executor's worker processes turn them off).
    """

    run_dir: str
    config: ShadowConfig
    norm: str
    models: tuple[int, ...]
    progress: bool = False

    @classmethod
    def of(cls, cfg: ShadowConfig, norm: str, norm_dir: str | Path, models: Sequence[int],
           progress: bool = False, **extra: Any) -> Self:
        """The chunk ``models`` of ``norm`` in ``norm_dir``; ``extra``: a subclass's own fields."""
        return cls(str(Path(norm_dir).resolve()), cfg, norm, tuple(int(m) for m in models), bool(progress), **extra)


def train_shadow_chunk(chunk: ShadowChunk, on_epoch: StatesHook | None = None) -> dict[str, Any]:
    """Executor job: train one chunk of shadow models and save them atomically.

    Args:
        chunk: the models to train (:class:`ShadowChunk`).
        on_epoch: handed to :func:`~bnmem.train.ensemble.train_models` (the models' states after every
            epoch, indexed by position in ``models``); a lens's own job wraps this one to pass it
            (the lira lens's matched-fit queries). It runs before the models are saved and marked done.

    Returns:
        Small summary: norm, models, seeds, seconds, ``skipped`` (the chunk was
        already done).

    Raises:
        BnmemError: bad config or data problems.
    """
    cfg = chunk.config
    norm, models = chunk.norm, list(chunk.models)
    out = chunk_dir(chunk.run_dir, models)
    if io.is_done(out):
        return {**io.read_json(out / io.DONE), "skipped": True}
    t0 = time.perf_counter()
    ds = load_once(cfg.data)
    keep = shadow_keep(cfg, ds.n_train)
    seeds = [cfg.model_seed(m) for m in models]
    nets = train_models(cfg.model(norm), ds, cfg.train, seeds, [np.flatnonzero(keep[m]) for m in models],
                        progress=chunk.progress, on_epoch=on_epoch)
    for m, net in zip(models, nets):
        state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
        io.save_torch(model_file(chunk.run_dir, models, m), state)
    summary = {"norm": norm, "models": models, "seeds": seeds, "seconds": time.perf_counter() - t0,
               "threads": cfg.train.threads, "trainer": f"{train_models.__module__}.{train_models.__name__}"}
    io.mark_done(out, summary)  # last: the chunk counts as finished only now
    return {**summary, "skipped": False}


def prepare_norm_dir(cfg: ShadowConfig, norm: str, norm_dir: str | Path) -> Path:
    """Create the norm's directory and record (or check, on a rerun) what its models depend on.

    Raises:
        BnmemError: the directory holds shadow models of another configuration.
    """
    cfg.model(norm)  # validates the norm before any work
    return prepare_run_dir(norm_dir, cfg.training_identity(norm), name=IDENTITY_FILE)


def pending_chunks(cfg: ShadowConfig, norm: str, norm_dir: str | Path, progress: bool = False) -> list[ShadowChunk]:
    """The chunks of ``norm`` that have no ``DONE`` marker yet."""
    norm_dir = prepare_norm_dir(cfg, norm, norm_dir)
    return [ShadowChunk.of(cfg, norm, norm_dir, c, progress) for c in cfg.chunks()
            if not io.is_done(chunk_dir(norm_dir, c))]


def train_shadow_models(cfg: ShadowConfig, norm: str, norm_dir: str | Path, executor: Executor,
                        progress: bool = False) -> list[dict[str, Any]]:
    """Train (or finish training) the M shadow models of ``norm`` into ``norm_dir``.

    Only unfinished chunks are submitted to the executor.

    Args:
        cfg: the configuration (its recipe, e.g. ``train.gs_reg``, is used as is).
        norm: the norm of these models.
        norm_dir: the norm's directory (e.g. ``<out>/batch``).
        executor: where the chunk jobs run.
        progress: per-model progress bars inside jobs.

    Returns:
        The summaries of the jobs that ran (empty when everything was done).

    Raises:
        BnmemError: a different configuration already lives in ``norm_dir``, or bad config/data.
    """
    chunks = pending_chunks(cfg, norm, norm_dir, progress)
    if not chunks:
        return []
    return executor.map(train_shadow_chunk, chunks, desc=f"{norm} shadow chunks", resources={"num_cpus": cfg.train.threads})


def all_trained(cfg: ShadowConfig, norm_dir: str | Path) -> bool:
    return all(io.is_done(chunk_dir(norm_dir, c)) for c in cfg.chunks())


def load_shadow_state(cfg: ShadowConfig, norm_dir: str | Path, m: int) -> dict:
    """State dict of shadow model ``m``.

    Raises:
        BnmemError: its chunk has not finished training.
    """
    chunk = next(c for c in cfg.chunks() if m in c)
    if not io.is_done(chunk_dir(norm_dir, chunk)):
        raise BnmemError(f"shadow models {chunk[0]}-{chunk[-1]} in {norm_dir} are not trained yet; rerun to finish")
    return io.load_torch(model_file(norm_dir, chunk, m))


def load_shadow_model(cfg: ShadowConfig, norm: str, norm_dir: str | Path, ds: OutlierDataset, m: int) -> nn.Module:
    """Shadow model ``m`` of ``norm``, rebuilt and loaded (CPU, train mode as built).

    Args:
        cfg: the configuration the models were trained with.
        norm: their norm.
        norm_dir: the norm's directory.
        ds: the dataset (for input shape and class count).
        m: model index.

    Returns:
        The model.

    Raises:
        BnmemError: the model's chunk is not finished.
    """
    if not 0 <= m < cfg.shadow_models:
        raise BnmemError(f"shadow model index {m} out of range 0..{cfg.shadow_models - 1}")
    model = seeded_model(cfg.model(norm), ds, cfg.model_seed(m))
    model.load_state_dict(load_shadow_state(cfg, norm_dir, m))
    return model


def load_shadow_models(cfg: ShadowConfig, norm: str, norm_dir: str | Path,
                       ds: OutlierDataset | None = None) -> list[nn.Module]:
    """All M shadow models of ``norm`` in model-index order (for reuse: memorization, γ/σ, ...).

    Their training sets are ``np.flatnonzero(shadow_keep(cfg, ds.n_train)[m])``.

    Raises:
        BnmemError: some chunk is not finished.
    """
    ds = ds if ds is not None else load_once(cfg.data)
    return [load_shadow_model(cfg, norm, norm_dir, ds, m) for m in range(cfg.shadow_models)]
