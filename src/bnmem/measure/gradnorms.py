"""Per-sample gradient norms: the L2 norm over all parameters of each example's loss gradient.

Two definitions, because a BN model in training mode couples the examples of a batch:

* ``eval`` (the default; docs/architecture.md, "Definitions"): the model in eval mode, BN normalizing with
  its running statistics; example i's gradient is ∇θ cross_entropy(f(x_i), y_i),
  a function of the example alone.
* ``batch``: the gradient of example i's own loss term when the forward pass
  normalizes with the statistics of a training-mode batch B containing it,
  ∇θ cross_entropy(f_B(x)_i, y_i) (running statistics untouched). It depends on
  which batch the example sits in; batches here are a seeded random partition
  of the measured examples into batches of the training batch size. For models
  without BN both definitions coincide.

Losses are single-example cross-entropies (not divided by any batch size); weight
decay is not part of the loss. Everything runs on a float64 copy of the model:
in float32 the p − 1 term of the cross-entropy gradient of a confidently
classified example is rounded to a few significant digits, or to zero.

Methods for ``eval``: ``ghost`` (per-layer identities, one batched
forward/backward; see :mod:`bnmem.measure.ghost`), ``vmap`` (``torch.func``:
vmap over grad of a functional_call), ``loop`` (one backward per example: the
slow, obviously correct oracle), ``auto`` (ghost where the layers allow it, else
vmap; the first chunk of ghost norms is checked against the loop on two
examples, and a mismatch falls back to vmap). For ``batch``: ``jacobian`` (all
rows of the per-batch Jacobian of the loss vector in one batched backward),
``rows`` (batched backwards of up to 32 examples' losses to the layer outputs only,
then every example's parameter gradient as one GEMM per layer: :mod:`bnmem.measure.batch_rows`), ``loop``
(one backward per example: the oracle) or ``auto`` (rows where the layers allow it,
self-checked against the loop on two examples per call, else the Jacobian).

Memory: the vectorized paths work in chunks sized from the model's parameter
count, its activation sizes and a budget (:mod:`bnmem.measure.memory`; default
a safe fraction of the free RAM or GPU memory); a budget that cannot hold one
example is a :class:`~bnmem.errors.BnmemError`.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from bnmem.errors import BnmemError
from bnmem.measure.batch_rows import rows_sq_norms, rows_unsupported
from bnmem.measure.ghost import GhostUnsupported, ghost_sq_norms, unsupported_reason
from bnmem.measure.memory import Footprint, default_budget, fit_chunk, fmt_bytes, footprint, parse_size
from bnmem.measure.predict import bn_query_mode
from bnmem.models.norms import batchnorm_layers

Definition = Literal["eval", "batch"]
DEFINITIONS = ("eval", "batch")
EVAL_METHODS = ("auto", "ghost", "vmap", "loop")
# The ghost self-check's tolerance (float64: the paths agree to ~1e-12 where they apply).
SELF_CHECK_RTOL = 1e-6
BATCH_METHODS = ("auto", "rows", "jacobian", "loop")


@dataclass
class GradNorms:
    """Per-sample gradient norms and how they were computed.

    Attributes:
        norms: float64 (N,) L2 norms; NaN for examples not measured.
        definition: ``eval`` or ``batch``.
        method: the method actually used (``ghost``, ``vmap``, ``loop``, ``jacobian``).
        batch_size: batch size of the ``batch`` definition (None for ``eval``).
        seed: seed of the ``batch`` definition's batch partition (None for ``eval``).
        chunk_size: examples per vectorized call (None for the loop).
        max_memory: the memory budget in bytes the chunks were sized for.
    """

    norms: np.ndarray
    definition: str
    method: str
    batch_size: int | None = None
    seed: int | None = None
    chunk_size: int | None = None
    max_memory: int | None = None

    def describe(self) -> dict:
        """Plain-data description for results files.

        The chunk size and memory budget are left out: they follow the free memory
        of the machine at that moment, not the science, and results must not change
        with them (a resumed run ends with the same bytes). :meth:`execution` has them.
        """
        d = {"definition": self.definition, "method": self.method, "dtype": "float64",
             "loss": "per-example cross-entropy (unreduced, no weight decay)"}
        if self.definition == "batch":
            d.update(batch_size=self.batch_size, batch_seed=self.seed)
        return d

    def execution(self) -> dict:
        """How the work was chunked (machine-dependent; for logs and the audit, not results files)."""
        if self.max_memory is None:
            return {}
        return {"chunk_size": self.chunk_size, "max_memory": fmt_bytes(self.max_memory)}


def float64_copy(model: nn.Module) -> nn.Module:
    """A float64 deep copy of ``model`` (parameters and buffers), leaving ``model`` untouched."""
    return copy.deepcopy(model).to(torch.float64)


def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _prepare(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if x.shape[0] != y.shape[0]:
        raise BnmemError(f"x has {x.shape[0]} examples but y has {y.shape[0]}")
    p = next(iter(_params(model).values()), None)
    if p is None:
        raise BnmemError("the model has no trainable parameters")
    return x.to(device=p.device, dtype=p.dtype), y.to(device=p.device, dtype=torch.long)


# --- eval definition -----------------------------------------------------------------


def loop_sq_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Oracle: one forward/backward per example, the model in eval mode.

    Args:
        model: the model (its dtype sets the precision).
        x, y: inputs (N, ...) and labels (N,).

    Returns:
        (N,) squared gradient norms.
    """
    x, y = _prepare(model, x, y)
    params = list(_params(model).values())
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    with bn_query_mode(model, "eval"), torch.enable_grad():
        for i in range(x.shape[0]):
            loss = F.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
            gs = torch.autograd.grad(loss, params)
            out[i] = sum(g.pow(2).sum() for g in gs)
    return out


