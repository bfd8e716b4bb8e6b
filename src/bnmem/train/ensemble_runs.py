"""Several full-data training runs of one LeNet or ResNet at once, with the plain trainer's per-epoch record
and hooks.

:func:`train_runs_together` trains K runs (model seed, recipe, run folder,
per-epoch hook) that share architecture, norm and recipe except the γ/σ
regularizer's λ and τ, as one grouped network (:class:`GroupedLeNet`,
:class:`~bnmem.train.ensemble_grouped_resnet.GroupedResNet`). After
every epoch it writes the trained weights back into K ordinary models and
records for each exactly what :func:`bnmem.train.train_model` records (epoch,
learning rate, mean training loss, the penalty's activity, the eval-mode
subset accuracies, the hook's measurements), then writes each run folder as
the plain trainer finishes it (``model.pt``, ``history.json``, ``DONE``).

Results match training each run alone up to floating-point summation order
inside kernels (float64: 1e-9, ``tests/test_ensemble_runs.py``); they are not
bitwise equal to the one-by-one trainer. A run's result does not depend on the
other runs it is trained with (the grouped engine's property). Runs restart
from scratch when interrupted (no per-epoch checkpoint): the callers train
together only runs that have neither a checkpoint nor a DONE marker.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from tqdm.auto import tqdm

from bnmem.config import ModelConfig, TrainConfig
from bnmem.data import augment
from bnmem.data.dataset import OutlierDataset
from bnmem.measure.memorization import subset_accuracies
from bnmem.threads import torch_threads
from bnmem.train.ensemble import CPU_CHUNK, _fit, _initial_model, _max_chunk, _write_back, grouped_engine
from bnmem.train.ensemble_grouped import GroupedLeNet
from bnmem.train.ensemble_optim import StackedOptimizer, weight_decay_by_name
from bnmem.train.optim import lr_at
from bnmem.train.precision import autocast_dtype, compiled
from bnmem.train.trainer import _finish

EpochHook = Callable[[int, nn.Module], "dict | None"]
# Recipe fields the runs may differ in (everything else must be equal).
PER_RUN = ("gs_reg", "gs_tau")


def can_train_together(model_cfg: ModelConfig, ds: OutlierDataset, seed: int = 0, device: str = "cpu") -> bool:
    """Whether the lenses train runs of this architecture and norm on ``device`` together
    (:func:`bnmem.lenses.runs.train_fresh_together`): LeNets always; ResNets and fast networks on accelerators only.

    :func:`train_runs_together` trains both anywhere. On the CPU a grouped network of ResNet-20s is no faster
    than the runs one by one (its steps are bound by the convolutions' arithmetic; ``bench_lenses_together.py``:
    0.99-1.03), while it would change their bits (grouped kernels) and pad a lone run with a twin; so on the
    CPU ResNet runs stay with the plain trainer, bit for bit as before, with its per-epoch checkpoints.
    """
    with torch.random.fork_rng(devices=[]):
        grouped = grouped_engine(_initial_model(model_cfg, ds, seed, None, torch.device("cpu"), ds.x_train.dtype))
    return grouped is GroupedLeNet or (grouped is not None and torch.device(device).type != "cpu")


def _check(cfgs: list[TrainConfig], seeds: list[int], run_dirs: list[Path | None], hooks: list) -> None:
    if not (len(cfgs) == len(seeds) == len(run_dirs) == len(hooks)) or not cfgs:
        raise ValueError(f"train_runs_together needs as many recipes ({len(cfgs)}), seeds ({len(seeds)}), "
                         f"folders ({len(run_dirs)}) and hooks ({len(hooks)}), at least one")
    base = cfgs[0].model_dump(exclude=set(PER_RUN))
    if any(c.model_dump(exclude=set(PER_RUN)) != base for c in cfgs):
        raise ValueError(f"runs trained together may differ only in {', '.join(PER_RUN)}")


def _check_data(ds: OutlierDataset, datasets: list[OutlierDataset], n: int, batch_size: int) -> None:
    if len(datasets) != n:
        raise ValueError(f"train_runs_together got {n} runs but {len(datasets)} datasets")
    for d in datasets:
        if (d.name, tuple(d.input_shape), d.num_classes, d.x_train.dtype, min(batch_size, d.n_train)) != (
                ds.name, tuple(ds.input_shape), ds.num_classes, ds.x_train.dtype, min(batch_size, ds.n_train)):
            raise ValueError("runs trained together need datasets of one name, input shape, class count, dtype "
                             "and batch size (training sets of at least a batch)")


def _record(cfg: TrainConfig, epoch: int, loss: float, activity: dict[str, list[float]], k: int) -> dict[str, Any]:
    """The plain trainer's per-epoch keys before the measurements."""
    record: dict[str, Any] = {"epoch": epoch, "lr": lr_at(cfg, epoch - 1), "train_loss": loss}
    if cfg.gs_reg > 0:
        total = activity["loss_sum"][k]
        record["extra_loss_share"] = activity["penalty_sum"][k] / total if total > 0 else None
        record["gs_frac_above_tau"] = activity["frac_above_tau"][k]
    return record


