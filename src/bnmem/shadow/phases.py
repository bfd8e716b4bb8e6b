"""Shadow-model work as executor jobs a study can submit for every cell at once.

A study with several cells would otherwise run one cell's lens after the
other, so a cluster only ever sees one cell's shadow-model chunks in flight.
Instead it asks each cell's lens for its pending jobs, phase by phase
(every cell's training chunks, then every cell's query chunks), maps each
phase over the executor in one go, and then runs the lens itself, which finds
its chunks finished and only evaluates the attacks and draws its figure (in
the driver). The jobs are the very functions the lens runs on its own, so the
results are byte-identical either way. The lira lens registers
:func:`phase_jobs` and :func:`estimate` as its ``phase_jobs`` and ``estimate``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from bnmem import io
from bnmem.data import load_dataset
from bnmem.shadow.config import ShadowConfig
from bnmem.shadow.query import QUERY_DIR, QUERY_FILE, query_settings, query_shadow_chunk
from bnmem.shadow.recipe import norm_configs
from bnmem.shadow.training import chunk_name, chunk_spec, pending_specs, train_shadow_chunk

PHASES = ("train", "query")


def phase_jobs(cfg: ShadowConfig, out: Path, phase: str) -> tuple[Callable[[dict[str, Any]], dict[str, Any]],
                                                                list[dict[str, Any]]]:
    """The job function and the specs of ``phase`` that are not finished yet.

    Args:
        cfg: the lens's config.
        out: its run directory (``<out>/<norm>/`` holds each norm's shadow models).
        phase: ``train`` (shadow-model chunks) or ``query`` (query chunks; run after training).

    Returns:
        ``(job function, specs)``.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown shadow-model phase {phase!r}")
    ds = load_dataset(cfg.data)
    # Each norm's own recipe (recipe: per-norm selects it first, cached), as the lens trains it.
    cfgs, _ = norm_configs(cfg, ds, Path(out))
    if phase == "train":
        return train_shadow_chunk, [s for norm in cfg.norms for s in pending_specs(cfgs[norm], norm, Path(out) / norm)]
    specs = []
    for norm in cfg.norms:
        settings = query_settings(cfgs[norm], ds)
        final = Path(out) / norm / QUERY_FILE
        if final.exists() and io.read_json(final).get("settings") == settings:
            continue
        for c in cfg.chunks():
            marker = Path(out) / norm / QUERY_DIR / f"{chunk_name(c)}.json"
            if not (marker.exists() and io.read_json(marker).get("settings") == settings):
                specs.append(chunk_spec(cfgs[norm], norm, Path(out) / norm, c))
    return query_shadow_chunk, specs


def estimate(cfg: ShadowConfig, n_train: int, parameter_count: Callable[[str, str, str], int]) -> dict[str, int]:
    """Bytes the lens writes: M float32 shadow models per norm, and per norm the attack statistic φ of every
    candidate and of RMIA's population (the test split), [M, N, V] float32 each, stored with its float32
    rounding residual (``phi.npy`` + ``phi_lo.npy``); full logits (``save_logits``) add C times that. The
    predicted classes (``pred.npy``, int16 [M, N, V]) and the memorization scores (``mem_scores.npz``: two
    float64 [M, N] leave-one-model-out arrays and per-example vectors, before compression) count too."""
    from bnmem.data import DATASETS, model_shape

    shape, classes = model_shape(cfg.data)
    views = len(cfg.query_views(shape))
    m = cfg.shadow_models
    per_norm = 2 * 4 * m * views * (n_train + DATASETS[cfg.data.dataset].n_test)
    per_norm += 2 * m * views * n_train + 2 * 8 * m * n_train + 16 * 8 * n_train
    if cfg.save_logits:
        per_norm += 4 * m * views * n_train * classes
    return {"models": sum(4 * m * parameter_count(cfg.arch, cfg.data.dataset, n) for n in cfg.norms),
            "attack inputs": len(cfg.norms) * per_norm}
