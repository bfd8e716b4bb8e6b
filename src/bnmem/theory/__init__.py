"""The toy model: one convolutional channel and a linear classifier, with and without BN.

It checks the (γ/σ)² amplification of an outlier's per-step margin growth that
the paper derives, and measures how outliers push γ up. The model, the
derivation and what each measurement means are in docs/theory.md.

Modules: :mod:`~bnmem.theory.config` (``TheoryConfig``, the one config; no torch
import), :mod:`~bnmem.theory.model` (the two model variants and the map between
them), :mod:`~bnmem.theory.data` (the toy task), :mod:`~bnmem.theory.probes`
(one-step probes: claim 5a's derivation check, claim 5b's counterfactual),
:mod:`~bnmem.theory.trajectories` (the simulated runs), :mod:`~bnmem.theory.summary`
(statistics) and :mod:`~bnmem.theory.run` (``run_theory``: files, resume). The
figure is :mod:`bnmem.figures.theory`.

Names are imported lazily, so ``from bnmem.theory import TheoryConfig`` does not
load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TheoryConfig": "config",
    "OUTLIER_KINDS": "config",
    "ToyData": "data",
    "make_toy_data": "data",
    "DTYPE": "model",
    "Params": "model",
    "init_bn_params": "model",
    "conv_features": "model",
    "batch_stats": "model",
    "bn_forward": "model",
    "plain_forward": "model",
    "smooth_margin": "model",
    "matched_plain_params": "model",
    "Probe": "probes",
    "probe_state": "probes",
    "live_projection_factor": "probes",
    "Counterfactual": "probes",
    "counterfactual_step": "probes",
    "counterfactual_and_gradient": "probes",
    "DIVERGED_LOSS": "trajectories",
    "simulate": "trajectories",
    "counterfactual_run": "trajectories",
    "counterfactual_runs": "trajectories",
    "summarize": "summary",
    "summarize_counterfactual": "summary",
    "ratio_stats": "summary",
    "run_theory": "run",
    "finished_summary": "run",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bnmem.theory' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"bnmem.theory.{_EXPORTS[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
