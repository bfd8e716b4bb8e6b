"""Shadow copies of a given model: the engine's train → query path for an architecture bnmem does not build.

The lira lens's shadow models come from a name (``cfg.arch``) and train many at
once (:mod:`bnmem.shadow.training`). A practitioner's model (``bnmem audit``)
is an ``nn.Module`` of any class, so its shadow models are *copies*: a deep
copy with every submodule's ``reset_parameters`` (and ``reset_running_stats``)
called under the copy's seed (:func:`fresh_copy`), each trained alone on its
keep-matrix half by the plain trainer (:func:`bnmem.train.train_model`, which
takes any module) or by the user's own training function
(:class:`CopyTraining`, signature :data:`TRAIN_FN_SIGNATURE`). Everything else
is the engine's: the keep matrix (:func:`bnmem.attacks.paired_keep_matrix`,
every example IN for exactly half the copies, the first M rows the same for any
larger M), the query (:func:`bnmem.shadow.query.query_model`: views, BN mode, φ
in float64 from float32 logits, the test split as RMIA's population) and the
per-model accuracies.

Copies are stored under a key (:func:`copy_key`): the SHA-256 of everything that determines
one, so a copy is trained once and reused by any later audit that needs the same one (more
copies, another gate, canaries added)::

    <out>/shadow/<key>/        copy.json (what determines it), the trainer's checkpoint, then model.pt,
                               history.json and, last, DONE (a folder without DONE is not a copy)
    <out>/shadow/inputs.pt     the model and data, for copies trained in executor jobs

What determines a copy: the model (its class's source file, its printed structure and every tensor of
its state: the parameters a reset leaves alone keep the model's values), the training data (the
tensors as the audit reads them, after any preprocessing), the trainer (bnmem's, with its version and
the whole recipe, device and threads included; or the user's function: its 'module:function', the
SHA-256 of its source file, device and threads), the member split (the keep row) and the seed. Copy
m's seed is m (initial weights, data order, augmentation draws).
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import inspect
import json
import marshal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from bnmem import io
from bnmem.config import TrainConfig
from bnmem.data import OutlierDataset, augment
from bnmem.data.views import View, make_views
from bnmem.attacks.phi import phi_from_logits_block
from bnmem.errors import BnmemError
from bnmem.shadow.query import ModelQuery, QueryOptions, device_inputs, query_logits, query_model
from bnmem.formatting import count_text
from bnmem.version import __version__

SHADOW_INPUTS = "inputs.pt"
COPY_FILE = "copy.json"
# What a training function for the copies looks like (README "Your own training function").
TRAIN_FN_SIGNATURE = "train_fn(model, train_dataset, seed) -> model"


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


@dataclass(frozen=True)
class CopyTraining:
    """How each shadow copy trains: bnmem's trainer with ``train``, or the user's own function ``fn``.

    ``fn`` is called as :data:`TRAIN_FN_SIGNATURE`: ``model`` a fresh, re-initialized copy in train mode on
    ``train.device``, ``train_dataset`` a ``torch.utils.data.TensorDataset`` of the copy's half of the
    training data (inputs as the audit reads them, labels int64, on the CPU), ``seed`` the copy's seed
    (``torch.manual_seed(seed)`` has been called); it returns the trained model (the same object or one of
    the same architecture). It runs under ``train.threads`` intra-op threads.

    Attributes:
        train: bnmem's recipe; with ``fn``, only its device, threads and augmentation (the query views) apply.
        fn: the user's training function (None: bnmem's trainer).
        fn_name: ``fn`` as 'module:function' (what a worker process imports; part of the copies' identity).
        fn_sha256: what identifies ``fn``'s code (:func:`function_identity`: its source file's SHA-256).
    """

    train: TrainConfig
    fn: Callable[..., Any] | None = None
    fn_name: str | None = None
    fn_sha256: str | None = None

    def identity(self) -> dict[str, Any]:
        """What of the trainer determines a copy (:func:`copy_key`)."""
        if self.fn is None:
            return {"trainer": f"bnmem {__version__}", "train": self.train.model_dump(mode="json")}
        return {"trainer": self.fn_name, "source_sha256": self.fn_sha256, "device": self.train.device,
                "threads": self.train.threads}

    def describe(self) -> str:
        return "bnmem's trainer" if self.fn is None else f"your training function {self.fn_name}"


def function_identity(fn: Callable[..., Any]) -> tuple[str, str]:
    """``fn`` as 'module:qualname' and what identifies its code: the SHA-256 of its source file; without one (a
    function made by ``exec``), ``code:`` and that of its compiled code; else (a callable object) a value drawn
    afresh, so that copies it trained are never taken for another's (they are not reused)."""
    name = f"{getattr(fn, '__module__', None) or '?'}:{getattr(fn, '__qualname__', None) or type(fn).__name__}"
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        source = None
    if source and Path(source).is_file():
        return name, io.file_sha256(source)
    code = getattr(fn, "__code__", None)
    if code is not None:
        return name, "code:" + hashlib.sha256(marshal.dumps(code)).hexdigest()
    return name, f"unidentified:{uuid.uuid4().hex}"