def _stacked_data(datasets: list[OutlierDataset], device: torch.device
                  ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """The training sets of the runs as one (images, labels), and each run's rows in it (one copy per dataset;
    a single dataset is used as it is)."""
    first: dict[int, int] = {}
    for d in datasets:
        first.setdefault(id(d), len(first))
    distinct = list({id(d): d for d in datasets}.values())
    offsets = [0]
    for d in distinct:
        offsets.append(offsets[-1] + d.n_train)
    if len(distinct) == 1:
        x, y = distinct[0].x_train.to(device), distinct[0].y_train.to(device)
    else:
        x = torch.cat([d.x_train for d in distinct]).to(device)
        y = torch.cat([d.y_train for d in distinct]).to(device)
    return x, y, [torch.arange(d.n_train) + offsets[first[id(d)]] for d in datasets]


def _train_chunk(model_cfg: ModelConfig, datasets: list[OutlierDataset], cfgs: list[TrainConfig], seeds: list[int],
                 hooks: list[EpochHook | None], bar: Any) -> tuple[list[nn.Module], list[list[dict]], float]:
    """One grouped network (run k on ``datasets[k]``): the trained models (channels_last for images), their
    histories, the seconds."""
    ds = datasets[0]
    base = cfgs[0]
    device, dtype = torch.device(base.device), ds.x_train.dtype
    models = [_initial_model(model_cfg, ds, s, None, device, dtype) for s in seeds]
    if ds.x_train.ndim == 4:
        models = [m.to(memory_format=torch.channels_last) for m in models]
    grouped = grouped_engine(models[0])
    twins = [i % len(models) for i in range(-len(models) % grouped.multiple)]
    members = models + [copy.deepcopy(models[i]) for i in twins]
    aug = augment.spec_of(base, ds.input_shape, ds.name)
    x_all, y_all, idx = _stacked_data(datasets, device)
    engine = grouped(members, x_all, y_all,
                     [cfgs[i].gs_reg for i in range(len(models))] + [cfgs[i].gs_reg for i in twins],
                     [cfgs[i].gs_tau for i in range(len(models))] + [cfgs[i].gs_tau for i in twins], aug.padding,
                     twins=len(twins), autocast_dtype=autocast_dtype(base, device))
    if base.compile != "off":
        engine.compile(lambda fn: compiled(fn, base))
    opt = StackedOptimizer(engine.params, weight_decay_by_name(models[0], base), base)
    histories: list[list[dict]] = [[] for _ in models]
    measuring = [0.0]

    def on_epoch(epoch: int, losses: list[float], activity: dict[str, list[float]]) -> None:
        t0 = time.perf_counter()
        _write_back(engine, models)
        for k, model in enumerate(models):
            record = _record(cfgs[k], epoch, losses[k], activity, k)
            record.update(subset_accuracies(model, datasets[k]))
            if hooks[k] is not None:
                record.update(hooks[k](epoch, model) or {})
            histories[k].append(record)
        measuring[0] += time.perf_counter() - t0
        bar.update(1)

    t0 = time.perf_counter()
    _fit(engine, opt, idx + [idx[i] for i in twins], seeds + [seeds[i] for i in twins], base, device, on_epoch, aug)
    return models, histories, time.perf_counter() - t0 - measuring[0]


def train_runs_together(model_cfg: ModelConfig, ds: OutlierDataset, cfgs: list[TrainConfig], seeds: list[int],
                        run_dirs: list[Path | None], hooks: list[EpochHook | None],
                        progress: bool | str = False, datasets: list[OutlierDataset] | None = None
                        ) -> list[list[dict]]:
    """Train K full-data runs at once; each as ``train_model(seeded_model(model_cfg, ds, seeds[k]), ds, cfgs[k],
    seeds[k], run_dir=run_dirs[k], on_epoch=hooks[k])`` would, up to summation order.

    Args:
        model_cfg: architecture and norm of every run (a LeNet or ResNet, :func:`can_train_together`).
        ds: the dataset (training in its dtype).
        cfgs: run k's recipe; the recipes may differ only in ``gs_reg`` and ``gs_tau``.
        seeds: run k's model seed (initial weights and batch order).
        run_dirs: run k's folder (written as the plain trainer finishes it), or None.
        hooks: run k's per-epoch hook ``(epoch, model) -> dict | None``, or None.
        progress: a tqdm bar over epochs (a string is its description).
        datasets: run k's dataset, when the runs train on different data (replicates of a setting: another
            corruption, split or subsample of the same images); None: ``ds`` for every run. The datasets must
            agree with ``ds`` in name, input shape, classes and dtype; each run sees only its own training set
            (the network holds them all; a run with fewer batches skips the others' last steps, exactly) and
            its per-epoch accuracies are measured on its own subsets.

    Returns:
        Each run's per-epoch history, in order.

    Raises:
        ValueError: mismatched lengths, recipes that differ elsewhere, or an architecture the grouped engine
            does not train.
        FloatingPointError: a run's training loss became non-finite.
    """
    seeds = [int(s) for s in seeds]
    _check(cfgs, seeds, run_dirs, hooks)
    datasets = [ds] * len(seeds) if datasets is None else list(datasets)
    _check_data(ds, datasets, len(seeds), cfgs[0].batch_size)
    with torch.random.fork_rng(devices=[]):
        template = _initial_model(model_cfg, ds, seeds[0], None, torch.device("cpu"), ds.x_train.dtype)
    grouped = grouped_engine(template)
    if grouped is None:
        raise ValueError(f"train_runs_together trains LeNets, ResNets and fast networks only, not {model_cfg.arch}")
    size = CPU_CHUNK if grouped is GroupedLeNet else _max_chunk(torch.device(cfgs[0].device), template, ds.input_shape,
                                                                 cfgs[0], ds.x_train.dtype, "grouped", grouped)
    chunks = [list(range(i, min(i + size, len(seeds)))) for i in range(0, len(seeds), size)]
    desc = progress if isinstance(progress, str) else f"train {len(seeds)} runs together"
    out: list[list[dict]] = [[] for _ in seeds]
    with torch_threads(cfgs[0].threads), tqdm(total=len(chunks) * cfgs[0].epochs, desc=desc,
                                              disable=not progress, leave=False) as bar:
        for chunk in chunks:
            models, histories, seconds = _train_chunk(model_cfg, [datasets[k] for k in chunk],
                                                      [cfgs[k] for k in chunk], [seeds[k] for k in chunk],
                                                      [hooks[k] for k in chunk], bar)
            for k, model, history in zip(chunk, models, histories):
                out[k] = history
                if run_dirs[k] is not None:
                    _finish(Path(run_dirs[k]), model, history, cfgs[k].epochs, seconds / len(chunk))
    return out

