"""Train once, serve several lenses: the (norm, seed) runs memorize, gradnorms, gamma-sigma and mitigate share.

``bnmem memorize``, ``bnmem gradnorms``, ``bnmem gamma-sigma`` and the
unregularized variants of ``bnmem mitigate`` each train every (norm, seed) on the full corrupted training set with the same trainer,
data, initial weights and batch order; they differ only in what their
per-epoch hook measures (gradient norms, γ/σ) on the side, and the hooks leave
the model untouched (they measure a float64 copy, or forward in eval/batch mode
with running statistics frozen). So when a cell's lenses share data,
architecture and recipe, a study trains each such run once with all their hooks
together: one job per (cell, norm) trains that norm's seeds together as one
grouped network (:func:`bnmem.lenses.runs.train_fresh_together`, as each lens
trains its own runs), into ``<cell>/_shared/<norm>/seed<k>``, then gives each
lens its ``<norm>/seed<k>`` folder exactly as the lens would have written it
(the model, the history with only that lens's measurements, the DONE marker
last). The lens's own runner then finds the run finished and only summarizes.
The results are byte-identical to running each lens on its own
(tests/test_study.py checks it). A seed whose every lens already has its run is
not trained again; an interrupted job retrains its unfinished seeds.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bnmem import io
from bnmem.lenses import registry
from bnmem.lenses.registry import Training

SHARED_DIR = "_shared"
SHARED = "shared-training"
# What fixes a (norm, seed) run besides the norm and the seed.
TRAINING_KEYS = ("data", "arch", "train")


def identity(config: Any) -> str:
    """Canonical text of what determines a lens's training runs (``config``: its validated config)."""
    return json.dumps(config.model_dump(mode="json", include=set(TRAINING_KEYS)), sort_keys=True)


@dataclass(frozen=True)
class Target:
    """A lens a shared training job serves: its name, validated config, folder and the seeds it takes."""

    lens: str
    cfg: Any
    folder: Path
    seeds: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class SharedTraining:
    """One cell's shared runs of one norm: the (norm, seed) runs two or more lenses would train identically,
    trained once with every lens's hook (:class:`~bnmem.lenses.registry.CellWork`).

    Attributes:
        out: the scratch training folder (``<cell>/_shared/<norm>``).
        norm: the norm.
        seeds: the seeds two or more lenses take.
        trains: the data, architecture and recipe every target trains with.
        targets: the lenses it serves (folders relative to the run directory until :meth:`at` binds them).
    """

    out: Path
    norm: str
    seeds: tuple[int, ...]
    trains: Training
    targets: tuple[Target, ...]
    kind = SHARED
    lens_share = 1.0
    step_factor = 1.5  # the targets' hooks on the side (a pilot run calibrates it)
    fixed_seconds = 0.0
    marked = False  # it leaves no folder: its runs end in the lenses' folders

    def at(self, root: Path) -> "SharedTraining":
        return dataclasses.replace(self, out=Path(root) / self.out,
                                   targets=tuple(dataclasses.replace(t, folder=Path(root) / t.folder)
                                                 for t in self.targets))

    def dataset(self) -> Any:
        from bnmem.data.loaded import load_once

        return load_once(self.trains.data)

    def training(self) -> Training:
        return self.trains

    def models(self) -> float:
        return float(len(self.seeds))

    def bytes(self, n_train: int, parameter_count: Callable[[str, str, str], int]) -> dict[str, int]:
        return {}  # its models end in each lens's folder and are counted there

    def tasks(self, job_id: str, cost: float) -> list[Any]:
        return []

    def writes_into(self) -> tuple[Path, ...]:
        return tuple(t.folder for t in self.targets)

    def pending(self, seed: int) -> list[Target]:
        """The targets that take ``seed`` and have no finished copy of it yet."""
        rel = f"{self.norm}/seed{seed}"
        return [t for t in self.targets if seed in t.seeds and not io.is_done(t.folder / rel)]

    def finished(self) -> bool:
        """Every target lens has its copy of every seed it takes."""
        return not any(self.pending(s) for s in self.seeds)

    def seconds_taken(self) -> float | None:
        """The seconds its runs recorded: the sum over seeds of its first target's copies' DONE markers."""
        t = self.targets[0]
        return io.done_seconds_total(t.folder / self.norm / f"seed{s}" for s in t.seeds)

    def task_seconds(self) -> float | None:
        return 0.0  # it gives the graph no tasks

    def run(self, progress: bool = False, executor: Any = None) -> None:
        run_shared_training(self, progress)

    def tidy(self) -> None:
        """Its lenses trained the runs themselves after it failed: drop the leftovers."""
        if self.out.exists():
            shutil.rmtree(self.out, ignore_errors=True)
            remove_empty(self.out, levels=2)

    def in_driver(self) -> bool:
        return False


def remove_empty(path: Path, levels: int) -> None:
    """Remove ``path`` and its parents, ``levels`` folders in all, while they are empty."""
    for p in [path, *path.parents][:levels]:
        if not p.exists():
            continue
        try:
            p.rmdir()
        except OSError:  # not empty: something else lives there
            return


