"""Which BN layers have an identifiable γ scale, and what each BN channel feeds (read from the traced dataflow).

A BN layer's (γ, β) scale is *not identifiable* when multiplying both by any c > 0 leaves every logit unchanged:
its output reaches the loss only through positively homogeneous, channel-preserving operations (ReLU, max and
average pooling, flatten, bias-free convolution or linear maps of a fully scaled input) into normalizations that
divide the scale back out. A bias added just before a BatchNorm is harmless (the BN's centering removes a
per-channel constant). Where the scale is not identifiable, |γ|/σ can take any value for the same function.

The invariance holds under *batch statistics* (training mode) and under the running statistics a network trained
from the rescaled point converges to (each downstream BN's running mean and variance follow its input's affine
change); with a model's *fixed* running statistics (eval mode) no scaling is invariant, so eval mode alone cannot
define it. BN's ``eps`` breaks it by O(eps/σ²) (about 10⁻⁵ relative): the rule describes the ``eps → 0``
structure, and ``tests/test_identifiable.py`` holds it against that float64 oracle on every BN layer of every
registered architecture (docs/architecture.md, "Definitions").

How: one forward pass (eval mode, no gradient, nothing changed) is recorded at the level of torch functions
(:class:`torch.overrides.TorchFunctionMode`: ``F.relu``, ``F.conv2d``, ``F.batch_norm``, ``torch.cat``, ``+`` ...),
which, unlike ``torch.fx``'s symbolic trace, follows shape-dependent Python code such as DenseNet's transition
pooling. For each BN layer, the effect of scaling it is then propagated through that graph per channel. An
operation the rule does not know counts as changing the result (the layer is then labelled identifiable, the
status quo of counting every layer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from bnmem.models.norms import batchnorm_layers

# The per-channel effect of scaling one BN layer's (γ, β) by c on a tensor: UNCHANGED channels do not depend on
# c, SCALED ones are c·u, SHIFTED ones c·u + b (b constant per channel: a BN's centering removes it). A tensor
# whose change is none of these (or not per channel) is CHANGED.
UNCHANGED, SCALED, SHIFTED = 0, 1, 2
CHANGED = "changed"

# Torch functions by what they do to a channel (matched by the function's __name__).
_PER_CHANNEL_NORMS = {"batch_norm", "instance_norm"}
_WHOLE_NORMS = {"group_norm", "layer_norm", "rms_norm"}
_RECTIFIERS = {"relu", "relu_", "leaky_relu", "leaky_relu_", "dropout", "dropout1d", "dropout2d", "dropout3d"}
_POOLS = {f"{k}{d}d" for k in ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool") for d in (1, 2, 3)}
_POOLS |= {"_max_pool1d", "_max_pool2d", "_max_pool3d", "max_pool2d_with_indices", "_adaptive_max_pool2d"}
_SAME = {"contiguous", "clone", "detach", "to", "float", "double", "half", "cpu", "cuda"}
_LINEAR = {"conv1d", "conv2d", "conv3d", "linear"}
_ADD = {"add", "add_", "__add__", "__radd__", "__iadd__", "sub", "sub_", "__sub__", "__isub__"}
_MUL = {"mul", "mul_", "__mul__", "__rmul__", "__imul__", "div", "div_", "__truediv__", "__itruediv__"}
_DIV = {"div", "div_", "__truediv__", "__itruediv__"}
_CAT = {"cat", "concat", "concatenate"}
_RESHAPE = {"view", "reshape"}


@dataclass
class _Call:
    name: str
    args: tuple
    kwargs: dict
    outputs: list[torch.Tensor]

    def arg(self, i: int, key: str, default: Any = None) -> Any:
        return self.args[i] if len(self.args) > i else self.kwargs.get(key, default)

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor among the arguments (lists and tuples opened)."""
        out: list[torch.Tensor] = []
        for a in (*self.args, *self.kwargs.values()):
            for v in (a if isinstance(a, (list, tuple)) else (a,)):
                if isinstance(v, torch.Tensor):
                    out.append(v)
        return out


