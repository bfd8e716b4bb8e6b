"""The one "train every (norm, seed), resume what is done" loop that the lenses share.

memorize, gradnorms, gamma-sigma and mitigate all train each (norm, seed) on
the full corrupted training set with identical data, initial weights and batch
order, into ``<out>/<folder>/seed<k>``; they differ in the per-epoch hook that
measures something on the side. A finished run (its ``DONE`` marker) is read
back instead of retrained, so an interrupted lens resumes where it stopped,
and a study can hand a lens runs it trained once for several lenses
(:mod:`bnmem.study.share`).

The runs of one norm and recipe that are not trained yet train together as one
grouped network (:func:`bnmem.train.ensemble_runs.train_runs_together`, with
each run's hook called on that run's model after every epoch) when the engine
takes the architecture; otherwise, and for a run left with a checkpoint by the
one-by-one trainer, one by one. A run's result does not depend on which other
runs it trains beside, so a resumed lens ends where an uninterrupted one does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from bnmem import io
from bnmem.config import ExperimentConfig, ModelConfig, TrainConfig
from bnmem.data.dataset import OutlierDataset
from bnmem.lenses.registry import HookFactory


def run_folder(out: Path, name: str, seed: int) -> Path:
    """Where the run of ``name`` (a norm or a mitigate variant) with ``seed`` lives."""
    return out / name / f"seed{seed}"


def train_run(model_cfg: ModelConfig, ds: OutlierDataset, train: TrainConfig, seed: int, job: Path,
              make_hook: Callable[[], Callable | None] | None = None,
              progress: bool | str = False) -> list[dict[str, Any]]:
    """Train one (model, seed) into ``job``, or read it back when finished; return its history.

    Args:
        make_hook: builds the per-epoch hook (only called when training is needed).
    """
    if io.is_done(job):
        return io.read_json(job / "history.json")
    from bnmem.train.trainer import seeded_model, train_model

    model = seeded_model(model_cfg, ds, seed).to(ds.x_train.dtype)  # float64 data: float64 model (as together)
    on_epoch = make_hook() if make_hook is not None else None
    return train_model(model, ds, train, seed, run_dir=job, on_epoch=on_epoch, progress=progress).history


@dataclass(frozen=True)
class PendingRun:
    """One run to train: its model seed, its recipe, its folder and its hook factory (None: no hook)."""

    seed: int
    train: TrainConfig
    job: Path
    make_hook: Callable[[], Callable | None] | None = None


def is_fresh(job: Path) -> bool:
    """Neither finished nor left with a one-by-one checkpoint (such a run resumes from it instead)."""
    from bnmem.train.trainer import CHECKPOINT

    return not io.is_done(job) and not (job / CHECKPOINT).exists()


def train_fresh_together(model_cfg: ModelConfig, ds: OutlierDataset, runs: Sequence[PendingRun],
                         progress: bool | str = False) -> list[PendingRun]:
    """Train the fresh runs among ``runs`` (one norm; recipes differing at most in the γ/σ regularizer) together.

    Returns:
        The runs trained here (none when the grouped engine does not take the architecture: the caller's
        :func:`train_run` then trains every run one by one).
    """
    from bnmem.train.ensemble_runs import can_train_together, train_runs_together

    fresh = [r for r in runs if is_fresh(r.job)]
    if not fresh or not can_train_together(model_cfg, ds, device=fresh[0].train.device):
        return []
    hooks = [r.make_hook() if r.make_hook is not None else None for r in fresh]
    desc = progress if isinstance(progress, str) else f"{model_cfg.norm}: {len(fresh)} runs together"
    train_runs_together(model_cfg, ds, [r.train for r in fresh], [r.seed for r in fresh], [r.job for r in fresh],
                        hooks, progress=desc if progress else False)
    return fresh


def train_runs(cfg: ExperimentConfig, ds: OutlierDataset, out: Path, hook: HookFactory | None = None,
               norms: Sequence[str] | None = None, progress: bool = True) -> dict[str, dict[int, list[dict]]]:
    """Train (or resume) every (norm, seed) of ``cfg`` into ``out/<norm>/seed<k>``, each norm's seeds together.

    Args:
        cfg: the lens's config (data, arch, norms, seeds, recipe).
        ds: the loaded dataset.
        out: the lens's run directory.
        hook: the lens's per-epoch measurement factory, called as ``hook(cfg, ds, job, seed)``.
        norms: a subset of ``cfg.norms`` (default: all).
        progress: progress bars.

    Returns:
        norm -> seed -> per-epoch history.
    """
    histories: dict[str, dict[int, list[dict]]] = {}
    for norm in norms or cfg.norms:
        runs = [PendingRun(seed, cfg.train, run_folder(out, norm, seed),
                           None if hook is None else (lambda job=run_folder(out, norm, seed), seed=seed:
                                                      hook(cfg, ds, job, seed)))
                for seed in cfg.seeds]
        train_fresh_together(cfg.model(norm), ds, runs, progress=f"{norm} seeds {list(cfg.seeds)}" if progress else False)
        histories[norm] = {r.seed: train_run(cfg.model(norm), ds, r.train, r.seed, r.job, r.make_hook,
                                             progress=f"{norm} seed {r.seed}" if progress else False)
                           for r in runs}
    return histories
