"""Train many small models at once (LiRA shadow models, seed sweeps).

:func:`train_models` is a drop-in replacement for training K models one after
another with :func:`bnmem.train.train_model`: model k starts from the
initialization ``seeded_model(model_cfg, ds, seeds[k])`` gives (or from
``init_states[k]``), sees only the examples ``train_idx[k]`` in the order
``epoch_batches(len(train_idx[k]), batch_size, seeds[k], epoch)``, and gets the
same optimizer (SGD momentum / Adam over the three weight-decay groups), the
same per-epoch learning rate and the same γ/σ regularizer. The returned
modules are ordinary models with trained parameters and BN running statistics.

Methods:

- ``grouped`` (LeNet, ResNet, fastnet): one network whose convolutions have ``groups=K``, whose
  norms run over K×C channels and whose linear layers are batched matmuls
  (:mod:`bnmem.train.ensemble_grouped`). The hot path: ~2.6-2.8x the
  sequential throughput in one process on a 2-core CPU
  (``benchmarks/bench_ensemble.py``). ResNets likewise
  (:mod:`bnmem.train.ensemble_grouped_resnet`; on request here, and for the
  lenses' runs on accelerators, :mod:`bnmem.train.ensemble_runs`): on the CPU
  their steps are bound by the convolutions' arithmetic, so grouping saves
  nothing there. The fast networks likewise
  (:mod:`bnmem.train.ensemble_grouped_fastnet`).
- ``vmap`` (any architecture): ``torch.func.vmap`` over ``grad`` with stacked
  parameters and buffers (:mod:`bnmem.train.ensemble_vmap`). Meant for GPUs;
  on the CPU it is no faster than the loop (see :func:`resolve_method`).
- ``sequential``: the plain loop over ``train_model`` (the oracle).
- ``auto``: grouped for LeNets, else sequential on the CPU and, on accelerators,
  the measured choice per architecture (:data:`ACCELERATOR_METHOD`; vmap
  where none is recorded).

Chunks (models per vectorized network) come from the device's free memory
(:mod:`bnmem.train.sizing`); ``cfg.precision`` and ``cfg.channels_last``
(:mod:`bnmem.train.precision`) switch bf16 autocast and the batches' memory
format.

:func:`train_models_parallel` splits the models over worker processes (one
thread each), each running :func:`train_models` on its share.

The IN sets of LiRA shadow models differ in size by a few examples, so the
models have different numbers of full batches per epoch. A step where model k
has no batch left is skipped for model k alone: its parameters, optimizer state
(momentum / Adam moments and step count) and BN running statistics are
restored after the vectorized step (its forward pass runs on a dummy batch
whose result is discarded; no model's computation depends on another's).

Results match the sequential trainer up to floating-point summation order
inside kernels (checked in float64 to 1e-9 by ``tests/test_ensemble.py``).
With ``grouped`` on the CPU a model's result is bitwise the same whichever
models share its network (chunking, worker split), in float32 and float64;
``vmap`` results can differ in the last bits with the chunk composition.
Training runs in the dtype of ``ds.x_train`` (float32 normally; the tests
convert the dataset to float64).
"""

from __future__ import annotations

import atexit
import copy
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from bnmem.config import ModelConfig, TrainConfig
from bnmem.data import augment
from bnmem.data.dataset import OutlierDataset
from bnmem.train.batching import epoch_batches
from bnmem.train.ensemble_grouped import GroupedLeNet
from bnmem.train.ensemble_grouped_fastnet import GroupedFastNet
from bnmem.train.ensemble_grouped_resnet import GroupedResNet
from bnmem.train.ensemble_optim import StackedOptimizer, weight_decay_by_name
from bnmem.train.ensemble_vmap import VmapEnsemble
from bnmem.train import sizing
from bnmem.train.optim import lr_at
from bnmem.train.precision import autocast_dtype, channels_last, compiled
from bnmem.threads import torch_threads
from bnmem.train.trainer import seeded_model, train_model

METHODS = ("auto", "grouped", "vmap", "sequential")