def vmap_sq_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk_size: int = 256) -> torch.Tensor:
    """``torch.func``: vmap over grad of a functional_call, the model in eval mode.

    Args:
        model: any model (BN layers use their running statistics).
        x, y: inputs (N, ...) and labels (N,).
        chunk_size: examples per vmap call (memory: chunk_size x #params per-sample grads).

    Returns:
        (N,) squared gradient norms.
    """
    x, y = _prepare(model, x, y)
    params = {n: p.detach() for n, p in _params(model).items()}

    def loss_one(ps: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, ps, (xi.unsqueeze(0),)), yi.unsqueeze(0))

    per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))
    out = []
    with bn_query_mode(model, "eval"), warnings.catch_warnings():
        # attention kernels without a vmap batching rule run through torch's slower fallback: still exact
        warnings.filterwarnings("ignore", message=".*performance drop because we have not yet implemented the batching")
        for i in range(0, x.shape[0], chunk_size):
            gs = per_sample(params, x[i : i + chunk_size], y[i : i + chunk_size])
            out.append(sum(torch.linalg.vector_norm(g.flatten(1), dim=1).pow(2) for g in gs.values()))
            del gs  # the chunk's per-sample gradients go before the next chunk's arrive
    return torch.cat(out) if out else x.new_empty(0)


def ghost_total_sq_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk_size: int = 256,
                         self_check: bool = True) -> torch.Tensor:
    """Ghost-norm identities (see :mod:`bnmem.measure.ghost`), the model in eval mode.

    Args:
        model: the model.
        x, y: inputs (N, ...) and labels (N,).
        chunk_size: examples per batched forward/backward.
        self_check: compare the first chunk's first two examples with the per-example
            loop (catches a layer that mixes the examples of a batch, or whose batch
            is not dim 0, which the per-module vmap identity cannot see).

    Raises:
        GhostUnsupported: a layer the identities do not cover, or a failed self-check.
    """
    x, y = _prepare(model, x, y)
    out = []
    with bn_query_mode(model, "eval"):
        for i in range(0, x.shape[0], chunk_size):
            parts = ghost_sq_norms(model, x[i : i + chunk_size], y[i : i + chunk_size])
            total = torch.stack(list(parts.values())).sum(0)
            if i == 0 and self_check:
                _check_against_loop(model, x[:2], y[:2], total[:2])
            out.append(total)
    return torch.cat(out) if out else x.new_empty(0)


def _check_against_loop(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ghost: torch.Tensor) -> None:
    ref = loop_sq_norms(model, x, y)
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    if not torch.allclose(ghost, ref, rtol=SELF_CHECK_RTOL, atol=SELF_CHECK_RTOL * scale):
        raise GhostUnsupported(f"ghost norms disagree with the per-example loop on a probe "
                               f"({ghost.tolist()} vs {ref.tolist()}): a layer mixes examples or its batch is not dim 0")


def chunk_for_budget(model: nn.Module, x: torch.Tensor, method: str, max_memory: int | None,
                     chunk_size: int | None = None) -> tuple[int, Footprint]:
    """Chunk size of ``method`` on ``model`` within ``max_memory`` bytes (None: the default budget).

    Raises:
        BnmemError: the budget cannot hold one example.
    """
    p = next(iter(_params(model).values()))
    budget = default_budget(p.device) if max_memory is None else max_memory
    fp = footprint(model, x[:1].to(device=p.device, dtype=p.dtype))
    return fit_chunk(fp, method, budget, chunk_size), fp


