"""Shadow copies of a given model: the engine's train → query path for an architecture bnmem does not build.

The lira lens's shadow models come from a name (``cfg.arch``) and train many at
once (:mod:`bnmem.shadow.training`). A practitioner's model (``bnmem audit``)
is an ``nn.Module`` of any class, so its shadow models are *copies*: a deep
copy with every submodule's ``reset_parameters`` (and ``reset_running_stats``)
called under the copy's seed (:func:`fresh_copy`), each trained alone by the
plain trainer (:func:`bnmem.train.train_model`, which takes any module) on its
keep-matrix half. Everything else is the engine's: the keep matrix
(:func:`bnmem.attacks.keep_matrix`, every example IN for exactly half the
copies), the query (:func:`bnmem.shadow.query.query_model`: views, BN mode, φ in
float64 from float32 logits, the test split as RMIA's population) and the
per-model accuracies.

Layout when a folder is given (resumable per copy)::

    <out>/shadow/model_0000/   the trainer's checkpoint, then model.pt, history.json and DONE
    <out>/shadow/inputs.pt     the model and data, for copies trained in executor jobs

Copy m's seed is m (initial weights, data order, augmentation draws).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bnmem import io
from bnmem.config import TrainConfig
from bnmem.data import OutlierDataset, augment
from bnmem.data.views import View, make_views
from bnmem.attacks.phi import phi_from_logits_block
from bnmem.shadow.query import ModelQuery, QueryPlan, device_inputs, query_logits, query_model
from bnmem.formatting import count_text

SHADOW_INPUTS = "inputs.pt"


def fresh_copy(model: nn.Module, seed: int) -> tuple[nn.Module, int, int]:
    """A re-initialized deep copy: every submodule with ``reset_parameters`` is reset under ``seed``.

    Returns:
        The copy (CPU, train mode), the number of parameter tensors reset and the total number.
    """
    m = copy.deepcopy(model).cpu()
    torch.manual_seed(seed)
    reset = set()
    for mod in m.modules():
        if callable(getattr(mod, "reset_parameters", None)):
            mod.reset_parameters()
            reset.update(id(p) for p in mod.parameters(recurse=False))
        if callable(getattr(mod, "reset_running_stats", None)):
            mod.reset_running_stats()
    params = list(m.parameters())
    return m.train(), sum(id(p) in reset for p in params), len(params)


def copy_views(train: TrainConfig, ds: OutlierDataset) -> list[tuple[str, View]]:
    """The query views of copies trained with ``train``: the training augmentation's views (the
    identity alone without augmentation, and for inputs that are not images)."""
    if ds.x_train.ndim == 4:
        return augment.matched_views(augment.spec_of(train, ds.input_shape, ds.name))
    return make_views(["identity"], ())


def copy_dir(out: Path, m: int) -> Path:
    """Where shadow copy ``m`` is trained (resumable: its checkpoint, then ``model.pt`` and ``DONE``)."""
    return Path(out) / "shadow" / f"model_{m:04d}"


def copies_done(out: Path | None, n_models: int) -> int:
    """How many of the ``n_models`` copies in ``out`` have finished training (0 without a folder)."""
    return sum(io.is_done(copy_dir(out, m)) for m in range(n_models)) if out is not None else 0


def train_copy(spec: dict[str, Any]) -> dict[str, Any]:
    """Executor job: train shadow copy ``spec["m"]`` from the architecture and data saved in ``spec["inputs"]``.

    Plain-data spec (paths as strings), so any executor can ship it; the copy is the one
    :func:`query_copies` would train in-process (same seed, keep row and recipe), written
    with the trainer's atomic checkpoints and ``DONE`` marker.
    """
    from bnmem.train import train_model

    run_dir = Path(spec["run_dir"])
    if io.is_done(run_dir):
        return {"m": spec["m"], "skipped": True}
    # The user's own pickled module, saved from the model already loaded (trusted).
    inputs = torch.load(spec["inputs"], weights_only=False)
    train = TrainConfig.model_validate(spec["train"])
    net, _, _ = fresh_copy(inputs["model"], seed=int(spec["m"]))
    train_model(net, inputs["ds"], train, seed=int(spec["m"]), run_dir=run_dir,
                train_idx=np.asarray(spec["train_idx"]), measure=False, progress=False)
    return {"m": spec["m"], "skipped": False}


def train_copies(model: nn.Module, ds: OutlierDataset, keep: np.ndarray, train: TrainConfig, out: Path,
                 executor: Any) -> None:
    """Train every unfinished shadow copy through ``executor`` (one job per copy)."""
    pending = [m for m in range(keep.shape[0]) if not io.is_done(copy_dir(out, m))]
    if not pending:
        return
    inputs = Path(out) / "shadow" / SHADOW_INPUTS
    io.save_torch(inputs, {"model": copy.deepcopy(model).cpu(), "ds": ds})
    specs = [{"m": m, "run_dir": str(copy_dir(out, m)), "inputs": str(inputs), "train": train.model_dump(mode="json"),
              "train_idx": np.flatnonzero(keep[m]).tolist()} for m in pending]
    executor.map(train_copy, specs, desc="shadow copies", resources={"num_cpus": train.threads})


def trained_copy(model: nn.Module, ds: OutlierDataset, keep: np.ndarray, train: TrainConfig, m: int,
                 out: Path | None, progress: bool = False) -> tuple[nn.Module, int, int, float]:
    """Copy ``m``, trained on its keep-matrix half: loaded when its folder says ``DONE``, else trained here.

    Returns:
        The trained copy, :func:`fresh_copy`'s counts of reset / all parameter tensors, and the
        seconds its training loop took (recorded in ``DONE`` for a loaded copy).
    """
    from bnmem.train import load_finished, train_model

    net, n_reset, n_params = fresh_copy(model, seed=m)
    run_dir = None if out is None else copy_dir(out, m)
    if run_dir is not None and io.is_done(run_dir):
        run = load_finished(net, run_dir)
    else:
        run = train_model(net, ds, train, seed=m, run_dir=run_dir, train_idx=np.flatnonzero(keep[m]),
                          measure=False, progress=f"shadow {m}" if progress else False)
    return run.model, n_reset, n_params, run.seconds


@dataclass
class CopyQueries:
    """What the shadow copies answered, stacked over copies (model m first index), for the attacks.

    Attributes:
        views: the query view names.
        phi: φ float64 [M, n_train, n_views]; ``population_phi`` the same on the test split.
        accuracy: per copy, :meth:`~bnmem.shadow.query.ModelQuery.accuracy`.
        pred: predicted class int16 [M, n_train, n_views] (memorization scores); None if not recorded.
        reset: parameter tensors reset by :func:`fresh_copy` and their total (the same for every copy).
        seconds: the copies' training-loop seconds, summed (what :func:`copy_cost` estimates).
        held_out_phi: φ float64 [M, n_held_out, n_views] on ``held_out`` inputs no copy trained on (the target-model
            audit's non-members); None when none were given.
    """

    views: list[str]
    phi: np.ndarray
    population_phi: np.ndarray
    accuracy: list[dict[str, float | None]] = field(default_factory=list)
    reset: tuple[int, int] = (0, 0)
    pred: np.ndarray | None = None
    seconds: float = 0.0
    held_out_phi: np.ndarray | None = None


def query_copies(model: nn.Module, ds: OutlierDataset, keep: np.ndarray, train: TrainConfig,
                 out: Path | None = None, executor: Any = None, progress: bool = False,
                 plan: QueryPlan = QueryPlan(),
                 held_out: tuple[torch.Tensor, torch.Tensor] | None = None) -> CopyQueries:
    """Train (or load) the M = ``keep.shape[0]`` shadow copies of ``model`` and query each on ``ds``.

    Args:
        model: the model whose architecture is copied (a pickled ``nn.Module``, not TorchScript).
        ds: the data; copy m trains on ``np.flatnonzero(keep[m])`` with ``train``.
        keep: the keep matrix [M, n_train].
        train: the copies' recipe (its device is where they train and are queried).
        out: folder for the copies (resumable); None trains them in memory.
        executor: train the unfinished copies through it first (needs ``out``); None trains them here,
            one after another. The copies are the same either way.
        progress: progress bars.
        plan: BN mode at query time (eval by default) and batch-mode batches.
        held_out: ``(x, y)`` of examples no copy trains on, also queried on every copy (the target-model audit).

    Returns:
        The stacked φ, per-copy accuracies and views.
    """
    if executor is not None and out is not None:
        train_copies(model, ds, keep, train, out, executor)
    views = copy_views(train, ds)
    phi, population_phi, accuracy, reset, pred, seconds, held_phi = [], [], [], (0, 0), [], 0.0, []
    inputs = device_inputs(ds, train.device)  # once, not once per copy
    for m in range(keep.shape[0]):
        net, *reset, took = trained_copy(model, ds, keep, train, m, out, progress)
        seconds += took
        q: ModelQuery = query_model(net.to(train.device), ds, views, plan, inputs)
        phi.append(q.phi)  # φ only: a copy's full logits are C times larger
        population_phi.append(q.population_phi)
        pred.append(q.view_pred)
        accuracy.append(q.accuracy(ds, keep[m]))
        if held_out is not None:
            held_phi.append(phi_from_logits_block(query_logits(net, held_out[0], views, plan), held_out[1].numpy()))
    return CopyQueries(views=[name for name, _ in views], phi=np.stack(phi), population_phi=np.stack(population_phi),
                       accuracy=accuracy, reset=(reset[0], reset[1]), pred=np.stack(pred), seconds=seconds,
                       held_out_phi=np.stack(held_phi) if held_out is not None else None)


# Optimizer steps timed for the cost estimate (after one untimed warm-up run of the same length).
COST_PROBE_STEPS = 6
COST_TIMED_RUNS = 3


def copy_cost(model: nn.Module, ds: OutlierDataset, n_models: int, train: TrainConfig,
              done: int = 0) -> dict[str, Any]:
    """What training the shadow copies will take: steps, and a time estimate from a few timed training steps.

    A fresh copy trains one short epoch of :data:`COST_PROBE_STEPS` batches through the very
    trainer the copies use (recipe, regularizer, threads and device included), once to warm up
    and :data:`COST_TIMED_RUNS` times timed; the median training-loop seconds per step times the
    optimizer steps left is the
    estimate (checked against :attr:`CopyQueries.seconds` in ``tests/test_audit_validation.py``).

    Returns:
        ``{"models", "finished", "epochs", "examples_per_model", "steps", "seconds_per_step",
        "estimated_seconds", "parameters", "text"}``.
    """
    from bnmem.train import train_model

    per_model = ds.n_train // 2
    steps_per_epoch = math.ceil(per_model / train.batch_size)
    idx = np.arange(min(COST_PROBE_STEPS * train.batch_size, per_model))
    probe = train.model_copy(update={"epochs": 1})
    timed = []
    for _ in range(1 + COST_TIMED_RUNS):  # the first run pays for allocations and kernel selection
        net, _, _ = fresh_copy(model, seed=0)
        run = train_model(net, ds, probe, seed=0, train_idx=idx, measure=False, progress=False)
        timed.append(run.seconds / math.ceil(idx.size / train.batch_size))
    seconds_per_step = float(np.median(timed[1:]))  # the median: one run slowed by other work does not count
    steps = (n_models - done) * train.epochs * steps_per_epoch
    seconds = steps * seconds_per_step
    n_params = sum(p.numel() for p in model.parameters())
    text = (f"membership: training {n_models - done} of {n_models} shadow copies "
            f"({type(model).__name__}, {count_text(n_params)} parameters) for {train.epochs} epochs on "
            f"{per_model} examples each: {steps} steps of batch {train.batch_size} on {train.device}, "
            f"~{seconds_per_step:.3f} s per step, about {duration_text(seconds)}")
    return {"models": n_models, "finished": done, "epochs": train.epochs, "examples_per_model": per_model,
            "steps": steps, "seconds_per_step": seconds_per_step, "estimated_seconds": seconds,
            "parameters": n_params, "text": text}


def duration_text(seconds: float) -> str:
    """'40 s', '6.8 min', '2.1 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