# Models per vectorized network on the CPU. Measured on digits LeNet (batch 64,
# 1 thread, CPU time of 48 models in chunks of 8/12/16/24/48): 16-24 is best
# (+10% over 8 or 48); larger networks' activations no longer fit the L2 cache.
CPU_CHUNK = 24
# On accelerators: as many models as fit in the device's free memory (bnmem.train.sizing: each
# model's parameters, gradients, optimizer state and activations, from a probe step), at most this many.
ACCEL_MAX_CHUNK = 512
# Grouped networks hold a multiple of this many models (throw-away twins pad
# the last one). A model's result must not depend on which models share its
# network. On the CPU it does not as long as no norm-layer channel lands in
# the scalar remainder loop of the vectorized BatchNorm backward (it rounds
# differently from the vector lanes) and no network is a groups=1 convolution
# (another oneDNN kernel). Measured on this AVX-512 CPU by training the same
# model in networks of every K from 1 to 32: float32 results are bitwise equal
# for K a multiple of 4 (then K*C is a multiple of 8 floats for every C in
# 6, 16, 120, 84), float64 results for every even K.
GROUPED_MULTIPLE = GroupedLeNet.multiple

Engine = GroupedLeNet | VmapEnsemble
# Called after every epoch of every model with (epoch (1-based), model indices into ``seeds``, their state
# dicts at the end of that epoch, in the same order). The states are views of the live training tensors:
# read them (query, copy) inside the call and keep nothing.
StatesHook = Callable[[int, list[int], list[dict[str, torch.Tensor]]], None]

# The grouped networks, by the architectures they reproduce (each is a GroupedLeNet).
GROUPED_ENGINES: tuple[type[GroupedLeNet], ...] = (GroupedLeNet, GroupedResNet, GroupedFastNet)

# The engine ``auto`` picks on accelerators, per architecture (the model's class name), as measured by
# benchmarks/gpu_check.py (its engine table: images/s of one-by-one, vmap and grouped); an architecture not
# listed gets vmap. Empty: no GPU measurement of the choice has been recorded yet (docs/gpu/README.md).
ACCELERATOR_METHOD: dict[str, str] = {}


def grouped_engine(model: nn.Module) -> type[GroupedLeNet] | None:
    """The grouped network that reproduces ``model``'s architecture (LeNet, ResNet), or None."""
    return next((cls for cls in GROUPED_ENGINES if cls.supports(model)), None)


def resolve_method(method: str, model: nn.Module, device: str | torch.device = "cpu") -> str:
    """The method ``train_models`` uses for ``model``'s architecture on ``device``.

    ``auto`` picks ``grouped`` for LeNets. For other architectures it picks
    ``sequential`` on the CPU and, on accelerators, the method
    :data:`ACCELERATOR_METHOD` records for the architecture (``vmap`` where
    none is recorded). ``grouped`` also trains ResNets (:class:`GroupedResNet`)
    and the fast networks (:class:`GroupedFastNet`), on request: on this CPU a
    ResNet-20 step is bound by its convolutions' arithmetic, and a grouped
    network of K ResNet-20s was measured no faster than K models one after
    another (digits, batch 64, 1 thread: 23-26 ms per model and step for
    K = 1..16 either way; ``benchmarks/bench_lenses_together.py --cases
    resnet20-training``). Measured on this
    2-core CPU (1 thread, digits, 16 models, CPU time, models/s sequential /
    vmap / grouped): LeNet-BN 32.7 / 32.4 / 82.7, LeNet-none 47.6 / 42.0 /
    108.8, MLP-BN 66 / 56, ResNet-20-BN 3.9 / 3.0, DenseNet-BN 3.5 / 1.7.
    vmap's batching rules reshape activations between the model and channel
    dimensions on every op (NCHW max-pool, copies), which costs on the CPU
    what batching saves; on a GPU the sequential loop is bound by kernel
    launches, which vmap divides by K.

    Args:
        method: ``auto``, ``grouped``, ``vmap`` or ``sequential``.
        model: one model of the ensemble (a template).
        device: where training runs.

    Returns:
        The concrete method.

    Raises:
        ValueError: unknown method, or ``grouped`` for a model it cannot reproduce.
    """
    if method not in METHODS:
        raise ValueError(f"unknown ensemble method {method!r}; choose one of {', '.join(METHODS)}")
    if method == "auto":
        if grouped_engine(model) is GroupedLeNet:
            return "grouped"
        if torch.device(device).type == "cpu":
            return "sequential"
        return ACCELERATOR_METHOD.get(type(model).__name__, "vmap")
    if method == "grouped" and grouped_engine(model) is None:
        raise ValueError(f"method 'grouped' trains LeNets, ResNets and fast networks with batch/none/group/layer "
                         f"norm only, "
                         f"not {type(model).__name__}; use 'vmap' or 'auto'")
    return method