def import_function(name: str) -> Callable[..., Any]:
    """The function named 'module:qualname' (an executor's worker finds the user's training function so)."""
    module, _, qualname = name.partition(":")
    obj: Any = sys.modules.get(module) or importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _tensor_digest(h: Any, t: torch.Tensor) -> None:
    a = np.ascontiguousarray(t.detach().cpu().numpy())
    h.update(f"{a.dtype}{a.shape}".encode())
    h.update(a.view(np.uint8).reshape(-1).data if a.size else b"")


def model_digest(model: nn.Module) -> str:
    """SHA-256 of what a fresh copy of ``model`` is made from: its class's source file, its printed structure
    and every tensor of its state (a reset leaves some parameters at the model's values)."""
    h = hashlib.sha256()
    h.update(f"{type(model).__module__}.{type(model).__qualname__}\n{model!r}".encode())
    try:
        source = inspect.getsourcefile(type(model))
    except TypeError:
        source = None
    if source and Path(source).is_file():
        h.update(io.file_sha256(source).encode())
    for name, t in model.state_dict().items():
        h.update(name.encode())
        _tensor_digest(h, t)
    return h.hexdigest()


def data_digest(ds: OutlierDataset) -> str:
    """SHA-256 of the training data as the copies see it: the name, input shape, inputs and labels."""
    h = hashlib.sha256(f"{ds.name}{tuple(ds.input_shape)}".encode())
    _tensor_digest(h, ds.x_train)
    _tensor_digest(h, ds.y_train)
    return h.hexdigest()


def copy_key(base: dict[str, Any], keep_row: np.ndarray, m: int) -> tuple[str, dict[str, Any]]:
    """Copy ``m``'s key (the SHA-256 of what determines it) and that description.

    Args:
        base: what every copy of an audit shares (:func:`copies_identity`).
        keep_row: the copy's member split (bool over the training set).
        m: the copy's seed.
    """
    members = hashlib.sha256(np.packbits(np.asarray(keep_row, bool)).tobytes()).hexdigest()
    ident = {**base, "n_train": int(len(keep_row)), "members_sha256": members, "seed": int(m)}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32], ident


def copies_identity(model: nn.Module, ds: OutlierDataset, training: CopyTraining) -> dict[str, Any]:
    """What every copy of ``model`` on ``ds`` trained by ``training`` shares (the keys' common part)."""
    return {"model_sha256": model_digest(model), "data_sha256": data_digest(ds), **training.identity()}


def copy_dir(out: Path, key: str) -> Path:
    """Where the copy of key ``key`` is trained (resumable: its checkpoint, then ``model.pt`` and ``DONE``)."""
    return Path(out) / "shadow" / key


@dataclass(frozen=True)
class CopySet:
    """The copies an audit needs: one key per row of the keep matrix, and their descriptions."""

    keys: list[str]
    identities: list[dict[str, Any]]

    @classmethod
    def of(cls, model: nn.Module, ds: OutlierDataset, keep: np.ndarray, training: CopyTraining) -> "CopySet":
        base = copies_identity(model, ds, training)
        pairs = [copy_key(base, keep[m], m) for m in range(keep.shape[0])]
        return cls([k for k, _ in pairs], [i for _, i in pairs])

    def pending(self, out: Path | None) -> list[int]:
        """The copies not finished in ``out`` (all of them without a folder)."""
        return [m for m, k in enumerate(self.keys) if out is None or not io.is_done(copy_dir(out, k))]


@dataclass(frozen=True)
class CopyJob:
    """One shadow copy to train in an executor job (:func:`train_copy`): what any executor can ship (paths as
    strings, the recipe typed, the user's training function by name, imported in the worker).

    Attributes:
        m: the copy's index and seed.
        run_dir: its folder (:func:`copy_dir`).
        inputs: the saved model and data (``shadow/inputs.pt``).
        train: the copies' recipe.
        train_fn: the user's training function as 'module:function' (None: bnmem's trainer).
        train_fn_sha256: what identifies its code (:func:`function_identity`).
        identity: what determines the copy (``copy.json``, :func:`copy_key`).
        train_idx: the examples it trains on (its keep row's members).
    """

    m: int
    run_dir: str
    inputs: str
    train: TrainConfig
    train_fn: str | None
    train_fn_sha256: str | None
    identity: dict[str, Any]
    train_idx: tuple[int, ...]


