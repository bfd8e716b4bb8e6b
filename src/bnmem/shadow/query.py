"""Querying the shadow models: views, BN mode, and the arrays the attacks read.

Every shadow model is queried on every training example under a fixed list of
views (identity; horizontal flip for natural images; shifts), with BN in the
configured mode:

- ``eval`` (default): running statistics; an example's logits do not depend on
  what else is in its batch.
- ``batch``: each BN layer normalizes with the statistics of the query batch
  (running statistics untouched). The batches are a seeded random permutation
  of the examples (``query_seed``, recorded in query.json), one view at a time,
  cut into ``ceil(n / query_batch)`` pieces of near-equal size
  (``np.array_split``), so no piece is a lone example and no batch is made of
  one kind of example (in index order the OOD examples, appended last, would
  fill the last batch); the test split uses the same rule. The LiRA reference
  code queries its models in training mode, i.e. with batch statistics; for a
  BN model that changes the answer, so every results file says which mode was
  used.

Every model is queried on the training examples (the attack candidates) and on
the test split (the RMIA population: data no model trained on). What is stored
is φ (:mod:`bnmem.attacks.phi`), float32, not the logits:

- ``phi.npy`` [n_models, n_examples, n_views], ``population_phi.npy``
  [n_models, n_test, n_views] (each with its float32 rounding residual
  ``*_lo.npy``, which LiRA needs for full precision) and ``population_labels.npy``;
- ``logits.npy`` [n_models, n_examples, n_views, n_classes] only with
  ``save_logits``.

Queries run through the executor too, one job per training chunk
(:func:`query_shadow_chunk`), writing ``query/<chunk>.*.npy`` and then its
settings file as the completion marker; :func:`query_models` assembles them next
to ``keep.npy``, ``labels.npy``, ``is_noisy.npy``, ``is_ood.npy`` and, last,
``query.json``, and then deletes the chunk arrays (the assembled files hold the
same numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import nn

from bnmem import io
from bnmem.data import OutlierDataset, model_shape
from bnmem.data.loaded import load_once
from bnmem.data.views import View
from bnmem.errors import BnmemError
from bnmem.attacks.phi import (
    LOGITS_FILE,
    PHI_FILE,
    POPULATION_PHI_FILE,
    NpyPhi,
    open_phi,
    lo_path,
    phi_from_logits_block,
    split_phi,
)
from bnmem.executors import Executor
from bnmem.shadow.config import ShadowConfig
from bnmem.shadow.training import (
    all_trained,
    ShadowChunk,
    chunk_name,
    load_shadow_model,
    prepare_norm_dir,
    shadow_keep,
)
from bnmem.measure.gamma_sigma import gamma_sigma_stats
from bnmem.measure.predict import bn_query_mode, to_layout
from bnmem.threads import torch_threads

QUERY_DIR = "query"
QUERY_FILE = "query.json"
POPULATION_LABELS_FILE = "population_labels.npy"
# Each model's predicted class per example and view (Feldman–Zhang top-1 memorization scores).
PRED_FILE = "pred.npy"
PRED_DTYPE = np.int16
POPULATION_NAME = "test split"
# Batch of an eval-mode query: a throughput choice only (no effect on the answer
# beyond float summation order, which is fixed for a given size).
EVAL_BATCH = 1024

class QuerySettings(Protocol):
    """How models are queried besides the views: what :func:`query_logits` reads
    (a :class:`~bnmem.shadow.config.ShadowConfig` is one, :class:`QueryOptions` another)."""

    query_bn_mode: Literal["eval", "batch"]
    query_seed: int

    def query_batch(self) -> int: ...


@dataclass(frozen=True)
class QueryOptions:
    """Query settings without a ShadowConfig (e.g. shadow copies of a user's model).

    Attributes:
        query_bn_mode: ``eval`` (running statistics) or ``batch`` (statistics of each query batch).
        query_seed: seed of the batch-mode permutation.
        query_batch_size: the batch-mode normalization batch.
    """

    query_bn_mode: Literal["eval", "batch"] = "eval"
    query_seed: int = 0
    query_batch_size: int = 128

    def query_batch(self) -> int:
        return self.query_batch_size


def query_batches(n: int, cfg: QuerySettings) -> list[np.ndarray]:
    """Index pieces of a query; in ``batch`` mode each is a BN normalization batch.

    ``eval`` mode: contiguous pieces in index order (the batch cannot change the
    answer). ``batch`` mode: near-equal pieces of a random permutation of
    0..n−1 drawn from ``cfg.query_seed``, so batch composition does not follow
    the dataset's order.
    """
    if not n:
        return []
    if cfg.query_bn_mode == "batch":
        order = np.random.default_rng(cfg.query_seed).permutation(n)
        return np.array_split(order, max(1, -(-n // cfg.query_batch())))
    return np.array_split(np.arange(n), max(1, -(-n // EVAL_BATCH)))


@torch.no_grad()
def query_logits(model: nn.Module, x: torch.Tensor, views: list[tuple[str, View]], cfg: QuerySettings) -> np.ndarray:
    """Logits of one model on ``x`` under every view.

    Args:
        model: the classifier (any device; ``x`` is moved to it).
        x: inputs [N, C, H, W] (or [N, ...] for an MLP, identity view only).
        views: from :meth:`ShadowConfig.query_views` (or :func:`bnmem.data.views.make_views`).
        cfg: query mode and batch size (:class:`QuerySettings`).

    Returns:
        float32 [N, n_views, n_classes].
    """
    device = next(model.parameters()).device
    pieces = query_batches(x.shape[0], cfg)
    per_view = []
    with bn_query_mode(model, cfg.query_bn_mode):
        for _, fn in views:
            xv = fn(x)
            out = None
            for b in pieces:
                idx = torch.as_tensor(b)
                z = model(to_layout(xv[idx].to(device))).float().cpu()
                if out is None:
                    out = torch.empty((x.shape[0],) + z.shape[1:], dtype=torch.float32)
                out[idx] = z  # back into example order (batch mode permutes)
            per_view.append(out)
    return torch.stack(per_view, dim=1).numpy()


def query_settings(cfg: ShadowConfig, ds: OutlierDataset | None = None) -> dict[str, Any]:
    """How the models are queried; stored with every query output and compared on reruns.

    ``ds`` None: the input shape from the data config alone (:func:`bnmem.data.model_shape`; nothing loaded).
    """
    shape = ds.input_shape if ds is not None else model_shape(cfg.data)[0]
    batch = cfg.query_bn_mode == "batch"
    return {
        "bn_mode": cfg.query_bn_mode,
        "bn_mode_note": (
            "BN layers use their running statistics (eval mode)" if not batch else
            f"BN layers normalize with the statistics of each query batch: a random permutation of the "
            f"examples (seed {cfg.query_seed}), one view at a time, in pieces of about {cfg.query_batch()} "
            "(running statistics untouched)"
        ) + "; the LiRA reference code queries in training mode (batch statistics)",
        "batch_size": cfg.query_batch() if batch else None,
        "batch_order": "seeded random permutation" if batch else None,
        "batch_seed": cfg.query_seed if batch else None,
        "views": [name for name, _ in cfg.query_views(shape)],
        "stored": ["phi", "phi_lo", "population_phi", "population_phi_lo", "pred"]
        + (["logits"] if cfg.save_logits else []),
        "population": POPULATION_NAME,
        "threads": cfg.train.threads,
    }


def _accuracy(pred: np.ndarray, y: np.ndarray, mask: np.ndarray) -> float | None:
    return float((pred[mask] == y[mask]).mean()) if mask.any() else None


@dataclass
class ModelQuery:
    """One model's answers on the training examples and the test split, under every view.

    Attributes:
        logits: float32 [n_train, n_views, n_classes].
        test_logits: float32 [n_test, n_views, n_classes].
        phi: the attack statistic φ (:mod:`bnmem.attacks.phi`), float64 [n_train, n_views].
        population_phi: φ on the test split (RMIA's population), float64 [n_test, n_views].
        pred: predicted class on the identity view, int [n_train].
        test_pred: the same on the test split.
        view_pred: predicted class under every view, int16 [n_train, n_views] (memorization scores).
    """

    logits: np.ndarray
    test_logits: np.ndarray
    phi: np.ndarray
    population_phi: np.ndarray
    pred: np.ndarray
    test_pred: np.ndarray
    view_pred: np.ndarray

    def accuracy(self, ds: OutlierDataset, keep_row: np.ndarray) -> dict[str, float | None]:
        """Accuracy on the model's IN and OUT examples, its IN noisy / OOD examples (against their
        training labels: the fraction it fitted) and the test split; None where a subset is empty."""
        y = ds.y_train.numpy()
        return {"train_in": _accuracy(self.pred, y, keep_row), "train_out": _accuracy(self.pred, y, ~keep_row),
                "noisy_in": _accuracy(self.pred, y, keep_row & ds.is_noisy),
                "ood_in": _accuracy(self.pred, y, keep_row & ds.is_ood),
                "test": float((self.test_pred == ds.y_test.numpy()).mean())}


def device_inputs(ds: OutlierDataset, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The training and test inputs on ``device`` (no copy when they are there already)."""
    return ds.x_train.to(device), ds.x_test.to(device)


def query_model(model: nn.Module, ds: OutlierDataset, views: list[tuple[str, View]],
                settings: QuerySettings, inputs: tuple[torch.Tensor, torch.Tensor] | None = None) -> ModelQuery:
    """Query one trained model on every training example and on the test split (:func:`query_logits`).

    φ is computed in float64 from the float32 logits; predictions come from the identity view.

    Args:
        model: the model, on the device its queries should run on.
        ds: the dataset (training examples with the labels the models trained on, test split).
        views: ``[(name, fn)]``, one of them ``identity``.
        settings: BN mode and batches (a :class:`~bnmem.shadow.config.ShadowConfig` or :class:`QueryOptions`).
        inputs: ``(x_train, x_test)`` already on the model's device, from :func:`device_inputs` (a caller
            querying many models moves the data once); None: moved here.
    """
    device = next(model.parameters()).device
    x_train, x_test = inputs if inputs is not None else device_inputs(ds, device)
    ident = [name for name, _ in views].index("identity")
    logits = query_logits(model, x_train, views, settings)
    test_logits = query_logits(model, x_test, views, settings)
    return ModelQuery(logits=logits, test_logits=test_logits,
                      phi=phi_from_logits_block(logits, ds.y_train.numpy()),
                      population_phi=phi_from_logits_block(test_logits, ds.y_test.numpy()),
                      pred=logits[:, ident].argmax(-1), test_pred=test_logits[:, ident].argmax(-1),
                      view_pred=logits.argmax(-1).astype(PRED_DTYPE))


def query_shadow_chunk(chunk: ShadowChunk) -> dict[str, Any]:
    """Executor job: query one chunk of trained shadow models on every training example.

    Writes ``query/<chunk>.phi.npy`` (float32 [n_chunk, n_examples, n_views]),
    ``query/<chunk>.population_phi.npy`` (the same on the test split),
    ``query/<chunk>.pred.npy`` (int16 [n_chunk, n_examples, n_views] predicted classes), with
    ``save_logits`` ``query/<chunk>.npy`` (float32 [n_chunk, n_examples,
    n_views, n_classes]), and then ``query/<chunk>.json`` (settings and
    per-model accuracies) as the marker.

    Args:
        chunk: the trained models to query (:class:`~bnmem.shadow.training.ShadowChunk`).

    Returns:
        The chunk's json content plus ``skipped``.
    """
    cfg = chunk.config
    norm, models, norm_dir = chunk.norm, list(chunk.models), Path(chunk.run_dir)
    settings = query_settings(cfg)
    marker = norm_dir / QUERY_DIR / f"{chunk_name(models)}.json"
    if marker.exists() and io.read_json(marker).get("settings") == settings:
        return {**io.read_json(marker), "skipped": True}  # finished: the data need not even be loaded
    ds = load_once(cfg.data)
    views = cfg.query_views(ds.input_shape)
    keep = shadow_keep(cfg, ds.n_train)
    phi = np.empty((len(models), ds.n_train, len(views)), dtype=np.float64)
    pop_phi = np.empty((len(models), int(ds.y_test.shape[0]), len(views)), dtype=np.float64)
    out = np.empty((len(models), ds.n_train, len(views), ds.num_classes), dtype=np.float32) if cfg.save_logits else None
    pred = np.empty((len(models), ds.n_train, len(views)), dtype=PRED_DTYPE)
    acc: dict[str, list] = {"train_in": [], "train_out": [], "noisy_in": [], "ood_in": [], "test": []}
    device = torch.device(cfg.train.device)
    inputs = device_inputs(ds, device)  # once per chunk, not once per model
    bn_ratios = []
    with torch_threads(cfg.train.threads):
        for i, m in enumerate(models):
            model = load_shadow_model(cfg, norm, norm_dir, ds, m).to(device)
            bn_ratios.append(bn_ratio_summary(model))  # while the model is loaded (before any batch-mode query)
            q = query_model(model, ds, views, cfg, inputs)
            # φ in float64 from the float32 logits, stored as float32 + float32 residual.
            phi[i], pop_phi[i], pred[i] = q.phi, q.population_phi, q.view_pred
            if out is not None:
                out[i] = q.logits
            for key, value in q.accuracy(ds, keep[m]).items():
                acc[key].append(value)
    base = norm_dir / QUERY_DIR / chunk_name(models)
    for name, arr in (("phi", phi), ("population_phi", pop_phi)):
        hi, lo = split_phi(arr)
        io.write_npy(base.with_name(f"{base.name}.{name}.npy"), hi)
        io.write_npy(base.with_name(f"{base.name}.{name}_lo.npy"), lo)
    io.write_npy(base.with_name(f"{base.name}.pred.npy"), pred)
    if out is not None:
        io.write_npy(base.with_name(base.name + ".npy"), out)
    info = {"norm": norm, "models": models, "settings": settings, "accuracy": acc,
            **({GAMMA_SIGMA_KEY: bn_ratios} if any(r is not None for r in bn_ratios) else {})}
    io.write_json(marker, info)  # last: marks the chunk's query as finished
    return {**info, "skipped": False}


# Where a query chunk's marker keeps each model's BN |γ|/σ summary (running σ), measured while it was loaded.
GAMMA_SIGMA_KEY = "gamma_sigma"


def bn_ratio_summary(model: nn.Module) -> dict[str, Any] | None:
    """The per-layer and overall |γ|/σ summary (running σ) of ``model``'s BN layers; None without BN.

    What the lira lens's ``shadow_gamma_sigma.json`` spreads over the shadow models
    (:func:`bnmem.measure.gamma_sigma.gamma_sigma_stats`, reduced to the numbers it reads).
    """
    stats = gamma_sigma_stats(model, mode="running")
    if not stats["layers"]:
        return None
    return {"layers": {name: {k: layer[k] for k in ("n_channels", "median_ratio", "frac_above_1")}
                       for name, layer in stats["layers"].items()},
            "summary": {k: stats["summary"][k] for k in ("frac_above_1", "median_ratio", "layers_median_above_1")}}


def chunk_bn_ratios(cfg: ShadowConfig, norm_dir: str | Path) -> list[dict[str, Any]] | None:
    """Every model's :func:`bn_ratio_summary` from the query chunks' markers, in model order; None when a
    marker lacks them (a run queried before they were recorded)."""
    out: list[dict[str, Any]] = []
    for c in cfg.chunks():
        marker = Path(norm_dir) / QUERY_DIR / f"{chunk_name(c)}.json"
        ratios = io.read_json(marker).get(GAMMA_SIGMA_KEY) if marker.exists() else None
        if ratios is None or len(ratios) != len(c) or any(r is None for r in ratios):
            return None
        out += ratios
    return out


def query_models(cfg: ShadowConfig, norm: str, norm_dir: str | Path, executor: Executor,
                 ds: OutlierDataset | None = None) -> dict[str, Any]:
    """Query every trained shadow model of ``norm`` and write the attack inputs into ``norm_dir``.

    Writes ``phi.npy``, ``population_phi.npy``, ``population_labels.npy``, ``pred.npy``,
    ``logits.npy`` (only with ``save_logits``), ``keep.npy``, ``labels.npy``
    (the labels the models trained on), ``is_noisy.npy``, ``is_ood.npy`` and, last, ``query.json``
    (settings, view names, per-model accuracies). Chunks already queried with the
    same settings are reused; an existing ``query.json`` with the same settings
    means nothing is redone.

    Args:
        cfg: the configuration (its query settings are used).
        norm: the norm.
        norm_dir: the norm's directory, holding finished shadow models.
        executor: where the query jobs run.
        ds: the dataset, if already loaded.

    Returns:
        The content of ``query.json``.

    Raises:
        BnmemError: shadow models are missing or another configuration lives in ``norm_dir``.
    """
    norm_dir = prepare_norm_dir(cfg, norm, norm_dir)
    if not all_trained(cfg, norm_dir):
        raise BnmemError(f"not every shadow model in {norm_dir} is trained; run train_shadow_models first")
    ds = ds if ds is not None else load_once(cfg.data)
    settings = query_settings(cfg, ds)
    final = norm_dir / QUERY_FILE
    if final.exists() and io.read_json(final).get("settings") == settings:
        return io.read_json(final)
    chunks = [ShadowChunk.of(cfg, norm, norm_dir, c) for c in cfg.chunks()]
    summaries = executor.map(query_shadow_chunk, chunks, desc=f"{norm} queries", resources={"num_cpus": cfg.train.threads})
    return assemble(cfg, norm, norm_dir, ds, settings, summaries)


def _stack(path: Path, parts: list[tuple[list[int], Path]], shape: tuple[int, ...], dtype=np.float32) -> None:
    """Stack the chunks' arrays along models into one ``.npy`` (float32, or int16 predictions), through a
    memmap (a CIFAR-scale array need not fit in memory twice)."""
    with io.atomic_path(path) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        for models, part in parts:
            out[models[0] : models[-1] + 1] = np.load(part)
        out.flush()
        del out


def _chunk_file(norm_dir: Path, models: list[int], suffix: str) -> Path:
    return norm_dir / QUERY_DIR / f"{chunk_name(models)}{suffix}"


def assemble(cfg: ShadowConfig, norm: str, norm_dir: Path, ds: OutlierDataset, settings: dict[str, Any],
             summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack the chunks' φ (and logits) into the norm's arrays, write the rest and ``query.json``.

    The chunk arrays are deleted once ``query.json`` is written: the assembled
    files hold the same numbers, and keeping both doubled the disk of a run.
    """
    n_views = len(settings["views"])
    chunks = cfg.chunks()
    for c, summary in zip(chunks, summaries):
        if summary.get("settings") != settings:
            raise BnmemError(f"query of models {c[0]}-{c[-1]} in {norm_dir} used other settings")
    m, n_test = cfg.shadow_models, int(ds.y_test.shape[0])
    stored = {}
    for name, shape in ((PHI_FILE, (m, ds.n_train, n_views)), (POPULATION_PHI_FILE, (m, n_test, n_views))):
        stem = name[: -len(".npy")]
        stored[name] = (f".{stem}.npy", shape)
        stored[lo_path(name).name] = (f".{stem}_lo.npy", shape)
    if cfg.save_logits:
        stored[LOGITS_FILE] = (".npy", (m, ds.n_train, n_views, ds.num_classes))
    stored[PRED_FILE] = (".pred.npy", (m, ds.n_train, n_views))
    for name, (suffix, shape) in stored.items():
        _stack(norm_dir / name, [(c, _chunk_file(norm_dir, c, suffix)) for c in chunks], shape,
               PRED_DTYPE if name == PRED_FILE else np.float32)
    if not cfg.save_logits and (norm_dir / LOGITS_FILE).exists():
        (norm_dir / LOGITS_FILE).unlink()  # from an earlier query with other settings: stale now
    io.write_npy(norm_dir / "keep.npy", shadow_keep(cfg, ds.n_train))
    io.write_npy(norm_dir / "labels.npy", ds.y_train.numpy().astype(np.int64))
    io.write_npy(norm_dir / POPULATION_LABELS_FILE, ds.y_test.numpy().astype(np.int64))
    io.write_npy(norm_dir / "is_noisy.npy", ds.is_noisy.astype(bool))
    io.write_npy(norm_dir / "is_ood.npy", ds.is_ood.astype(bool))
    accuracy: dict[str, list] = {}
    for summary in summaries:
        for key, values in summary["accuracy"].items():
            accuracy.setdefault(key, []).extend(values)
    info = {
        "norm": norm,
        "settings": settings,
        "shape": [m, ds.n_train, n_views],
        "population_shape": [m, n_test, n_views],
        "model_seeds": cfg.model_seeds(),
        "keep_seed": cfg.keep_seed,
        "accuracy": accuracy,
    }
    io.write_json(norm_dir / QUERY_FILE, info)
    for c in chunks:
        for suffix, _ in stored.values():
            _chunk_file(norm_dir, c, suffix).unlink(missing_ok=True)
    return info


def load_attack_inputs(norm_dir: str | Path) -> dict[str, Any]:
    """What :func:`query_models` wrote, for the attacks (φ as block readers, never loaded whole).

    Returns:
        ``keep``, ``labels``, ``is_noisy``, ``is_ood`` (arrays); ``phi`` (a
        :class:`~bnmem.attacks.phi.PhiSource`: ``phi.npy``, or φ derived per block
        from a legacy ``logits.npy``); ``population_phi`` (a source, or None for
        a run directory written before populations were queried).

    Raises:
        BnmemError: the directory has no finished query.
    """
    norm_dir = Path(norm_dir)
    if not (norm_dir / QUERY_FILE).exists():
        raise BnmemError(f"{norm_dir} holds no finished query (query.json missing)")
    out: dict[str, Any] = {name: np.load(norm_dir / f"{name}.npy") for name in ("keep", "labels", "is_noisy", "is_ood")}
    out["phi"] = open_phi(norm_dir, out["labels"])
    pop = norm_dir / POPULATION_PHI_FILE
    out["population_phi"] = NpyPhi(pop) if pop.exists() else None
    return out