def shared_runs(cell_id: str, configs: dict[str, Any]) -> list[SharedTraining]:
    """The runs of one cell that two or more lenses would train identically, one job per norm.

    Args:
        cell_id: the cell (folders are relative to the run directory).
        configs: lens name -> validated lens config.

    Returns:
        One :class:`SharedTraining` per (training, norm) with the seeds two or more lenses take, serving each
        lens that takes one of them.
    """
    groups: dict[str, list[str]] = {}
    for lens, cfg in configs.items():
        if registry.get(lens).trains_runs:
            groups.setdefault(identity(cfg), []).append(lens)
    runs = []
    for lenses in groups.values():
        if len(lenses) < 2:
            continue
        first = configs[lenses[0]]
        norms = dict.fromkeys(n for lens in lenses for n in configs[lens].norms)
        for norm in norms:
            takers = [lens for lens in lenses if norm in configs[lens].norms]
            seeds = [s for s in dict.fromkeys(s for lens in takers for s in configs[lens].seeds)
                     if sum(s in configs[lens].seeds for lens in takers) >= 2]
            if not seeds:
                continue
            targets = [Target(lens, configs[lens], Path(f"{cell_id}/{lens}"),
                              tuple(s for s in seeds if s in configs[lens].seeds)) for lens in takers]
            runs.append(SharedTraining(out=Path(f"{cell_id}/{SHARED_DIR}/{norm}"), norm=norm, seeds=tuple(seeds),
                                       trains=Training(first.data, first.arch, first.train),
                                       targets=tuple(t for t in targets if t.seeds)))
    return runs


# The shared run's history keeps each lens's hook output under its own key
# (two lenses may both fill "gamma_sigma", with different contents).
HOOK_PREFIX = "hook:"


def lens_history(history: list[dict[str, Any]], lens: str) -> list[dict[str, Any]]:
    """The history lens ``lens`` would have written: the trainer's keys, then its own hook's."""
    own = HOOK_PREFIX + lens
    return [{**{k: v for k, v in rec.items() if not k.startswith(HOOK_PREFIX)}, **rec.get(own, {})}
            for rec in history]


def give_run(scratch: Path, dst: Path, lens: str, history: list[dict[str, Any]]) -> None:
    """Write a lens's finished ``<norm>/seed<k>`` folder from the shared run, DONE last.

    Args:
        scratch: the finished shared training folder (model.pt, history.json, DONE).
        dst: the lens's run folder.
        lens: the lens it is for.
        history: the scratch run's history (``history.json``, every hook's record), read once for all lenses.
    """
    io.write_bytes(dst / "model.pt", (scratch / "model.pt").read_bytes())
    io.write_json(dst / "history.json", lens_history(history, lens))
    io.write_bytes(dst / io.DONE, (scratch / io.DONE).read_bytes())


def _seed_hook(job: SharedTraining, ds: Any, seed: int) -> Any:
    """One per-epoch hook calling every target lens's hook for ``seed`` (each output under its lens's key)."""
    hooks = {}
    for t in job.targets:
        lens = registry.get(t.lens)
        if lens.hook is not None and seed in t.seeds:
            hook = lens.hook(t.cfg, ds, t.folder / f"{job.norm}/seed{seed}", seed)
            if hook is not None:
                hooks[lens.name] = hook

    def on_epoch(epoch: int, model: Any) -> dict | None:
        record = {HOOK_PREFIX + lens: r for lens, hook in hooks.items() if (r := hook(epoch, model))}
        return record or None

    return on_epoch


def run_shared_training(job: SharedTraining, progress: bool = False) -> None:
    """Train one cell's shared runs of one norm with every target lens's hook, seeds together, then hand them out
    (``job``'s folders absolute: :meth:`SharedTraining.at`)."""
    from bnmem.config import ModelConfig
    from bnmem.lenses.runs import PendingRun, train_fresh_together, train_run

    norm, scratch = job.norm, job.out
    seeds = [int(s) for s in job.seeds if job.pending(int(s))]
    if seeds:
        ds = job.dataset()
        model_cfg = ModelConfig(arch=job.trains.arch, norm=norm)
        train = job.trains.train
        runs = [PendingRun(s, train, scratch / f"seed{s}", lambda s=s: _seed_hook(job, ds, s)) for s in seeds]
        fresh = train_fresh_together(model_cfg, ds, runs,
                                     progress=f"{norm} seeds {seeds} (shared)" if progress else False)
        together = {r.seed for r in fresh}
        for r in runs:  # one by one what the engine does not take or resumes (a finished one is read back)
            if r.seed not in together:
                train_run(model_cfg, ds, train, r.seed, r.job, r.make_hook,
                          progress=f"{norm} seed {r.seed} (shared)" if progress else False)
    for s in seeds:
        history = io.read_json(scratch / f"seed{s}" / "history.json")  # every hook's record: read once, not per lens
        for t in job.pending(s):
            give_run(scratch / f"seed{s}", t.folder / f"{norm}/seed{s}", t.lens, history)
    # Every lens has its copy now; the scratch runs are only duplicates (their empty parents too).
    shutil.rmtree(scratch, ignore_errors=True)
    remove_empty(scratch, levels=2)