def eval_sq_norms(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, method: str = "auto", chunk_size: int | None = None,
    max_memory: int | None = None,
) -> tuple[torch.Tensor, str]:
    """Squared eval-definition norms by ``method``; returns them and the method used.

    Args:
        model: the model (its dtype sets the precision).
        x, y: inputs and labels.
        method: ``auto``, ``ghost``, ``vmap`` or ``loop``.
        chunk_size: at most this many examples per vectorized call (None: as the budget allows, up to 256).
        max_memory: budget in bytes for the chunks (None: a safe fraction of the free memory).

    Raises:
        BnmemError: unknown method, ``ghost`` asked for a model it does not cover,
            or a budget that cannot hold one example.
    """
    if method not in EVAL_METHODS:
        raise BnmemError(f"unknown gradient-norm method {method!r}; choose one of {', '.join(EVAL_METHODS)}")
    if x.shape[0] == 0:
        return x.new_empty(0, dtype=torch.float64), "loop" if method == "loop" else "vmap" if method == "vmap" else "ghost"
    if method == "loop":
        if not isinstance(model, torch.jit.ScriptModule):
            chunk_for_budget(model, x, "loop", max_memory)
        return loop_sq_norms(model, x, y), "loop"
    if method == "vmap":
        return vmap_sq_norms(model, x, y, chunk_for_budget(model, x, "vmap", max_memory, chunk_size)[0]), "vmap"
    with bn_query_mode(model, "eval"):
        reason = unsupported_reason(model)
    if reason is not None and method == "ghost":
        raise BnmemError(f"the ghost-norm path does not cover this model: {reason}; use method 'vmap'")
    if reason is None:
        chunk = chunk_for_budget(model, x, "ghost", max_memory, chunk_size)[0]
        try:
            return ghost_total_sq_norms(model, x, y, chunk), "ghost"
        except GhostUnsupported as e:
            if method == "ghost":
                raise BnmemError(f"the ghost-norm path does not cover this model: {e}; use method 'vmap'") from e
            warnings.warn(f"ghost norms not applicable ({e}); falling back to vmap", stacklevel=2)
    else:
        warnings.warn(f"ghost norms not applicable ({reason}); falling back to vmap", stacklevel=2)
    return vmap_sq_norms(model, x, y, chunk_for_budget(model, x, "vmap", max_memory, chunk_size)[0]), "vmap"


# --- batch-coupled definition --------------------------------------------------------


def batch_partition(n: int, batch_size: int, seed: int) -> list[torch.Tensor]:
    """A seeded random partition of positions 0..n-1 into batches of exactly ``batch_size``.

    The last batch is filled up with examples of earlier batches (whose norms are
    already measured), so every example is normalized with a full-size batch
    instead of a small leftover one. ``batch_size >= n`` gives one batch.

    Raises:
        BnmemError: fewer than 2 examples or a batch size below 2 (BN needs 2).
    """
    if n < 2 or batch_size < 2:
        raise BnmemError(f"the batch definition needs at least 2 examples and batch size >= 2 (got {n}, {batch_size})")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    bs = min(batch_size, n)
    batches = [perm[i : i + bs] for i in range(0, n - bs + 1, bs)]
    if n % bs:
        batches.append(perm[n - bs :])
    return batches


def _batch_losses(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(xb), yb, reduction="none")


def batch_sq_norms_one(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, method: str = "jacobian",
                       rows: list[int] | None = None, max_bytes: int | None = None) -> torch.Tensor:
    """Squared batch-definition norms of the examples of one batch.

    The model must already be in BN batch mode (see :func:`bnmem.measure.predict.bn_query_mode`).

    Args:
        model: the model.
        xb, yb: one batch.
        method: ``rows`` (:func:`bnmem.measure.batch_rows.rows_sq_norms`), ``jacobian``
            (is_grads_batched backward over the rows of the identity) or ``loop`` (one
            backward of loss_i per example).
        rows: positions in the batch to measure (default: all); the batch is always normalized as a whole.
        max_bytes: ``rows`` only: memory for its stacked per-row gradients (None: its default).

    Returns:
        (len(rows),) squared norms of ∇θ loss_i with the forward pass normalized by this batch.
    """
    if method == "rows":
        return rows_sq_norms(model, xb, yb, rows, max_bytes)
    params = list(_params(model).values())
    with torch.enable_grad():
        losses = _batch_losses(model, xb, yb)
        rows = list(range(losses.shape[0])) if rows is None else list(rows)
        if method == "jacobian":
            eye = torch.eye(losses.shape[0], dtype=losses.dtype, device=losses.device)[rows]
            grads = torch.autograd.grad(losses, params, grad_outputs=eye, is_grads_batched=True)
            return sum(r.pow(2).flatten(1).sum(1) for r in grads)
        out = torch.empty(len(rows), dtype=losses.dtype, device=losses.device)
        for k, i in enumerate(rows):
            gs = torch.autograd.grad(losses[i], params, retain_graph=k < len(rows) - 1)
            out[k] = sum(g.pow(2).sum() for g in gs)
        return out


