"""Shadow-model work as executor jobs a study can submit for every cell at once.

A study with several cells would otherwise run one cell's lens after the
other, so a cluster only ever sees one cell's shadow-model chunks in flight.
Instead it asks each cell's lens for its pending jobs, phase by phase
(every per-norm cell's recipe selection, then every cell's training chunks,
then every cell's query chunks; asking never trains), maps each
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
from bnmem.train.recipe import RECIPE_FILE

PHASES = ("recipe", "train", "query")


def select_recipe_job(spec: dict[str, Any]) -> dict[str, Any]:
    """Executor job: select each norm's recipe of a ``recipe: per-norm`` cell (cached in ``<run_dir>/recipe``),
    as the lens would before training (:func:`~bnmem.shadow.recipe.norm_configs`)."""
    cfg = ShadowConfig.model_validate(spec["config"])
    _, selection = norm_configs(cfg, load_dataset(cfg.data), Path(spec["run_dir"]))
    return {"per_norm": {n: s["lr"] for n, s in selection["per_norm"].items()}}


def _selected(cfg: ShadowConfig, out: Path) -> bool:
    """Whether a per-norm cell's recipe has been selected (its cache holds every norm)."""
    cached = out / "recipe" / RECIPE_FILE
    return cached.exists() and set(io.read_json(cached).get("per_norm", {})) >= set(cfg.norms)


def phase_jobs(cfg: ShadowConfig, out: Path, phase: str) -> tuple[Callable[[dict[str, Any]], dict[str, Any]],
                                                                list[dict[str, Any]]]:
    """The job function and the specs of ``phase`` that are not finished yet. Asking never trains anything.

    Args:
        cfg: the lens's config.
        out: its run directory (``<out>/<norm>/`` holds each norm's shadow models).
        phase: ``recipe`` (a per-norm cell's recipe selection), ``train`` (shadow-model chunks; a per-norm
            cell only once its recipe is selected) or ``query`` (query chunks; run after training).

    Returns:
        ``(job function, specs)``.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown shadow-model phase {phase!r}")
    out, per_norm = Path(out), cfg.recipe == "per-norm"
    if phase == "recipe":
        wanted = per_norm and not _selected(cfg, out)
        return select_recipe_job, [{"config": cfg.model_dump(mode="json", include=set(ShadowConfig.model_fields)),
                                    "run_dir": str(out.resolve())}] if wanted else []
    if per_norm and not _selected(cfg, out):
        return (train_shadow_chunk if phase == "train" else query_shadow_chunk), []  # the lens selects first
    # Each norm's own recipe (per-norm: read from the selection's cache; only then is the data loaded).
    cfgs = norm_configs(cfg, load_dataset(cfg.data), out)[0] if per_norm else {n: cfg for n in cfg.norms}
    if phase == "train":
        return train_shadow_chunk, [s for norm in cfg.norms for s in pending_specs(cfgs[norm], norm, out / norm)]
    specs = []
    for norm in cfg.norms:
        settings = query_settings(cfgs[norm])  # the input shape from the config: no data loaded
        final = out / norm / QUERY_FILE
        if final.exists() and io.read_json(final).get("settings") == settings:
            continue
        for c in cfg.chunks():
            marker = out / norm / QUERY_DIR / f"{chunk_name(c)}.json"
            if not (marker.exists() and io.read_json(marker).get("settings") == settings):
                specs.append(chunk_spec(cfgs[norm], norm, out / norm, c))
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
