"""Feldman–Zhang memorization scores of one queried shadow-model directory (docs/attacks.md).

From what the query stored (``keep.npy``, ``labels.npy``, ``phi.npy`` and the predicted classes
``pred.npy``), :func:`norm_mem_scores` writes ``<norm_dir>/mem_scores.npz``:

- ``index``: example indices (positions in the training set the models saw);
- ``mem_top1``, ``mem_top1_low``, ``mem_top1_high``: the top-1 score and its 95% interval (nan
  arrays when the directory has no ``pred.npy``, e.g. one queried by an earlier bnmem);
- ``mem_conf``, ``mem_conf_low``, ``mem_conf_high``: the confidence variant (p_y = sigmoid(φ));
- ``n_in``, ``n_out``: each example's IN/OUT model counts;
- ``is_noisy``, ``is_ood``, ``labels``: the subsets and the labels the models trained on;
- ``top1_loo``, ``conf_loo``: [M, N] the scores with each model left out (for the jackknife).

The estimators are :mod:`bnmem.attacks.memscore` (pure numpy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bnmem import io
from bnmem.attacks.memscore import (
    confidence_values,
    leave_one_model_out,
    mem_scores,
    subset_summary,
    top1_values,
)
from bnmem.attacks.phi import PhiSource
from bnmem.shadow.query import PRED_FILE, load_attack_inputs

MEM_FILE = "mem_scores.npz"
VARIANTS = ("top1", "conf")


def _phi_values(source: PhiSource, n: int, n_models: int) -> np.ndarray:
    """Per-model view-averaged p_y [M, N], read in blocks of examples (φ is never loaded whole)."""
    out = np.empty((n_models, n))
    block = max(1, 2_000_000 // max(1, n_models * source.shape[2]))
    for a in range(0, n, block):
        out[:, a : a + block] = confidence_values(source.read(a, min(n, a + block)))
    return out


def norm_mem_scores(norm_dir: str | Path) -> dict[str, np.ndarray]:
    """Compute, save (``mem_scores.npz``, atomically) and return one norm's memorization scores."""
    norm_dir = Path(norm_dir)
    inputs = load_attack_inputs(norm_dir)
    keep, labels = inputs["keep"], inputs["labels"]
    n = labels.shape[0]
    arrays: dict[str, np.ndarray] = {"index": np.arange(n), "labels": labels,
                                     "is_noisy": inputs["is_noisy"], "is_ood": inputs["is_ood"]}
    conf = _phi_values(inputs["phi"], n, keep.shape[0])
    values = {"conf": conf}
    if (norm_dir / PRED_FILE).exists():
        values["top1"] = top1_values(np.load(norm_dir / PRED_FILE), labels)
    for name in VARIANTS:
        if name in values:
            r = mem_scores(values[name], keep)
            loo = leave_one_model_out(values[name], keep)
        else:
            r = {k: np.full(n, np.nan) for k in ("mem", "ci_low", "ci_high")}
            loo = np.full(keep.shape, np.nan)
        arrays.update({f"mem_{name}": r["mem"], f"mem_{name}_low": r["ci_low"], f"mem_{name}_high": r["ci_high"],
                       f"{name}_loo": loo})
    arrays["n_in"] = keep.sum(axis=0)
    arrays["n_out"] = keep.shape[0] - arrays["n_in"]
    io.write_npz(norm_dir / MEM_FILE, **arrays)
    return arrays


def load_mem_scores(norm_dir: str | Path) -> dict[str, np.ndarray]:
    """``mem_scores.npz`` of a queried norm directory (computed first when missing)."""
    path = Path(norm_dir) / MEM_FILE
    if not path.exists():
        return norm_mem_scores(norm_dir)
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def mem_summary(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per variant and subset: mean score, fraction above 0.5, count (one norm directory's summary)."""
    subsets = subsets_of(arrays)
    return {name: subset_summary(arrays[f"mem_{name}"], subsets) for name in VARIANTS}


def subsets_of(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The report's subsets: all, clean (neither flipped nor OOD), flipped, OOD."""
    noisy, ood = arrays["is_noisy"].astype(bool), arrays["is_ood"].astype(bool)
    return {"all": np.ones_like(noisy), "clean": ~noisy & ~ood, "flipped": noisy, "ood": ood}
