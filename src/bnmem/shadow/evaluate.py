"""Attacking the shadow models of one norm: every attack leave-one-out over what the query wrote.

:func:`run_shadow_norm` is the one-call path (train, query, attack) for a lens
that needs one recipe's membership numbers, e.g. a BN + γ/σ-regularizer recipe
next to the lira lens's norms; :func:`attack_norm` reruns only the attacks on a
queried directory (e.g. on a subset of the views).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bnmem.attacks import evaluate_stream
from bnmem.attacks.phi import ViewSubset
from bnmem.data import OutlierDataset
from bnmem.executors import Executor
from bnmem.executors.local import LocalExecutor
from bnmem.shadow.config import ShadowConfig
from bnmem.shadow.memscores import mem_summary, norm_mem_scores
from bnmem.shadow.query import POPULATION_NAME, load_attack_inputs, query_models
from bnmem.shadow.training import train_shadow_models


def attack_norm(norm_dir: str | Path, attacks: Sequence[str] | None = None, views: Sequence[int] | None = None
                ) -> dict[str, Any]:
    """Every attack, leave-one-out over the shadow models saved in ``norm_dir``.

    Args:
        norm_dir: a directory :func:`~bnmem.shadow.query.query_models` filled.
        attacks: attack names (None: every default attack of :mod:`bnmem.attacks.spec`).
        views: indices of the query views to use (default: all).

    Returns:
        :func:`bnmem.attacks.evaluate_stream`'s result with subsets ``all``,
        ``outliers`` (noisy or OOD) and ``inliers``; RMIA's population is the
        test split (the legacy one, the target's non-members, for run
        directories queried before populations were).

    Raises:
        BnmemError: no finished query in ``norm_dir``.
    """
    arrays = load_attack_inputs(norm_dir)
    outliers = arrays["is_noisy"] | arrays["is_ood"]
    pop = arrays["population_phi"]
    name = None if pop is None else f"{POPULATION_NAME} (n={pop.shape[1]}; no model trained on it)"
    phi = arrays["phi"]
    if views is not None:
        phi, pop = ViewSubset(phi, views), None if pop is None else ViewSubset(pop, views)
    return evaluate_stream(phi, arrays["keep"], subsets={"outliers": outliers, "inliers": ~outliers},
                           attacks=attacks, population_phi=pop, population_name=name or "")


def accuracy_summary(per_model: dict[str, list[float | None]]) -> dict[str, Any]:
    """Mean/min/max over models of each per-model accuracy (None entries skipped).

    Args:
        per_model: name -> one value per model (e.g. ``train_in``, ``test``).

    Returns:
        name -> ``{"mean", "min", "max", "per_model"}`` (None when no value).
    """
    out: dict[str, Any] = {}
    for key, values in per_model.items():
        ok = np.array([v for v in values if v is not None], dtype=np.float64)
        stats = (float(ok.mean()), float(ok.min()), float(ok.max())) if ok.size else (None, None, None)
        out[key] = {"mean": stats[0], "min": stats[1], "max": stats[2], "per_model": values}
    return out


def query_and_attack(cfg: ShadowConfig, norm: str, norm_dir: str | Path, executor: Executor,
                     ds: OutlierDataset | None = None, attacks: Sequence[str] | None = None) -> dict[str, Any]:
    """Query the trained shadow models of ``norm`` (resumable) and run the attacks; one norm's entry.

    Returns:
        ``{"attacks": {attack: {subset: summary}}, "memorization": {variant: {subset: summary}},
        "accuracy": ..., "query": settings, "curves": ..., "subset_sizes": ..., "attack_settings": ...}``.
    """
    info = query_models(cfg, norm, norm_dir, executor, ds=ds)
    res = attack_norm(norm_dir, attacks=attacks)
    mem = norm_mem_scores(norm_dir)  # Feldman–Zhang scores from the same models (mem_scores.npz)
    return {
        "attacks": res["metrics"],
        "memorization": mem_summary(mem),
        "accuracy": accuracy_summary(info["accuracy"]),
        "query": info["settings"],
        "curves": res["curves"],
        "subset_sizes": res["subset_sizes"],
        "attack_settings": res["settings"],
    }


def run_shadow_norm(cfg: ShadowConfig, norm: str, norm_dir: str | Path, executor: Executor | None = None,
                    progress: bool = False) -> dict[str, Any]:
    """Train, query and attack the shadow models of one norm (resumable).

    The entry point for other experiments (e.g. a BN + γ/σ-regularizer recipe:
    set ``cfg.train.gs_reg``); with the same ``cfg`` seeds and keep seed, its
    targets pair with those of the lira lens's norms.

    Args:
        cfg: the configuration (``cfg.norms`` is not consulted).
        norm: the norm to train.
        norm_dir: its directory.
        executor: where jobs run (default: in-process).
        progress: progress bars.

    Returns:
        :func:`query_and_attack`'s entry.
    """
    executor = executor or LocalExecutor(progress=progress)
    train_shadow_models(cfg, norm, norm_dir, executor, progress=progress)
    return query_and_attack(cfg, norm, Path(norm_dir), executor)