def train_copy(job: CopyJob) -> dict[str, Any]:
    """Executor job: train shadow copy ``job.m`` from the architecture and data saved in ``job.inputs``.

    The copy is the one :func:`query_copies` would train in-process (same seed, keep row and trainer), written
    atomically with its ``DONE`` marker last.
    """
    run_dir = Path(job.run_dir)
    if io.is_done(run_dir):
        return {"m": job.m, "skipped": True}
    # The user's own pickled module, saved from the model already loaded (trusted).
    inputs = torch.load(job.inputs, weights_only=False)
    fn = import_function(job.train_fn) if job.train_fn else None
    training = CopyTraining(job.train, fn, job.train_fn, job.train_fn_sha256)
    net, _, _ = fresh_copy(inputs["model"], seed=job.m)
    train_one(net, inputs["ds"], np.asarray(job.train_idx), job.m, training, run_dir, job.identity, progress=False)
    return {"m": job.m, "skipped": False}


def train_copies(model: nn.Module, ds: OutlierDataset, keep: np.ndarray, training: CopyTraining, out: Path,
                 executor: Any, copies: CopySet) -> None:
    """Train every unfinished shadow copy through ``executor`` (one job per copy)."""
    pending = copies.pending(out)
    if not pending:
        return
    inputs = Path(out) / "shadow" / SHADOW_INPUTS
    io.save_torch(inputs, {"model": copy.deepcopy(model).cpu(), "ds": ds})
    jobs = [CopyJob(m, str(copy_dir(out, copies.keys[m])), str(inputs), training.train, training.fn_name,
                    training.fn_sha256, copies.identities[m], tuple(np.flatnonzero(keep[m]).tolist()))
            for m in pending]
    executor.map(train_copy, jobs, desc="shadow copies", resources={"num_cpus": training.train.threads})


def train_one(net: nn.Module, ds: OutlierDataset, idx: np.ndarray, m: int, training: CopyTraining,
              run_dir: Path | None, identity: dict[str, Any] | None, progress: bool = False) -> tuple[nn.Module, float]:
    """Train the fresh copy ``net`` on the examples ``idx`` with seed ``m``; into ``run_dir`` when given
    (``copy.json`` first, ``DONE`` last). Returns the trained copy and its training seconds.

    Raises:
        BnmemError: the user's training function returned something other than a model of the copy's
            architecture.
    """
    from bnmem.train import train_model
    from bnmem.train.trainer import MODEL

    if run_dir is not None and identity is not None:
        io.write_json(Path(run_dir) / COPY_FILE, identity)
    if training.fn is None:
        run = train_model(net, ds, training.train, seed=m, run_dir=run_dir, train_idx=idx, measure=False,
                          progress=f"shadow {m}" if progress else False)
        return run.model, run.seconds
    from torch.utils.data import TensorDataset

    from bnmem.threads import torch_threads

    if progress:
        print(f"shadow {m}: training with {training.fn_name}", file=sys.stderr, flush=True)
    t = torch.as_tensor(np.asarray(idx, dtype=np.int64))
    data = TensorDataset(ds.x_train[t], ds.y_train[t])
    with torch_threads(training.train.threads):
        torch.manual_seed(m)
        t0 = time.perf_counter()
        trained = training.fn(net.to(training.train.device).train(), data, m)
        seconds = time.perf_counter() - t0
    check_trained(trained, net, training.fn_name)
    if run_dir is not None:
        io.save_torch(Path(run_dir) / MODEL, trained.state_dict())
        io.write_json(Path(run_dir) / "history.json", [])
        io.mark_done(run_dir, {"seconds": seconds, "trainer": training.fn_name})
    return trained, seconds


def check_trained(trained: Any, fresh: nn.Module, name: str | None) -> None:
    """The training function's return value is a model of the copy's architecture.

    Raises:
        BnmemError: anything else (one line naming the function and the signature).
    """
    if not isinstance(trained, nn.Module):
        raise BnmemError(f"the training function {name} returned {type(trained).__name__}, not the trained model; "
                         f"it must be {TRAIN_FN_SIGNATURE}")
    want, got = set(fresh.state_dict()), set(trained.state_dict())
    if want != got:
        raise BnmemError(f"the training function {name} returned a model of another architecture "
                         f"({len(got ^ want)} state entries differ from the copy it was given); it must return "
                         f"the model it was given, trained")


