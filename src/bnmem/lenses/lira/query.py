"""Querying the shadow models: views, BN mode, and the arrays the attacks read.

Every shadow model is queried on every training example under a fixed list of
views (identity; horizontal flip for natural images; shifts), with BN in the
configured mode:

- ``eval`` (default): running statistics; an example's logits do not depend on
  what else is in its batch.
- ``batch``: each BN layer normalizes with the statistics of the query batch
  (running statistics untouched). The batches are the training examples in
  index order, one view at a time, cut into ``ceil(n / query_batch)`` contiguous
  pieces of near-equal size (``np.array_split``), so no piece is a lone
  example; test-set accuracy uses the same rule on the test split. The LiRA
  reference code queries its models in training mode, i.e. with batch
  statistics; for a BN model that changes the answer, so every results file
  says which mode was used.

Queries run through the executor too, one job per training chunk
(:func:`query_shadow_chunk`), writing ``query/<chunk>.npy`` and then its
settings file as the completion marker; :func:`query_models` assembles them into
``logits.npy`` [n_models, n_examples, n_views, n_classes] float32 next to
``keep.npy``, ``labels.npy``, ``is_noisy.npy``, ``is_ood.npy`` and ``query.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bnmem import io
from bnmem.data import OutlierDataset, load_dataset
from bnmem.errors import BnmemError
from bnmem.executors import Executor
from bnmem.lenses.lira.config import LiraConfig
from bnmem.lenses.lira.shadow import (
    all_trained,
    chunk_name,
    chunk_spec,
    load_shadow_model,
    prepare_norm_dir,
    shadow_keep,
)
from bnmem.measure.predict import bn_query_mode, to_layout
from bnmem.train.threads import torch_threads

QUERY_DIR = "query"
QUERY_FILE = "query.json"
# Batch of an eval-mode query: a throughput choice only (no effect on the answer
# beyond float summation order, which is fixed for a given size).
EVAL_BATCH = 1024

View = Callable[[torch.Tensor], torch.Tensor]


def shift_size(height: int) -> int:
    """Shift of the ``shift`` views: 1 pixel for small images (8x8 digits), 2 from 28 px up."""
    return 2 if height >= 28 else 1


def shifted(x: torch.Tensor, dx: int, dy: int) -> torch.Tensor:
    """``x`` [N, C, H, W] moved by ``dx`` pixels right and ``dy`` down, reflect-padded.

    Reflection (as the LiRA reference's shift views) keeps border pixels in the
    image's own distribution; zero padding would paint the mean colour in.
    """
    s = max(abs(dx), abs(dy))
    if s == 0:
        return x
    h, w = x.shape[-2:]
    padded = F.pad(x, (s, s, s, s), mode="reflect")
    return padded[..., s - dy : s - dy + h, s - dx : s - dx + w]


def make_views(views: list[str], input_shape: tuple[int, int, int]) -> list[tuple[str, View]]:
    """The expanded list of named views.

    ``identity`` and (if asked) ``flip`` are the base images; ``shift`` adds the
    four axis shifts (right, left, down, up) of each base image.

    Args:
        views: canonical view names of a :class:`LiraConfig`.
        input_shape: (C, H, W).

    Returns:
        ``[(name, fn)]``, e.g. ``identity``, ``shift(+1,0)``, ...
    """
    bases: list[tuple[str, View]] = [("identity", lambda x: x)]
    if "flip" in views:
        bases.append(("flip", lambda x: x.flip(-1)))
    out = list(bases)
    if "shift" in views:
        s = shift_size(input_shape[1])
        for base, fn in bases:
            for dx, dy in ((s, 0), (-s, 0), (0, s), (0, -s)):
                name = f"shift({dx:+d},{dy:+d})" if base == "identity" else f"{base}+shift({dx:+d},{dy:+d})"
                out.append((name, lambda x, fn=fn, dx=dx, dy=dy: shifted(fn(x), dx, dy)))
    return out


def query_batches(n: int, cfg: LiraConfig) -> list[np.ndarray]:
    """Contiguous index pieces of a query; in ``batch`` mode each is a BN normalization batch."""
    size = cfg.query_batch() if cfg.query_bn_mode == "batch" else EVAL_BATCH
    return np.array_split(np.arange(n), max(1, -(-n // size))) if n else []


@torch.no_grad()
def query_logits(model: nn.Module, x: torch.Tensor, views: list[tuple[str, View]], cfg: LiraConfig) -> np.ndarray:
    """Logits of one model on ``x`` under every view.

    Args:
        model: the classifier (any device; ``x`` is moved to it).
        x: inputs [N, C, H, W] (or [N, ...] for an MLP, identity view only).
        views: from :meth:`LiraConfig.query_views` (or :func:`make_views`).
        cfg: query mode and batch size.

    Returns:
        float32 [N, n_views, n_classes].
    """
    device = next(model.parameters()).device
    pieces = query_batches(x.shape[0], cfg)
    per_view = []
    with bn_query_mode(model, cfg.query_bn_mode):
        for _, fn in views:
            xv = fn(x)
            out = [model(to_layout(xv[torch.as_tensor(b)].to(device))).float().cpu() for b in pieces]
            per_view.append(torch.cat(out))
    return torch.stack(per_view, dim=1).numpy()


def query_settings(cfg: LiraConfig, ds: OutlierDataset) -> dict[str, Any]:
    """How the models are queried; stored with every query output and compared on reruns."""
    return {
        "bn_mode": cfg.query_bn_mode,
        "bn_mode_note": (
            "BN layers use their running statistics (eval mode)" if cfg.query_bn_mode == "eval" else
            f"BN layers normalize with the statistics of each query batch: training examples in index order, "
            f"one view at a time, in contiguous pieces of about {cfg.query_batch()} (running statistics untouched)"
        ) + "; the LiRA reference code queries in training mode (batch statistics)",
        "batch_size": cfg.query_batch() if cfg.query_bn_mode == "batch" else None,
        "views": [name for name, _ in cfg.query_views(ds.input_shape)],
        "threads": cfg.train.threads,
    }


def _accuracy(pred: np.ndarray, y: np.ndarray, mask: np.ndarray) -> float | None:
    return float((pred[mask] == y[mask]).mean()) if mask.any() else None


def query_shadow_chunk(spec: dict[str, Any]) -> dict[str, Any]:
    """Executor job: query one chunk of trained shadow models on every training example.

    Writes ``query/<chunk>.npy`` (float32 [n_chunk, n_examples, n_views,
    n_classes]) and then ``query/<chunk>.json`` (settings and per-model
    accuracies) as the marker.

    Args:
        spec: as for :func:`~bnmem.lenses.lira.shadow.train_shadow_chunk`.

    Returns:
        The chunk's json content plus ``skipped``.
    """
    cfg = LiraConfig.model_validate(spec["config"])
    norm, models, norm_dir = spec["norm"], [int(m) for m in spec["models"]], Path(spec["run_dir"])
    ds = load_dataset(cfg.data)
    settings = query_settings(cfg, ds)
    marker = norm_dir / QUERY_DIR / f"{chunk_name(models)}.json"
    if marker.exists() and io.read_json(marker).get("settings") == settings:
        return {**io.read_json(marker), "skipped": True}
    views = cfg.query_views(ds.input_shape)
    keep = shadow_keep(cfg, ds.n_train)
    y = ds.y_train.numpy()
    ident = [name for name, _ in views].index("identity")
    out = np.empty((len(models), ds.n_train, len(views), ds.num_classes), dtype=np.float32)
    acc: dict[str, list] = {"train_in": [], "train_out": [], "noisy_in": [], "ood_in": [], "test": []}
    device = torch.device(cfg.train.device)
    with torch_threads(cfg.train.threads):
        x, x_test = ds.x_train.to(device), ds.x_test.to(device)
        for i, m in enumerate(models):
            model = load_shadow_model(cfg, norm, norm_dir, ds, m).to(device)
            out[i] = query_logits(model, x, views, cfg)
            pred = out[i, :, ident].argmax(-1)
            test_pred = query_logits(model, x_test, views[ident : ident + 1], cfg)[:, 0].argmax(-1)
            acc["train_in"].append(_accuracy(pred, y, keep[m]))
            acc["train_out"].append(_accuracy(pred, y, ~keep[m]))
            acc["noisy_in"].append(_accuracy(pred, y, keep[m] & ds.is_noisy))
            acc["ood_in"].append(_accuracy(pred, y, keep[m] & ds.is_ood))
            acc["test"].append(float((test_pred == ds.y_test.numpy()).mean()))
    io.write_npy(norm_dir / QUERY_DIR / f"{chunk_name(models)}.npy", out)
    info = {"norm": norm, "models": models, "settings": settings, "accuracy": acc}
    io.write_json(marker, info)  # last: marks the chunk's query as finished
    return {**info, "skipped": False}


def query_models(cfg: LiraConfig, norm: str, norm_dir: str | Path, executor: Executor,
                 ds: OutlierDataset | None = None) -> dict[str, Any]:
    """Query every trained shadow model of ``norm`` and write the attack inputs into ``norm_dir``.

    Writes ``logits.npy``, ``keep.npy``, ``labels.npy`` (the labels the models
    trained on), ``is_noisy.npy``, ``is_ood.npy`` and, last, ``query.json``
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
    ds = ds if ds is not None else load_dataset(cfg.data)
    settings = query_settings(cfg, ds)
    final = norm_dir / QUERY_FILE
    if final.exists() and io.read_json(final).get("settings") == settings:
        return io.read_json(final)
    specs = [chunk_spec(cfg, norm, norm_dir, c) for c in cfg.chunks()]
    summaries = executor.map(query_shadow_chunk, specs, desc=f"{norm} queries", resources={"num_cpus": cfg.train.threads})
    return assemble(cfg, norm, norm_dir, ds, settings, summaries)


def assemble(cfg: LiraConfig, norm: str, norm_dir: Path, ds: OutlierDataset, settings: dict[str, Any],
             summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack the chunks' logits into ``logits.npy`` and write the other arrays and ``query.json``."""
    n_views = len(settings["views"])
    shape = (cfg.shadow_models, ds.n_train, n_views, ds.num_classes)
    # Written through a memmap: a CIFAR-scale logits array need not fit in memory twice.
    with io.atomic_path(norm_dir / "logits.npy") as tmp:
        logits = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape)
        for c, summary in zip(cfg.chunks(), summaries):
            if summary.get("settings") != settings:
                raise BnmemError(f"query of models {c[0]}-{c[-1]} in {norm_dir} used other settings")
            logits[c[0] : c[-1] + 1] = np.load(norm_dir / QUERY_DIR / f"{chunk_name(c)}.npy")
        logits.flush()
        del logits
    io.write_npy(norm_dir / "keep.npy", shadow_keep(cfg, ds.n_train))
    io.write_npy(norm_dir / "labels.npy", ds.y_train.numpy().astype(np.int64))
    io.write_npy(norm_dir / "is_noisy.npy", ds.is_noisy.astype(bool))
    io.write_npy(norm_dir / "is_ood.npy", ds.is_ood.astype(bool))
    accuracy: dict[str, list] = {}
    for summary in summaries:
        for key, values in summary["accuracy"].items():
            accuracy.setdefault(key, []).extend(values)
    info = {
        "norm": norm,
        "settings": settings,
        "shape": list(shape),
        "model_seeds": cfg.model_seeds(),
        "keep_seed": cfg.keep_seed,
        "accuracy": accuracy,
    }
    io.write_json(norm_dir / QUERY_FILE, info)
    return info


def load_attack_inputs(norm_dir: str | Path) -> dict[str, np.ndarray]:
    """The arrays :func:`query_models` wrote: logits, keep, labels, is_noisy, is_ood.

    Raises:
        BnmemError: the directory has no finished query.
    """
    norm_dir = Path(norm_dir)
    if not (norm_dir / QUERY_FILE).exists():
        raise BnmemError(f"{norm_dir} holds no finished query (query.json missing)")
    return {name: np.load(norm_dir / f"{name}.npy") for name in ("logits", "keep", "labels", "is_noisy", "is_ood")}