def _check_rows(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, rows: torch.Tensor) -> None:
    """The rows path against the loop on the batch's first two examples (a layer used in a way its
    identity does not cover would show here)."""
    ref = batch_sq_norms_one(model, xb, yb, "loop", [0, 1])
    if not torch.allclose(rows, ref, rtol=SELF_CHECK_RTOL, atol=SELF_CHECK_RTOL * float(ref.abs().max())):
        raise GhostUnsupported(f"batch rows disagree with the per-example loop ({rows.tolist()} vs {ref.tolist()})")


def _batch_method(model: nn.Module, x: torch.Tensor, batch_size: int, method: str, max_memory: int | None) -> str:
    """The method ``auto`` resolves to: rows where the layers allow, else the Jacobian if it fits, else the loop."""
    if method != "auto":
        return method
    _, fp = chunk_for_budget(model, x, "loop", max_memory)  # raises if not even the loop fits
    if rows_unsupported(model) is None:
        return "rows"
    budget = max_memory if max_memory is not None else default_budget(x.device)
    bs = min(batch_size, x.shape[0])
    return "loop" if fp.model + bs * (fp.per_example("vmap") + fp.params) > budget else "jacobian"


def batch_sq_norms(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int = 0, method: str = "auto",
    max_memory: int | None = None,
) -> tuple[torch.Tensor, str]:
    """Squared batch-definition norms of every example of ``x``; returns them and the method used.

    ``auto`` takes the rows path where every layer has a per-row identity
    (self-checked against the loop on the first batch; a mismatch falls back), else
    the batched Jacobian (batch size x parameters per-row gradients) when it fits
    ``max_memory`` bytes (None: the default budget), else the loop. Examples of the
    last batch already measured in an earlier one are not differentiated again.

    Raises:
        BnmemError: unknown method; too few examples; a budget too small for the loop.
    """
    if method not in BATCH_METHODS:
        raise BnmemError(f"unknown batch-definition method {method!r}; choose one of {', '.join(BATCH_METHODS)}")
    x, y = _prepare(model, x, y)
    if not batchnorm_layers(model):
        # Nothing couples the examples: the batch definition is the eval one.
        sq, used = eval_sq_norms(model, x, y, max_memory=max_memory)
        return sq, f"{used} (no BN: batch = eval)"
    if method == "rows" and rows_unsupported(model) is not None:
        raise BnmemError(f"the rows path does not cover this model: {rows_unsupported(model)}; use 'jacobian'")
    used = _batch_method(model, x, batch_size, method, max_memory)
    # The rows path's stacked gradients get half the budget (the float64 model and activations the rest).
    rows_bytes = (max_memory if max_memory is not None else default_budget(x.device)) // 2
    out = torch.full((x.shape[0],), float("nan"), dtype=x.dtype, device=x.device)
    with bn_query_mode(model, "batch"):
        for k, b in enumerate(batch_partition(x.shape[0], batch_size, seed)):
            b = b.to(x.device)
            new = torch.nonzero(torch.isnan(out[b])).ravel()
            if not new.numel():
                continue
            sq, used = _batch_rows(model, x[b], y[b], new.tolist(), used, method, k == 0, rows_bytes)
            out[b[new]] = sq
    return out, used


