"""The one "train every (norm, seed), resume what is done" loop that the lenses share.

memorize, gradnorms, gamma-sigma and mitigate all train each (norm, seed) on
the full corrupted training set with identical data, initial weights and batch
order, into ``<out>/<folder>/seed<k>``; they differ in the per-epoch hook that
measures something on the side. A finished run (its ``DONE`` marker) is read
back instead of retrained, so an interrupted lens resumes where it stopped,
and a study can hand a lens runs it trained once for several lenses
(:mod:`bnmem.study.share`).
"""

from __future__ import annotations

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

    model = seeded_model(model_cfg, ds, seed)
    on_epoch = make_hook() if make_hook is not None else None
    return train_model(model, ds, train, seed, run_dir=job, on_epoch=on_epoch, progress=progress).history


def train_runs(cfg: ExperimentConfig, ds: OutlierDataset, out: Path, hook: HookFactory | None = None,
               norms: Sequence[str] | None = None, progress: bool = True) -> dict[str, dict[int, list[dict]]]:
    """Train (or resume) every (norm, seed) of ``cfg`` into ``out/<norm>/seed<k>``.

    Args:
        cfg: the lens's config (data, arch, norms, seeds, recipe).
        ds: the loaded dataset.
        out: the lens's run directory.
        hook: the lens's per-epoch measurement factory, called as ``hook(cfg, ds, job, seed)``.
        norms: a subset of ``cfg.norms`` (default: all).
        progress: per-run progress bars.

    Returns:
        norm -> seed -> per-epoch history.
    """
    histories: dict[str, dict[int, list[dict]]] = {}
    for norm in norms or cfg.norms:
        histories[norm] = {}
        for seed in cfg.seeds:
            job = run_folder(out, norm, seed)
            make_hook = None if hook is None else (lambda job=job, seed=seed: hook(cfg, ds, job, seed))
            histories[norm][seed] = train_run(cfg.model(norm), ds, cfg.train, seed, job, make_hook,
                                              progress=f"{norm} seed {seed}" if progress else False)
    return histories