def _check_inputs(ds: OutlierDataset, seeds: list[int], train_idx: list[np.ndarray],
                  init_states: list[dict] | None) -> list[np.ndarray]:
    if len(seeds) == 0:
        raise ValueError("train_models needs at least one seed")
    if len(train_idx) != len(seeds):
        raise ValueError(f"got {len(seeds)} seeds but {len(train_idx)} train_idx arrays")
    if init_states is not None and len(init_states) != len(seeds):
        raise ValueError(f"got {len(seeds)} seeds but {len(init_states)} init_states")
    out = []
    for k, idx in enumerate(train_idx):
        a = np.asarray(idx)
        if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"train_idx[{k}] must be a non-empty 1-D integer array")
        if a.min() < 0 or a.max() >= ds.n_train:
            raise ValueError(f"train_idx[{k}] has indices outside 0..{ds.n_train - 1}")
        out.append(a.astype(np.int64))
    return out


def _initial_model(model_cfg: ModelConfig, ds: OutlierDataset, seed: int, state: dict | None,
                   device: torch.device, dtype: torch.dtype) -> nn.Module:
    """Model k as the sequential trainer would start it, on ``device`` in ``dtype``."""
    if state is None:
        model = seeded_model(model_cfg, ds, seed)
    else:
        # The seeded init is overwritten anyway; keep the caller's RNG untouched.
        with torch.random.fork_rng(devices=[]):
            model = seeded_model(model_cfg, ds, seed)
    # dtype before loading, so a float64 init state is not rounded to float32.
    model = model.to(device=device, dtype=dtype)
    if state is not None:
        model.load_state_dict(state)
    return model.train()