class _Recorder(TorchFunctionMode):
    """Records every torch function call of a forward pass (calls inside a recorded call are not seen)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[_Call] = []

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        outs = [v for v in (out if isinstance(out, (list, tuple)) else (out,)) if isinstance(v, torch.Tensor)]
        if outs:
            self.calls.append(_Call(getattr(func, "__name__", repr(func)), tuple(args), dict(kwargs), outs))
        return out


@dataclass
class Graph:
    """One recorded forward pass: the calls in execution order (a topological order), the model's output tensors
    and its BN layers (name, module). The recorded tensors are kept alive, so their ids stay unique."""

    calls: list[_Call]
    outputs: list[torch.Tensor]
    layers: list[tuple[str, nn.Module]]
    keep: list[Any] = field(default_factory=list)


def probe_input(model: nn.Module, batch: int = 2) -> torch.Tensor:
    """A batch of zeros of the model's ``input_shape`` (every registered architecture has one), in the dtype and
    on the device of its first floating parameter."""
    shape = getattr(model, "input_shape", None)
    if shape is None:
        raise ValueError("the model has no input_shape attribute: pass an input batch")
    ref = next(t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point())
    return torch.zeros((batch, *shape), dtype=ref.dtype, device=ref.device)


@torch.no_grad()
def trace(model: nn.Module, x: torch.Tensor | None = None) -> Graph:
    """Record one eval-mode forward pass of ``model`` on ``x`` (default :func:`probe_input`); the model's mode,
    weights and buffers are left as they were."""
    x = probe_input(model) if x is None else x
    was_training = model.training
    model.eval()
    try:
        with _Recorder() as rec:
            out = model(x)
    finally:
        model.train(was_training)
    outs = [v for v in (out if isinstance(out, (list, tuple)) else (out,)) if isinstance(v, torch.Tensor)]
    return Graph(rec.calls, outs, batchnorm_layers(model), keep=[x, out])


def _channels(t: torch.Tensor) -> int:
    return int(t.shape[1]) if t.ndim >= 2 else 1


def _constant_per_channel(v: Any, ndim: int) -> bool:
    """A Python number, or a tensor that broadcasts against an ``ndim``-dimensional activation as one value per
    channel (size 1 everywhere but the activation's dim 1)."""
    if not isinstance(v, torch.Tensor):
        return isinstance(v, (int, float))
    if v.numel() == 1:
        return True
    shape = (1,) * (ndim - v.ndim) + tuple(v.shape)  # broadcasting aligns the trailing dims
    return len(shape) == ndim and all(s == 1 for d, s in enumerate(shape) if d != 1)


def _per_sample_flat(call: _Call, x: Any) -> bool:
    """``flatten(1)``, or a view / reshape to (N, features) of an activation with more dims."""
    if not isinstance(x, torch.Tensor) or x.ndim <= 2:
        return False
    y = call.outputs[0]
    if call.name == "flatten":
        return call.arg(1, "start_dim", 0) == 1 and call.arg(2, "end_dim", -1) in (-1, x.ndim - 1)
    return call.name in _RESHAPE and y.ndim == 2 and y.shape[0] == x.shape[0]


def _channel_cat(call: _Call) -> bool:
    """A concatenation along the channel dim (1) of activations."""
    first = call.arg(0, "tensors")[0]
    return first.ndim >= 2 and call.arg(1, "dim", 0) % first.ndim == 1


def _combine(a: np.ndarray, b: np.ndarray) -> np.ndarray | str:
    """Channel kinds of a sum of two tensors of the same shape."""
    out = np.where(a == b, a, SHIFTED)
    if np.any((a == UNCHANGED) != (b == UNCHANGED)):  # c·u + v with v independent of c
        return CHANGED
    return out


def _kinds(call: _Call, state: dict[int, Any], source: nn.Module) -> list[Any] | None:
    """The outputs' kinds after ``call``, given the kinds of its inputs (None: every output unchanged)."""
    name = call.name
    tagged = [t for t in call.tensors() if id(t) in state]
    if name == "batch_norm" and call.arg(3, "weight") is getattr(source, "weight", None) and source.weight is not None:
        return [CHANGED if tagged else np.full(_channels(call.outputs[0]), SCALED, dtype=np.int8)]
    if not tagged:
        return None
    x = call.args[0] if call.args else None
    kx = state.get(id(x)) if isinstance(x, torch.Tensor) else None
    if any(state[id(t)] is CHANGED for t in tagged):
        if name in _PER_CHANNEL_NORMS | _WHOLE_NORMS and len(tagged) == 1 and kx is not None:
            return [CHANGED]
        return [CHANGED] * len(call.outputs)
    if name in _PER_CHANNEL_NORMS and kx is not None and len(tagged) == 1:
        return None  # each channel's scale and constant shift divided and centered out
    if name in _WHOLE_NORMS and kx is not None and len(tagged) == 1:
        return None if np.all(kx == SCALED) else [CHANGED]
    if name in _RECTIFIERS and kx is not None:
        return [CHANGED if np.any(kx == SHIFTED) else kx]
    if name in _POOLS | _SAME and kx is not None:  # max(c·u + b) = c·max(u) + b for c > 0
        return [kx] + [None] * (len(call.outputs) - 1)
    if name in _LINEAR and kx is not None and len(tagged) == 1:
        w_bias = call.arg(2, "bias")
        if not np.all(kx == SCALED):
            return [CHANGED]
        c_out = _channels(call.outputs[0])
        if w_bias is None:
            return [np.full(c_out, SCALED, dtype=np.int8)]
        # A bias is a per-channel constant only where the output's channels are dim 1 (conv, 2-D linear).
        return [np.full(c_out, SHIFTED, dtype=np.int8) if name != "linear" or x.ndim == 2 else CHANGED]
    if name in _RESHAPE | {"flatten"} and kx is not None:
        if _per_sample_flat(call, x):  # each channel's features stay together, in order
            return [np.repeat(kx, int(np.prod(x.shape[2:])))]
        return [kx] if tuple(call.outputs[0].shape) == tuple(x.shape) else [CHANGED]
    if name in _DIV and len(call.args) > 1 and isinstance(call.args[1], torch.Tensor) and id(call.args[1]) in state:
        return [CHANGED]  # 1/(c·u) is not c times anything
    if name in _ADD | _MUL:
        other = call.args[1] if len(call.args) > 1 else call.kwargs.get("other")
        ka, kb = (state.get(id(v)) if isinstance(v, torch.Tensor) else None for v in (x, other))
        if ka is not None and kb is not None:
            if name in _MUL or x.shape != other.shape:
                return [CHANGED]
            return [_combine(ka, kb)]
        k, v, t = (ka, other, x) if ka is not None else (kb, x, other)
        if name in _MUL:
            return [k if _constant_per_channel(v, t.ndim) or not np.any(k == SHIFTED) else CHANGED]
        if _constant_per_channel(v, t.ndim):  # adding a per-channel constant shifts the scaled channels
            return [np.where(k == UNCHANGED, UNCHANGED, SHIFTED).astype(np.int8)]
        return [CHANGED]  # c·u + v, v a function of the input
    if name in _CAT:
        parts = call.arg(0, "tensors")
        if _channel_cat(call):
            return [np.concatenate([state.get(id(p), np.zeros(_channels(p), dtype=np.int8)) for p in parts])]
        return [CHANGED]
    return [CHANGED] * len(call.outputs)


def _effect(graph: Graph, source: nn.Module) -> list[Any]:
    """The kinds of the model's outputs when ``source``'s (γ, β) are scaled (None: unchanged)."""
    state: dict[int, Any] = {}
    for call in graph.calls:
        kinds = _kinds(call, state, source)
        if kinds is None:
            continue
        for t, k in zip(call.outputs, kinds):
            if k is not None and (k is CHANGED or np.any(k != UNCHANGED)):
                state[id(t)] = k
    return [state.get(id(o)) for o in graph.outputs]


def scale_identifiable(model: nn.Module, x: torch.Tensor | None = None, graph: Graph | None = None
                       ) -> dict[str, bool]:
    """Per BN layer (``batchnorm_layers`` order): True where scaling its γ and β by a common c > 0 changes the
    model's output (its scale is identifiable), False where it does not. A layer without affine parameters,
    or one the forward pass never reaches, is False (nothing of it can change the output).

    Args:
        model: any module; left unchanged.
        x: an input batch (default :func:`probe_input`: zeros of the model's ``input_shape``).
        graph: a :func:`trace` of the model, to reuse one.
    """
    graph = trace(model, x) if graph is None else graph
    return {name: any(k is not None for k in _effect(graph, m)) if m.weight is not None else False
            for name, m in graph.layers}


# ---- what each BN channel feeds: the next linear layers and the normalization after them ----

def _maps(graph: Graph, seed: torch.Tensor, index: np.ndarray, stop: Iterable[str] = ()
          ) -> tuple[list[tuple[_Call, np.ndarray]], list[tuple[_Call, np.ndarray]], list[np.ndarray | None]]:
    """Follow ``seed``'s channels (``index``: a label per channel, −1 none) through channel-preserving
    operations. Returns the linear calls reached with their input's labels, the normalization calls reached
    with theirs, and the labels of the model's outputs (None: not reached). A path stops at a linear layer, a
    normalization or an operation the walk does not know."""
    state: dict[int, np.ndarray] = {id(seed): index}
    linear, norms = [], []
    start = next((i for i, c in enumerate(graph.calls) if any(o is seed for o in c.outputs)), -1) + 1
    for call in graph.calls[start:]:
        name = call.name
        tensors = [t for t in call.tensors() if id(t) in state]
        if not tensors:
            continue
        x = call.args[0] if call.args else None
        lx = state.get(id(x)) if isinstance(x, torch.Tensor) else None
        if name in _LINEAR and lx is not None:
            linear.append((call, lx))
        elif name in _PER_CHANNEL_NORMS | _WHOLE_NORMS and lx is not None:
            norms.append((call, lx))
        elif name in _RECTIFIERS | _POOLS | _SAME and lx is not None:
            state[id(call.outputs[0])] = lx
        elif lx is not None and _per_sample_flat(call, x):
            state[id(call.outputs[0])] = np.repeat(lx, int(np.prod(x.shape[2:])))
        elif name in _ADD | _MUL:
            parts = [state.get(id(v)) for v in call.args[:2] if isinstance(v, torch.Tensor)]
            parts = [p for p in parts if p is not None]
            merged = parts[0] if len(parts) == 1 else np.where(parts[0] >= 0, parts[0], parts[1])
            if merged.size == _channels(call.outputs[0]):
                state[id(call.outputs[0])] = merged
        elif name in _CAT and _channel_cat(call):
            state[id(call.outputs[0])] = np.concatenate(
                [state.get(id(p), np.full(_channels(p), -1)) for p in call.arg(0, "tensors")])
    return linear, norms, [state.get(id(o)) for o in graph.outputs]


def _weight_squares(weight: torch.Tensor, labels: np.ndarray, n: int) -> np.ndarray:
    """[n, out]: for each label c, Σ over the weight's input positions labelled c of W[k, position, ...]²."""
    w2 = weight.detach().double().pow(2)
    w2 = w2.reshape(w2.shape[0], w2.shape[1], -1).sum(-1).cpu().numpy()  # [out, in]
    out = np.zeros((n, w2.shape[0]))
    mask = labels >= 0
    np.add.at(out, labels[mask], w2[:, mask].T)
    return out


def _next_variance(graph: Graph, call: _Call) -> np.ndarray | None:
    """Per output channel of a linear call, the variance its next normalization divides it by: the running
    variance + eps of the first BatchNorm its output reaches; 1 for a model output (a logit); None otherwise."""
    y = call.outputs[0]
    c = _channels(y)
    _, norms, outs = _maps(graph, y, np.arange(c))
    for n_call, labels in norms:
        rv = n_call.arg(2, "running_var")
        if n_call.name != "batch_norm" or rv is None:
            continue
        eps = float(n_call.arg(7, "eps", 1e-5))
        var = np.full(c, np.nan)
        pos = labels >= 0
        var[labels[pos]] = rv.detach().double().cpu().numpy()[pos] + eps
        if np.all(np.isfinite(var)):
            return var
    for labels in outs:
        if labels is not None and np.array_equal(np.sort(labels[labels >= 0]), np.arange(c)):
            return np.ones(c)
    return None


def next_gain(model: nn.Module, x: torch.Tensor | None = None, graph: Graph | None = None
              ) -> dict[str, np.ndarray | None]:
    """Per BN layer and channel c, the squared gain from the layer's normalized channel x̂_c to the normalized
    outputs of the layers it feeds:

        G_c² = γ_c² · Σ_W Σ_k ‖W[k, c]‖² / v_k,

    W every conv / linear layer channel c reaches through channel-preserving operations (ReLU, pooling,
    flatten, residual additions, concatenation; W[k, c] every weight from c's positions to output channel k),
    v_k the running variance + eps that output channel's next BatchNorm divides it by, or 1 for a logit.
    None for a layer with a W whose outputs reach neither (or without γ).

    Scaling a non-identifiable layer's (γ, β) by c (with the running statistics it leads to) scales both γ_c²
    and every v_k by c²; moving a factor between γ_c and W[:, c] (the function-preserving rebalancing) cancels
    too. So G_c² is scale-free where |γ|/σ is not (tests/test_identifiable.py)."""
    graph = trace(model, x) if graph is None else graph
    out: dict[str, np.ndarray | None] = {}
    calls = {id(c.arg(3, "weight")): c for c in graph.calls
             if c.name == "batch_norm" and c.arg(3, "weight") is not None}
    for name, m in graph.layers:
        call = calls.get(id(m.weight)) if m.weight is not None else None
        if call is None:
            out[name] = None
            continue
        c = m.num_features
        linear, _, _ = _maps(graph, call.outputs[0], np.arange(c))
        total = np.zeros(c)
        for lin, labels in linear:
            v = _next_variance(graph, lin)
            if v is None:
                total = None
                break
            total += _weight_squares(lin.arg(1, "weight"), labels, c) @ (1.0 / v)
        out[name] = None if total is None or not linear else m.weight.detach().double().cpu().numpy() ** 2 * total
    return out


def effective_step(lr: float, gain2: np.ndarray | None) -> dict[str, Any] | None:
    """The robustness measurement of one BN layer: η·G_c² per channel (:func:`next_gain`), with its median
    and the median of log10 over channels (what a per-layer summary reads)."""
    if gain2 is None or len(gain2) == 0:
        return None
    s = float(lr) * np.asarray(gain2, dtype=np.float64)
    pos = s[s > 0]
    return {"median": float(np.median(s)),
            "median_log10": float(np.median(np.log10(pos))) if pos.size else None,
            "per_channel": s.tolist()}


def describe(labels: dict[str, bool]) -> str:
    """"k of L" with the identifiable layers' names."""
    ids = [n for n, v in labels.items() if v]
    return f"{len(ids)} of {len(labels)}" + (f" ({', '.join(ids)})" if ids else "")


__all__ = ["CHANGED", "Graph", "describe", "effective_step", "next_gain", "probe_input", "scale_identifiable",
           "trace"]