def _batch_rows(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, rows: list[int], used: str, method: str,
                check: bool, rows_bytes: int) -> tuple[torch.Tensor, str]:
    """One batch's rows by ``used``; under ``auto`` a failing rows path falls back to the Jacobian,
    a failing Jacobian to the loop (with a warning)."""
    if used == "rows" and method == "auto":
        try:
            sq = batch_sq_norms_one(model, xb, yb, "rows", rows, rows_bytes)
            if check and len(rows) >= 2 and rows[:2] == [0, 1]:
                _check_rows(model, xb, yb, sq[:2])
            return sq, used
        except GhostUnsupported as e:
            warnings.warn(f"batch rows not applicable ({e}); falling back to the batched Jacobian", stacklevel=3)
            used = "jacobian"
    try:
        return batch_sq_norms_one(model, xb, yb, used, rows), used
    except RuntimeError as e:
        if method != "auto" or used != "jacobian":
            raise
        # Some ops have no batching rule for the batched backward: use the loop.
        warnings.warn(f"batched Jacobian failed ({e}); falling back to a loop", stacklevel=3)
        return batch_sq_norms_one(model, xb, yb, "loop", rows), "loop"


# --- public entry point --------------------------------------------------------------


def per_sample_grad_norms(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    definition: Definition = "eval",
    method: str = "auto",
    batch_size: int = 64,
    seed: int = 0,
    subset: np.ndarray | None = None,
    chunk_size: int | None = None,
    max_memory: int | str | None = None,
) -> GradNorms:
    """L2 norm of each example's loss gradient over all trainable parameters, in float64.

    Works on a float64 copy: ``model`` (its weights, buffers and train/eval mode)
    is left exactly as it was.

    Args:
        model: any classifier returning logits.
        x: inputs (N, ...).
        y: labels (N,).
        definition: ``eval`` (running BN statistics) or ``batch`` (statistics of
            a training-mode batch containing the example); see the module doc.
        method: ``auto``/``ghost``/``vmap``/``loop`` for ``eval``,
            ``auto``/``jacobian``/``loop`` for ``batch``.
        batch_size: batch size of the ``batch`` definition.
        seed: seed of the ``batch`` definition's random batch partition.
        subset: measure only these example indices (others are NaN); the
            ``batch`` definition then draws its batches from the subset.
        chunk_size: at most this many examples per vectorized call of the
            ``eval`` methods (None: as many as ``max_memory`` allows, up to 256).
        max_memory: memory budget of the measurement, bytes or text such as
            ``"8GB"`` (None: half the free RAM, or GPU memory for a CUDA model).

    Returns:
        A :class:`GradNorms` with (N,) float64 norms.

    Raises:
        BnmemError: unknown definition or method, mismatched x/y, a model
            without parameters, too few examples for the ``batch`` definition, or
            a ``max_memory`` that cannot hold the model and one example.
    """
    if definition not in DEFINITIONS:
        raise BnmemError(f"unknown gradient definition {definition!r}; choose one of {', '.join(DEFINITIONS)}")
    n = x.shape[0]
    idx = np.arange(n) if subset is None else np.asarray(subset, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise BnmemError(f"subset indices must lie in [0, {n})")
    p = next(iter(model.parameters()), None)
    device = p.device if p is not None else torch.device("cpu")
    budget = default_budget(device) if max_memory is None else parse_size(max_memory)
    model_bytes = 8 * sum(t.numel() for t in (*model.parameters(), *model.buffers()))
    if model_bytes > budget:
        raise BnmemError(f"--max-memory {fmt_bytes(budget)} cannot hold the float64 copy of the model "
                         f"({fmt_bytes(model_bytes)})")
    m64 = float64_copy(model)
    xs, ys = x[torch.as_tensor(idx)], y[torch.as_tensor(idx)]
    chunk = None
    if definition == "eval":
        sq, used = eval_sq_norms(m64, xs, ys, method, chunk_size, budget)
        if used != "loop" and xs.shape[0]:
            chunk = chunk_for_budget(m64, xs, used, budget, chunk_size)[0]
    else:
        sq, used = batch_sq_norms(m64, xs, ys, batch_size, seed, method, budget)
    norms = np.full(n, np.nan)
    norms[idx] = sq.clamp_min(0).sqrt().cpu().numpy()
    return GradNorms(norms=norms, definition=definition, method=used,
                     batch_size=batch_size if definition == "batch" else None,
                     seed=seed if definition == "batch" else None, chunk_size=chunk, max_memory=budget)


def subset_summary(values: np.ndarray) -> dict[str, float | int | None]:
    """Median, mean, quartiles and count of the finite values (None when there are none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"n": 0, "median": None, "mean": None, "q25": None, "q75": None}
    q25, med, q75 = np.percentile(v, [25, 50, 75])
    return {"n": int(v.size), "median": float(med), "mean": float(v.mean()), "q25": float(q25), "q75": float(q75)}
