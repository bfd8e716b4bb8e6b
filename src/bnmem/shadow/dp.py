"""Shadow models trained with DP-SGD, in the engine's layout and through its executor.

The many-models-at-once ensemble engine has no per-example clipping, so DP
shadow models train one by one (:func:`bnmem.train.dp.train_dp_model`) inside
executor jobs of ``chunk_size`` models, written exactly where the ensemble
chunks keep theirs (``<norm_dir>/shadow/models_a-b/model_m.pt`` and the
chunk's ``DONE``). :mod:`bnmem.shadow.query` and :mod:`bnmem.shadow.evaluate`
therefore read them unchanged. Each model also gets ``model_m.dp.json`` (its privacy accounting),
written after its weights: an interrupted chunk resumes at its first model
without that file, and a finished chunk is skipped.

``<norm_dir>/dp.json`` records the DP settings next to the engine's
``shadow.json``; a rerun with other DP settings into the same folder is refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bnmem import io
from bnmem.data.loaded import load_once
from bnmem.executors import Executor
from bnmem.shadow.config import ShadowConfig
from bnmem.shadow.training import (
    ShadowChunk,
    chunk_dir,
    model_file,
    prepare_norm_dir,
    shadow_keep,
    train_shadow_chunk,
)
from bnmem.rundir import prepare_run_dir
from bnmem.train import seeded_model
from bnmem.train.dp import DPConfig, check_dp_norm, train_dp_model

DP_IDENTITY = "dp.json"


def accounting_file(norm_dir: str | Path, models: list[int], m: int) -> Path:
    return model_file(norm_dir, models, m).with_suffix(".dp.json")


@dataclass(frozen=True, kw_only=True)
class DPShadowChunk(ShadowChunk):
    """A chunk of shadow models trained with DP-SGD: a :class:`~bnmem.shadow.training.ShadowChunk` and its
    DP settings (typed, validated once where the chunk was made, as its config is).

    Attributes:
        dp: the DP-SGD settings.
    """

    dp: DPConfig


def train_dp_shadow_chunk(chunk: DPShadowChunk) -> dict[str, Any]:
    """Executor job: train one chunk of shadow models with DP-SGD, one model at a time.

    Args:
        chunk: the models to train and their DP settings.

    Returns:
        ``norm``, ``models``, ``seeds``, ``seconds`` (of the models trained in
        this call), ``per_model_seconds``, ``accounting`` (one dict per model),
        ``trainer`` and ``skipped``.

    Raises:
        BnmemError: BN norm, Opacus missing, or an unreachable budget.
    """
    cfg, dp = chunk.config, chunk.dp
    norm, models, run_dir = chunk.norm, list(chunk.models), chunk.run_dir
    check_dp_norm(norm)
    out = chunk_dir(run_dir, models)
    if io.is_done(out):
        return {**io.read_json(out / io.DONE), "skipped": True}
    ds = load_once(cfg.data)
    keep = shadow_keep(cfg, ds.n_train)
    t0 = time.perf_counter()
    for m in models:
        acc_path = accounting_file(run_dir, models, m)
        if acc_path.exists():  # finished before an interruption
            continue
        seed = cfg.model_seed(m)
        res = train_dp_model(seeded_model(cfg.model(norm), ds, seed), ds, cfg.train, dp, seed,
                             train_idx=np.flatnonzero(keep[m]),
                             progress=f"dp {norm} model {m}" if chunk.progress else False)
        state = {k: v.detach().cpu().contiguous() for k, v in res.model.state_dict().items()}
        io.save_torch(model_file(run_dir, models, m), state)
        io.write_json(acc_path, {**res.accounting.to_dict(), "seconds": res.seconds, "history": res.history})
    records = [io.read_json(accounting_file(run_dir, models, m)) for m in models]
    summary = {
        "norm": norm, "models": models, "seeds": [cfg.model_seed(m) for m in models],
        "seconds": time.perf_counter() - t0,
        "per_model_seconds": [r["seconds"] for r in records],
        "accounting": [{k: v for k, v in r.items() if k not in ("history", "seconds")} for r in records],
        "threads": cfg.train.threads,
        "trainer": "bnmem.train.dp.train_dp_model (Opacus, one model at a time)",
    }
    io.mark_done(out, summary)  # last: the chunk counts as finished only now
    return {**summary, "skipped": False}


def train_chunk(chunk: ShadowChunk) -> dict[str, Any]:
    """Executor job: one chunk of shadow models, with DP-SGD when it is a :class:`DPShadowChunk`.

    Lets one executor map hold plain (ensemble) and DP chunks together.
    """
    return train_dp_shadow_chunk(chunk) if isinstance(chunk, DPShadowChunk) else train_shadow_chunk(chunk)


def pending_dp_chunks(cfg: ShadowConfig, norm: str, dp: DPConfig, norm_dir: str | Path,
                      progress: bool = False) -> list[DPShadowChunk]:
    """The unfinished DP chunks of ``norm`` (records or checks the DP identity first).

    Raises:
        BnmemError: BN norm, or another configuration lives in ``norm_dir``.
    """
    check_dp_norm(norm)
    norm_dir = prepare_norm_dir(cfg, norm, norm_dir)
    prepare_run_dir(norm_dir, {"dp": dp.model_dump(mode="json"), "trainer": "opacus dp-sgd"}, name=DP_IDENTITY)
    return [DPShadowChunk.of(cfg, norm, norm_dir, c, progress, dp=dp)
            for c in cfg.chunks() if not io.is_done(chunk_dir(norm_dir, c))]


def train_dp_shadow_models(cfg: ShadowConfig, norm: str, dp: DPConfig, norm_dir: str | Path, executor: Executor,
                           progress: bool = False) -> list[dict[str, Any]]:
    """Train (or finish) the M DP shadow models of ``norm`` into ``norm_dir`` through ``executor``."""
    chunks = pending_dp_chunks(cfg, norm, dp, norm_dir, progress)
    if not chunks:
        return []
    return executor.map(train_dp_shadow_chunk, chunks, desc=f"dp {norm} shadow chunks",
                        resources={"num_cpus": cfg.train.threads})


def dp_accounting(cfg: ShadowConfig, norm_dir: str | Path) -> list[dict[str, Any]]:
    """Every DP shadow model's accounting record, in model order (from the chunks' markers)."""
    out = []
    for c in cfg.chunks():
        out.extend(io.read_json(chunk_dir(norm_dir, c) / io.DONE)["accounting"])
    return out
