"""One cell's shadow-model work, built once: a :class:`ShadowWork` and the tasks it gives a job graph.

A study's lira cell is a chain of work: a per-norm cell's recipe selection, then every norm's training
chunks, then their query chunks, then the lens itself (the attacks and figures over what the chunks
wrote). :class:`ShadowWork` holds the cell's validated config once (every chunk job receives the typed
config, never a dict to validate again), resolves each norm's recipe (from the selection's cache: the
driver loads no data to list jobs), lists what is pending from what is on disk (asking never trains), and
gives these as bound :class:`~bnmem.executors.graph.Task` s to the job graph every executor runs
(:meth:`ShadowWork.tasks`). Its jobs get the dataset through :meth:`ShadowWork.dataset`: loaded once per
process (:func:`bnmem.data.loaded.load_once`) and shared by every job of the cell that process runs.

The jobs are the very functions the lens runs on its own (:func:`~bnmem.shadow.training.train_shadow_chunk`,
:func:`~bnmem.shadow.query.query_shadow_chunk`), so the results are byte-identical either way. The lira lens's
cell work (:class:`bnmem.lenses.lira.run.LiraWork`) gives these tasks to the study's graph and declares
:func:`estimate`'s bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bnmem import io
from bnmem.allocator import keep_freed_memory
from bnmem.data import OutlierDataset
from bnmem.data.loaded import load_once
from bnmem.executors.graph import Task
from bnmem.shadow.config import ShadowConfig
from bnmem.shadow.query import QUERY_DIR, QUERY_FILE, query_settings, query_shadow_chunk
from bnmem.shadow.recipe import norm_configs, selected_configs
from bnmem.shadow.training import ShadowChunk, chunk_name, pending_chunks, train_shadow_chunk

# The tasks of a cell, in order (each needs the one before), and the share of the cell's estimated seconds
# each takes (what matters is only the order: a chain's rank is the sum of its parts); the lens job after
# them takes the rest. Only a per-norm cell selects a recipe.
PHASES = ("recipe", "train", "query")
PHASE_SHARE = {"recipe": 0.25, "train": 0.5, "query": 0.1}
LENS_SHARE_AFTER_PHASES = 0.15


def phase_task_id(job_id: str, phase: str) -> str:
    """The graph id of one phase of a lens job."""
    return f"{job_id}#{phase}"


@dataclass(frozen=True, eq=False)
class ShadowWork:
    """A lira cell's shadow-model work: its config (validated once), folder, recipes, chunks and queries.

    Attributes:
        cfg: the lens's config; every job receives it (or a norm's copy with its recipe) typed.
        out: the lens's run directory (``<out>/<norm>/`` holds each norm's shadow models).
    """

    cfg: ShadowConfig
    out: Path
    train: Callable[[ShadowChunk], dict[str, Any]] | None = None  # the training job (default: train_chunk_job)

    @classmethod
    def of(cls, cfg: ShadowConfig, out: str | Path,
           train: Callable[[ShadowChunk], dict[str, Any]] | None = None) -> "ShadowWork":
        """The work of ``cfg`` in ``out``; ``train`` replaces the training job (a module-level function: the
        work travels to workers), e.g. the lira lens's job that also queries after every epoch."""
        return cls(cfg, Path(out).resolve(), train)

    def dataset(self) -> OutlierDataset:
        """The cell's dataset, loaded at most once in this process (:func:`bnmem.data.loaded.load_once`)."""
        return load_once(self.cfg.data)

    def norm_configs(self) -> dict[str, ShadowConfig] | None:
        """Each norm's config with its recipe resolved; None while a per-norm cell's recipe is not selected.
        Reads the selection's cache: no data is loaded."""
        return selected_configs(self.cfg, self.out)

    def recipe_specs(self) -> list["ShadowWork"]:
        """The recipe selection (its job's spec is this work), when a per-norm cell has not selected yet (else
        nothing)."""
        return [self] if self.norm_configs() is None else []

    def train_specs(self) -> list[ShadowChunk]:
        """The unfinished training chunks of every norm (none before a per-norm cell's recipe is selected:
        the lens then selects and trains itself)."""
        cfgs = self.norm_configs()
        if cfgs is None:
            return []
        return [c for norm in self.cfg.norms for c in pending_chunks(cfgs[norm], norm, self.out / norm)]

    def query_specs(self) -> list[ShadowChunk]:
        """The query chunks not finished with the current settings (a norm whose assembled query has them:
        none)."""
        cfgs = self.norm_configs()
        if cfgs is None:
            return []
        chunks = []
        for norm in self.cfg.norms:
            settings = query_settings(cfgs[norm])  # the input shape from the config: no data loaded
            final = self.out / norm / QUERY_FILE
            if final.exists() and io.read_json(final).get("settings") == settings:
                continue
            for c in self.cfg.chunks():
                marker = self.out / norm / QUERY_DIR / f"{chunk_name(c)}.json"
                if not (marker.exists() and io.read_json(marker).get("settings") == settings):
                    chunks.append(ShadowChunk.of(cfgs[norm], norm, self.out / norm, c))
        return chunks

    def tasks(self, job_id: str, cost: float) -> list[Task]:
        """The cell's recipe, training and query tasks for a job graph, each listed when it is ready (in the
        driver) and needing the one before; ``cost`` is the whole lens job's estimated seconds."""
        listings: dict[str, tuple[Callable[[Any], dict[str, Any]], Callable[[], list]]] = {
            "recipe": (select_recipe_job, self.recipe_specs),
            "train": (self.train or train_chunk_job, self.train_specs),
            "query": (query_chunk_job, self.query_specs),
        }
        tasks, prev = [], None
        for phase in PHASES:
            # only a per-norm cell that selects its own recipe (not a study's per-setting selection) pays for one
            selects = self.cfg.recipe == "per-norm" and not self.cfg.recipe_from
            share = PHASE_SHARE[phase] if phase != "recipe" or selects else 0.0
            fn, specs = listings[phase]
            tid = phase_task_id(job_id, phase)
            tasks.append(Task(tid, fn, specs, deps=(prev,) if prev else (), cost=share * cost))
            prev = tid
        return tasks


# The work's jobs: a study job sets the process's malloc thresholds first (bnmem.allocator), whichever process
# runs it; then the engine's own job function.


def select_recipe_job(work: ShadowWork) -> dict[str, Any]:
    """Job: select each norm's recipe of a ``recipe: per-norm`` cell (cached in ``<out>/recipe``), as the lens
    would before training (:func:`~bnmem.shadow.recipe.norm_configs`)."""
    keep_freed_memory()
    _, selection = norm_configs(work.cfg, work.dataset(), work.out)
    return {"per_norm": {n: s["lr"] for n, s in selection["per_norm"].items()}}


def train_chunk_job(chunk: ShadowChunk) -> dict[str, Any]:
    """Job: :func:`~bnmem.shadow.training.train_shadow_chunk` in a study."""
    keep_freed_memory()
    return train_shadow_chunk(chunk)


def query_chunk_job(chunk: ShadowChunk) -> dict[str, Any]:
    """Job: :func:`~bnmem.shadow.query.query_shadow_chunk` in a study."""
    keep_freed_memory()
    return query_shadow_chunk(chunk)


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