def trained_copy(model: nn.Module, ds: OutlierDataset, keep: np.ndarray, training: CopyTraining | TrainConfig,
                 m: int, out: Path | None, progress: bool = False,
                 copies: CopySet | None = None) -> tuple[nn.Module, int, int, float, bool]:
    """Copy ``m``, trained on its keep-matrix half: loaded when its folder says ``DONE``, else trained here.

    Returns:
        The trained copy, :func:`fresh_copy`'s counts of reset / all parameter tensors, the
        seconds its training took (recorded in ``DONE`` for a loaded copy) and whether it was trained now.
    """
    from bnmem.train import load_finished

    training = training if isinstance(training, CopyTraining) else CopyTraining(training)
    net, n_reset, n_params = fresh_copy(model, seed=m)
    if out is not None and copies is None:
        copies = CopySet.of(model, ds, keep, training)
    run_dir = None if out is None else copy_dir(out, copies.keys[m])
    if run_dir is not None and io.is_done(run_dir):
        run = load_finished(net, run_dir)
        return run.model, n_reset, n_params, run.seconds, False
    trained, seconds = train_one(net, ds, np.flatnonzero(keep[m]), m, training, run_dir,
                                 None if copies is None else copies.identities[m], progress)
    return trained, n_reset, n_params, seconds, True