def _chunks(sizes: list[int], batch_size: int, max_chunk: int, multiple: int = 1) -> list[list[int]]:
    """Model indices grouped by effective batch size, in near-equal chunks of at most ``max_chunk``.

    Models with fewer examples than ``batch_size`` train on one batch of all
    their examples (see :func:`epoch_batches`), so they can only share a
    network with models of the same batch size. Chunk sizes are rounded up to
    ``multiple`` where possible (20+13, not 32+1, for 33 models, chunks of 32
    and multiple 4), so that padding a chunk to a multiple wastes little.
    """
    by_bs: dict[int, list[int]] = {}
    for k, n in enumerate(sizes):
        by_bs.setdefault(min(batch_size, n), []).append(k)
    out = []
    for ks in by_bs.values():
        n_chunks = -(-len(ks) // max_chunk)
        size = -(-len(ks) // n_chunks)
        size = min(max_chunk, -(-size // multiple) * multiple)
        out += [ks[i : i + size] for i in range(0, len(ks), size)]
    return out


def _max_chunk(device: torch.device, model: nn.Module, input_shape: tuple[int, ...], cfg: TrainConfig,
               dtype: torch.dtype, method: str, engine: type[GroupedLeNet] = GroupedLeNet) -> int:
    """Models per network for ``model``'s architecture: ``engine`` is the grouped network's class (its
    multiple; :class:`GroupedLeNet` also for vmap). On the CPU, grouped LeNets and vmap take :data:`CPU_CHUNK`
    (measured). Every other case is sized from memory (:mod:`bnmem.train.sizing`): the device's free memory
    on accelerators, the documented :data:`~bnmem.train.sizing.CPU_MEMORY_BOUND` on the CPU (at most
    :data:`CPU_CHUNK` models there)."""
    m = engine.multiple if method == "grouped" else 1
    if device.type == "cpu" and engine is GroupedLeNet:
        return CPU_CHUNK
    per_model = sizing.model_bytes(model, input_shape, cfg.batch_size, dtype, cfg.optimizer, cfg.momentum,
                                   autocast_dtype(cfg, device))
    most = CPU_CHUNK if device.type == "cpu" else ACCEL_MAX_CHUNK
    return sizing.chunk_size(per_model, sizing.free_bytes(device), most, m)


def _epoch_selection(idx: list[torch.Tensor], seeds: list[int], batch_size: int, epoch: int,
                     aug: augment.AugmentSpec = augment.NO_AUGMENT
                ) -> tuple[torch.Tensor, torch.Tensor, list[int], torch.Tensor | None]:
    """Every model's batches of one epoch as one tensor.

    Returns:
        ``sel`` [S, K, B] dataset indices (model k's s-th batch, mapped through
        its train_idx), ``active`` [S, K] bool (False where model k has fewer
        than s+1 batches; ``sel`` then repeats its first batch, a real batch so
        the discarded forward pass stays finite), each model's batch count, and
        (when ``aug`` is active) the augmentation parameters [S, K, B, 3] the
        plain trainer would draw for those batches (None otherwise).
    """
    batches = [epoch_batches(len(ix), batch_size, s, epoch) for ix, s in zip(idx, seeds)]
    counts = [len(b) for b in batches]
    bs = len(batches[0][0])
    sel = torch.empty(max(counts), len(idx), bs, dtype=torch.long)
    active = torch.zeros(max(counts), len(idx), dtype=torch.bool)
    params = torch.zeros(max(counts), len(idx), bs, 3, dtype=torch.long) if aug.active else None
    for k, (ix, bl) in enumerate(zip(idx, batches)):
        rows = ix[torch.stack(bl)]
        sel[: len(bl), k] = rows
        sel[len(bl) :, k] = rows[0]
        active[: len(bl), k] = True
        if params is not None:
            drawn = augment.epoch_params(aug, len(bl), bs, seeds[k], epoch)
            params[: len(bl), k] = drawn
            params[len(bl) :, k] = drawn[0]
    return sel, active, counts, params


def _fit(engine: Engine, opt: StackedOptimizer, idx: list[torch.Tensor], seeds: list[int], cfg: TrainConfig,
         device: torch.device, on_epoch: Callable[[int, list[float], dict[str, list[float]]], None],
         aug: augment.AugmentSpec = augment.NO_AUGMENT, lrs: list[float] | None = None,
         diverged: list[bool] | None = None) -> None:
    """Train one chunk of models for ``cfg.epochs`` epochs (with augmentation ``aug``).

    ``lrs``: each model's base learning rate (None: ``cfg.lr`` for all), scheduled as ``cfg`` says.
    ``diverged``: when given, a model whose loss turns non-finite is marked there (its training goes on,
    harmlessly: no model's computation reads another's) instead of raising.
    ``on_epoch(epoch, mean_losses, activity)`` runs after each epoch (1-based), with each model's mean
    loss and, when the engine records it (:class:`GroupedLeNet` with the regularizer on), the sums over
    the epoch's steps of each model's penalty (``penalty_sum``) and loss (``loss_sum``) and the mean of its
    fraction of channels above τ (``frac_above_tau``).
    """
    k = len(seeds)
    cfgs = None if lrs is None else [cfg.model_copy(update={"lr": float(r)}) for r in lrs]
    for epoch in range(cfg.epochs):
        lr = lr_at(cfg, epoch) if cfgs is None else torch.tensor([lr_at(c, epoch) for c in cfgs],
                                                                 dtype=torch.float64)
        sel, active, counts, params = _epoch_selection(idx, seeds, cfg.batch_size, epoch, aug)
        sel = sel.to(device)
        loss_sum = torch.zeros(k, dtype=torch.float64, device=device)
        pen_sum = torch.zeros(k, dtype=torch.float64, device=device)
        above_sum = torch.zeros(k, dtype=torch.float64, device=device)
        for s in range(sel.shape[0]):
            act = active[s]
            masked = not bool(act.all())
            if masked:
                # Only the skipping models' rows are saved and put back (exactly).
                rows = (~act).nonzero().view(-1).to(device)
                saved = {n: b.index_select(0, rows) for n, b in engine.buffers.items()}
            losses, grads = engine.losses_and_grads(sel[s], None if params is None else params[s])
            opt.step(grads, lr, act if masked else None)
            if masked:
                act_dev = act.to(device)
                with torch.no_grad():
                    for n, b in engine.buffers.items():
                        b.index_copy_(0, rows, saved[n])
                losses = torch.where(act_dev, losses, torch.zeros_like(losses))
            loss_sum += losses
            pen, above = getattr(engine, "last_penalty", None), getattr(engine, "last_above", None)
            if pen is not None and above is not None:
                keep = act.to(device)
                pen_sum += torch.where(keep, pen, torch.zeros_like(pen))
                above_sum += torch.where(keep, above, torch.zeros_like(above))
        mean_loss = (loss_sum.cpu() / torch.tensor(counts, dtype=torch.float64)).tolist()
        for i, (seed, loss) in enumerate(zip(seeds, mean_loss)):
            if not np.isfinite(loss) and diverged is not None:
                diverged[i] = True
            elif not np.isfinite(loss):
                raise FloatingPointError(
                    f"training diverged at epoch {epoch + 1} (loss {loss}) for the model with seed {seed}; lower --lr")
        activity = {}
        if getattr(engine, "last_penalty", None) is not None:
            n = torch.tensor(counts, dtype=torch.float64)
            activity = {"penalty_sum": pen_sum.cpu().tolist(), "loss_sum": loss_sum.cpu().tolist(),
                        "frac_above_tau": (above_sum.cpu() / n).tolist()}
        on_epoch(epoch + 1, mean_loss, activity)


def _write_back(engine: Engine, models: list[nn.Module]) -> None:
    """Load each model's slice of the stacked parameters and buffers into it."""
    for i, model in enumerate(models):
        state = {n: t[i].detach() for n, t in {**engine.params, **engine.buffers}.items()}
        model.load_state_dict(state)


def _epoch_states(engine: Engine, n: int) -> list[dict[str, torch.Tensor]]:
    """The first ``n`` models' state dicts (views of the stacked training tensors; no copy)."""
    stacked = {**engine.params, **engine.buffers}
    return [{name: t[i].detach() for name, t in stacked.items()} for i in range(n)]


def _train_sequential(models: list[nn.Module], ds: OutlierDataset, cfg: TrainConfig, seeds: list[int],
                      idx: list[np.ndarray], progress: bool | str, on_epoch: StatesHook | None = None
                      ) -> list[nn.Module]:
    out = []
    for k, (model, seed) in enumerate(zip(models, seeds)):
        desc = f"{progress} model {k}" if isinstance(progress, str) else (f"model {k}" if progress else False)
        hook = None if on_epoch is None else (
            lambda epoch, m, k=k: on_epoch(epoch, [k], [dict(m.state_dict())]))  # returns None: no history keys
        out.append(train_model(model, ds, cfg, seed, train_idx=idx[k], on_epoch=hook, measure=False,
                               progress=desc).model)
    return out


def train_models(model_cfg: ModelConfig, ds: OutlierDataset, cfg: TrainConfig, seeds: list[int],
                 train_idx: list[np.ndarray], method: str = "auto", progress: bool | str = True,
                 init_states: list[dict] | None = None, on_epoch: StatesHook | None = None) -> list[nn.Module]:
    """Train K = len(seeds) models of one architecture, norm and recipe at once.

    Result-equivalent to ``[train_model(seeded_model(model_cfg, ds, seeds[k]), ds,
    cfg, seeds[k], train_idx=train_idx[k], measure=False).model for k in range(K)]``.

    Args:
        model_cfg: architecture and norm (shared by all models).
        ds: the dataset; training runs in the dtype of ``ds.x_train``.
        cfg: the training recipe (optimizer, lr schedule, epochs, batch size,
            weight decays, γ/σ regularizer, threads, device).
        seeds: model k's seed: its initial weights (unless ``init_states``) and
            its data order.
        train_idx: model k's training examples (indices into ``ds.x_train``).
        method: ``grouped`` (LeNet), ``vmap`` (any architecture),
            ``sequential`` (the plain loop) or ``auto`` (grouped for LeNets,
            else sequential on the CPU and vmap on accelerators; see
            :func:`resolve_method`).
        progress: show a tqdm bar (a string is used as its description).
        init_states: optional state dicts to start model k from instead of the
            seeded initialization.
        on_epoch: called after every epoch with the models' states at its end (:data:`StatesHook`), e.g.
            to query them at earlier epochs; it must not change them. Models are reported in groups (the
            vectorized networks train one after the other), every (epoch, model) exactly once.

    Returns:
        K models (the class ``build_model`` returns), in ``seeds`` order, on
        ``cfg.device``, in train mode and, for image inputs, channels_last, as
        ``train_model`` leaves them, with trained parameters, BN running
        statistics and ``num_batches_tracked``.

    Raises:
        ValueError: mismatched lengths, empty or out-of-range ``train_idx``,
            unknown ``method``, or ``grouped`` for an architecture it cannot train.
        FloatingPointError: a model's training loss became non-finite.
    """
    models, _ = _train_all(model_cfg, ds, cfg, seeds, train_idx, method, progress, init_states, on_epoch=on_epoch)
    return models


def train_candidates(model_cfg: ModelConfig, ds: OutlierDataset, cfg: TrainConfig, lrs: list[float],
                     seeds: list[int], train_idx: list[np.ndarray], method: str = "auto",
                     progress: bool | str = False, on_epoch: StatesHook | None = None) -> list[nn.Module | None]:
    """Train K models that differ in learning rate (and seed) at once: learning-rate candidates.

    Result-equivalent to training model k alone with ``cfg`` at learning rate ``lrs[k]``
    (``train_model(seeded_model(model_cfg, ds, seeds[k]), ds, cfg_k, seeds[k], train_idx=train_idx[k])``),
    except that a model whose training loss diverges is returned as None instead of raising.

    Args:
        model_cfg, ds, cfg, seeds, train_idx, method, progress: as for :func:`train_models`.
        lrs: model k's base learning rate (``cfg``'s schedule applies to each).
        on_epoch: called after every epoch with the models' states (:data:`StatesHook`; a diverged model's
            states are whatever its training left: read ``None`` in the result instead).

    Returns:
        K trained models, None for the diverged ones.
    """
    if len(lrs) != len(seeds):
        raise ValueError(f"got {len(seeds)} seeds but {len(lrs)} learning rates")
    models, diverged = _train_all(model_cfg, ds, cfg, seeds, train_idx, method, progress, None,
                                  [float(r) for r in lrs], on_epoch)
    return [None if d else m for m, d in zip(models, diverged)]


def _train_sequential_each(models: list[nn.Module], ds: OutlierDataset, cfg: TrainConfig, seeds: list[int],
                           idx: list[np.ndarray], lrs: list[float], diverged: list[bool],
                           on_epoch: StatesHook | None = None) -> list[nn.Module]:
    """The plain loop with a learning rate per model; a diverged model is marked, not raised."""
    out = []
    for k, (model, seed) in enumerate(zip(models, seeds)):
        hook = None if on_epoch is None else (
            lambda epoch, m, k=k: on_epoch(epoch, [k], [dict(m.state_dict())]))  # returns None: no history keys
        try:
            out.append(train_model(model, ds, cfg.model_copy(update={"lr": lrs[k]}), seed, train_idx=idx[k],
                                   on_epoch=hook, measure=False, progress=False).model)
        except FloatingPointError:
            diverged[k] = True
            out.append(model)
    return out


def _train_all(model_cfg: ModelConfig, ds: OutlierDataset, cfg: TrainConfig, seeds: list[int],
               train_idx: list[np.ndarray], method: str, progress: bool | str, init_states: list[dict] | None,
               lrs: list[float] | None = None, on_epoch: StatesHook | None = None
               ) -> tuple[list[nn.Module], list[bool]]:
    """:func:`train_models`, with optional per-model learning rates (then divergence is marked, not raised)."""
    seeds = [int(s) for s in seeds]
    idx = _check_inputs(ds, seeds, list(train_idx), init_states)
    device = torch.device(cfg.device)
    dtype = ds.x_train.dtype
    aug = augment.spec_of(cfg, ds.input_shape, ds.name)
    diverged = [False] * len(seeds)
    tolerate = None if lrs is None else diverged
    with torch_threads(cfg.threads):
        models = [_initial_model(model_cfg, ds, s, None if init_states is None else init_states[k], device, dtype)
                  for k, s in enumerate(seeds)]
        method = resolve_method(method, models[0], device)
        if method == "sequential":
            if lrs is not None:
                return _train_sequential_each(models, ds, cfg, seeds, idx, lrs, diverged, on_epoch), diverged
            return _train_sequential(models, ds, cfg, seeds, idx, progress, on_epoch), diverged
        x_all, y_all = ds.x_train.to(device), ds.y_train.to(device)
        idx_t = [torch.as_tensor(a) for a in idx]
        grouped = grouped_engine(models[0]) if method == "grouped" else None
        multiple = grouped.multiple if grouped is not None else 1
        max_chunk = _max_chunk(device, models[0], ds.input_shape, cfg, dtype, method, grouped or GroupedLeNet)
        chunks = _chunks([len(a) for a in idx], cfg.batch_size, max_chunk, multiple)
        wd = weight_decay_by_name(models[0], cfg)
        half = autocast_dtype(cfg, device)
        desc = progress if isinstance(progress, str) else f"train {len(seeds)} models ({method})"
        bar = tqdm(total=len(chunks) * cfg.epochs, desc=desc, disable=not progress, leave=False)
        for chunk in chunks:
            members = [models[k] for k in chunk]
            # Throw-away twins pad the network to a multiple of the engine's
            # models (they train on their originals' batches; nothing reads them).
            twins = [chunk[i % len(chunk)] for i in range(-len(chunk) % multiple)]
            members += [copy.deepcopy(models[k]) for k in twins]
            chunk = chunk + twins
            if grouped is not None:
                engine = grouped(members, x_all, y_all, cfg.gs_reg, cfg.gs_tau, aug.padding, twins=len(twins),
                                 autocast_dtype=half)
            else:
                engine = VmapEnsemble(members, x_all, y_all, cfg.gs_reg, cfg.gs_tau, aug.padding,
                                      channels_last=channels_last(cfg, device.type == "cpu"), autocast_dtype=half)
            if cfg.compile != "off":
                engine.compile(lambda fn: compiled(fn, cfg))
            opt = StackedOptimizer(engine.params, wd, cfg)
            marks = None if tolerate is None else [False] * len(chunk)
            real = chunk[: len(chunk) - len(twins)]

            def epoch_end(epoch: int, *_: Any, real: list[int] = real, engine: Engine = engine) -> None:
                bar.update(1)
                if on_epoch is not None:
                    on_epoch(epoch, real, _epoch_states(engine, len(real)))

            _fit(engine, opt, [idx_t[k] for k in chunk], [seeds[k] for k in chunk], cfg, device,
                 epoch_end, aug, None if lrs is None else [lrs[k] for k in chunk], marks)
            for k, d in zip(chunk, marks or []):
                diverged[k] = diverged[k] or d
            _write_back(engine, members[: len(members) - len(twins)])
        bar.close()
    if ds.x_train.ndim == 4:
        models = [m.to(memory_format=torch.channels_last) for m in models]
    return models, diverged


# Worker pools by size, started on first use and kept for the process's life:
# spawning a worker (a fresh interpreter importing torch) costs seconds, more
# than a typical call trains.
_POOLS: dict[int, Any] = {}


def _pool(workers: int) -> Any:
    pool = _POOLS.get(workers)
    if pool is None:
        # spawn, not fork: forking a process whose OpenMP runtime is initialized can hang.
        pool = torch.multiprocessing.get_context("spawn").Pool(workers)
        _POOLS[workers] = pool
        atexit.register(pool.terminate)
    return pool


def _train_part(args: tuple) -> dict[str, np.ndarray]:
    """Worker side of :func:`train_models_parallel`: train some models, return their stacked states.

    One numpy array per state entry: torch tensors would each travel through
    their own shared-memory segment, which costs more than training here.
    """
    model_cfg, ds, cfg, seeds, train_idx, method, init_states = args
    models = train_models(model_cfg, ds, cfg, seeds, train_idx, method, False, init_states)
    names = list(models[0].state_dict())
    return {n: torch.stack([m.state_dict()[n].detach().cpu() for m in models]).numpy() for n in names}


def train_models_parallel(model_cfg: ModelConfig, ds: OutlierDataset, cfg: TrainConfig, seeds: list[int],
                          train_idx: list[np.ndarray], method: str = "auto", progress: bool | str = True,
                          init_states: list[dict] | None = None, workers: int = 2) -> list[nn.Module]:
    """:func:`train_models` with the models split over ``workers`` processes.

    Each worker runs :func:`train_models` on a contiguous share of the models
    with ``cfg.threads`` threads, so a 2-core CPU trains two ensembles at once
    (one thread per process scales better here than two intra-op threads on
    one ensemble, and keeps the bits of a one-thread run). With the grouped
    method the result is bitwise the same as ``train_models`` in one process:
    no model's computation depends on the models it shares a network with.

    Args:
        model_cfg, ds, cfg, seeds, train_idx, method, init_states: as for
            :func:`train_models`.
        progress: a bar over the workers' shares (a string is its description).
        workers: number of processes; 1, a non-CPU device, or fewer than
            2*GROUPED_MULTIPLE models train in this process instead.

    Returns:
        As :func:`train_models`.

    Raises:
        As :func:`train_models`.
    """
    seeds = [int(s) for s in seeds]
    idx = _check_inputs(ds, seeds, list(train_idx), init_states)
    if workers <= 1 or torch.device(cfg.device).type != "cpu" or len(seeds) < 2 * GROUPED_MULTIPLE:
        return train_models(model_cfg, ds, cfg, seeds, idx, method, progress, init_states)
    # Shares in multiples of GROUPED_MULTIPLE, so that no worker pads its network.
    n = len(seeds)
    units = -(-n // GROUPED_MULTIPLE)
    bounds = [min(n, GROUPED_MULTIPLE * round(units * w / workers)) for w in range(workers + 1)]
    parts = [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    jobs = [(model_cfg, ds, cfg, seeds[a:b], idx[a:b], method, None if init_states is None else init_states[a:b])
            for a, b in parts]
    desc = progress if isinstance(progress, str) else f"train {n} models in {len(parts)} workers"
    states: list[dict[str, torch.Tensor]] = []
    with tqdm(total=len(parts), desc=desc, disable=not progress, leave=False) as bar:
        for part in _pool(workers).imap(_train_part, jobs):
            size = len(next(iter(part.values())))
            states += [{name: torch.as_tensor(a[i]) for name, a in part.items()} for i in range(size)]
            bar.update(1)
    device, dtype = torch.device(cfg.device), ds.x_train.dtype
    models = [_initial_model(model_cfg, ds, s, None, device, dtype) for s in seeds]
    for model, state in zip(models, states):
        model.load_state_dict(state)
    if ds.x_train.ndim == 4:
        models = [m.to(memory_format=torch.channels_last) for m in models]
    return models