@dataclass
class CopyQueries:
    """What the shadow copies answered, stacked over copies (model m first index), for the attacks.

    Attributes:
        views: the query view names.
        phi: φ float64 [M, n_train, n_views]; ``population_phi`` the same on the test split.
        accuracy: per copy, :meth:`~bnmem.shadow.query.ModelQuery.accuracy`.
        pred: predicted class int16 [M, n_train, n_views] (memorization scores); None if not recorded.
        reset: parameter tensors reset by :func:`fresh_copy` and their total (the same for every copy).
        seconds: the copies' training seconds, summed (what :func:`copy_cost` estimates).
        trained: how many copies were trained by this call (the others were finished in the folder).
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
    trained: int = 0
    held_out_phi: np.ndarray | None = None


def query_copies(model: nn.Module, ds: OutlierDataset, keep: np.ndarray, train: TrainConfig | CopyTraining,
                 out: Path | None = None, executor: Any = None, progress: bool = False,
                 options: QueryOptions = QueryOptions(), copies: CopySet | None = None,
                 held_out: tuple[torch.Tensor, torch.Tensor] | None = None) -> CopyQueries:
    """Train (or load) the M = ``keep.shape[0]`` shadow copies of ``model`` and query each on ``ds``.

    Args:
        model: the model whose architecture is copied (a pickled ``nn.Module``, not TorchScript).
        ds: the data; copy m trains on ``np.flatnonzero(keep[m])``.
        keep: the keep matrix [M, n_train].
        train: the copies' recipe (bnmem's trainer) or a :class:`CopyTraining` (its device is where they
            train and are queried).
        out: folder for the copies (each under its key, reused by any later call that needs it); None
            trains them in memory.
        executor: train the unfinished copies through it first (needs ``out``); None trains them here,
            one after another. The copies are the same either way.
        progress: progress bars.
        options: BN mode at query time (eval by default) and batch-mode batches.
        copies: the copies' keys (:meth:`CopySet.of`), when the caller has them already.
        held_out: ``(x, y)`` of examples no copy trains on, also queried on every copy (the target-model audit).

    Returns:
        The stacked φ, per-copy accuracies and views.
    """
    training = train if isinstance(train, CopyTraining) else CopyTraining(train)
    if out is not None and copies is None:
        copies = CopySet.of(model, ds, keep, training)
    if executor is not None and out is not None:
        train_copies(model, ds, keep, training, out, executor, copies)
    views = copy_views(training.train, ds)
    phi, population_phi, accuracy, reset, pred, seconds, trained, held_phi = [], [], [], (0, 0), [], 0.0, 0, []
    device = training.train.device
    inputs = device_inputs(ds, device)  # once, not once per copy
    for m in range(keep.shape[0]):
        net, *reset, took, now = trained_copy(model, ds, keep, training, m, out, progress, copies)
        seconds, trained = seconds + took, trained + now
        q: ModelQuery = query_model(net.to(device), ds, views, options, inputs)
        phi.append(q.phi)  # φ only: a copy's full logits are C times larger
        population_phi.append(q.population_phi)
        pred.append(q.view_pred)
        accuracy.append(q.accuracy(ds, keep[m]))
        if held_out is not None:
            held_phi.append(phi_from_logits_block(query_logits(net, held_out[0], views, options), held_out[1].numpy()))
    return CopyQueries(views=[name for name, _ in views], phi=np.stack(phi), population_phi=np.stack(population_phi),
                       accuracy=accuracy, reset=(reset[0], reset[1]), pred=np.stack(pred), seconds=seconds,
                       trained=trained, held_out_phi=np.stack(held_phi) if held_out is not None else None)


# Optimizer steps timed for the cost estimate (after one untimed warm-up run of the same length).
COST_PROBE_STEPS = 6
COST_TIMED_RUNS = 3


def trainer_steps(n: int, batch_size: int) -> int:
    """Optimizer steps bnmem's trainer takes in one epoch over ``n`` examples: full batches only
    (:func:`bnmem.train.batching.epoch_batches` drops the last partial one; fewer than a batch: one)."""
    return n // min(batch_size, max(n, 1)) if n else 0


def copy_cost(model: nn.Module, ds: OutlierDataset, keep: np.ndarray, train: TrainConfig | CopyTraining,
              pending: list[int] | None = None) -> dict[str, Any]:
    """What training the shadow copies will take: steps, and a time estimate from a few timed training steps.

    A fresh copy trains one short epoch of :data:`COST_PROBE_STEPS` batches through the very
    trainer the copies use (recipe, regularizer, threads and device included), once to warm up
    and :data:`COST_TIMED_RUNS` times timed; the median training-loop seconds per step times the
    optimizer steps the pending copies take (full batches only, as the trainer takes them) is the
    estimate (checked against :attr:`CopyQueries.seconds` in ``tests/test_audit_validation.py``).
    A user's training function is not timed ahead: its steps are its own.

    Args:
        keep: the keep matrix (copy m trains on row m's examples).
        pending: the copies left to train (None: all); the others are reused.

    Returns:
        ``{"models", "finished", "reused", "epochs", "examples_per_model", "steps", "seconds_per_step",
        "estimated_seconds", "parameters", "trainer", "text"}`` (steps and times None for a user's function).
    """
    training = train if isinstance(train, CopyTraining) else CopyTraining(train)
    train = training.train
    n_models = keep.shape[0]
    pending = list(range(n_models)) if pending is None else list(pending)
    reused = n_models - len(pending)
    sizes = sorted({int(keep[m].sum()) for m in range(n_models)})
    examples = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    n_params = sum(p.numel() for p in model.parameters())
    head = (f"membership: training {len(pending)} of {n_models} shadow copies ({type(model).__name__}, "
            f"{count_text(n_params)} parameters)")
    tail = f"; {reused} reused from earlier runs in this folder" if reused else ""
    base = {"models": n_models, "finished": reused, "reused": reused, "examples_per_model": sizes[0],
            "parameters": n_params, "trainer": training.describe()}
    if training.fn is not None:
        text = f"{head} with {training.describe()} on {examples} examples each{tail}"
        return {**base, "epochs": None, "steps": None, "seconds_per_step": None, "estimated_seconds": None,
                "text": text}
    steps = sum(train.epochs * trainer_steps(int(keep[m].sum()), train.batch_size) for m in pending)
    seconds_per_step = probe_seconds_per_step(model, ds, train, sizes[0]) if pending else None
    seconds = steps * seconds_per_step if seconds_per_step is not None else 0.0
    per_step = f", ~{seconds_per_step:.3f} s per step" if seconds_per_step is not None else ""
    text = (f"{head} for {train.epochs} epochs on {examples} examples each: {steps} steps of batch "
            f"{train.batch_size} on {train.device}{per_step}, about {duration_text(seconds)}{tail}")
    return {**base, "epochs": train.epochs, "steps": steps, "seconds_per_step": seconds_per_step,
            "estimated_seconds": seconds, "text": text}


def probe_seconds_per_step(model: nn.Module, ds: OutlierDataset, train: TrainConfig, per_model: int) -> float:
    """The median training-loop seconds per step of :data:`COST_TIMED_RUNS` short runs (after a warm-up)."""
    from bnmem.train import train_model

    idx = np.arange(min(COST_PROBE_STEPS * train.batch_size, per_model))
    probe = train.model_copy(update={"epochs": 1})
    timed = []
    for _ in range(1 + COST_TIMED_RUNS):  # the first run pays for allocations and kernel selection
        net, _, _ = fresh_copy(model, seed=0)
        run = train_model(net, ds, probe, seed=0, train_idx=idx, measure=False, progress=False)
        timed.append(run.seconds / max(trainer_steps(idx.size, train.batch_size), 1))
    return float(np.median(timed[1:]))  # the median: one run slowed by other work does not count


def duration_text(seconds: float) -> str:
    """'40 s', '6.8 min', '2.1 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
