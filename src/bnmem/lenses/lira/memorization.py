"""Feldman–Zhang memorization scores from a lira run's shadow models (docs/attacks.md).

Per norm, from what the query step stored (``keep.npy``, ``labels.npy``, ``phi.npy`` and, when the
query recorded them, the predicted classes ``pred.npy``), :func:`norm_mem_scores` writes
``<norm>/mem_scores.npz``:

- ``index``: example indices (positions in the training set the models saw);
- ``mem_top1``, ``mem_top1_low``, ``mem_top1_high``: the top-1 score and its 95% interval (nan
  arrays when the run has no ``pred.npy``, e.g. a directory queried by an earlier bnmem);
- ``mem_conf``, ``mem_conf_low``, ``mem_conf_high``: the confidence variant (p_y = sigmoid(φ));
- ``n_in``, ``n_out``: each example's IN/OUT model counts;
- ``is_noisy``, ``is_ood``, ``labels``: the subsets and the labels the models trained on;
- ``top1_loo``, ``conf_loo``: [M, N] the scores with each model left out (for the jackknife).

:func:`memorization_section` turns those into the ``memorization`` block of ``metrics.json``:
per norm and subset the mean score and the fraction above 0.5, per other norm the paired
(BN − other, per example) mean difference with a delete-one-model jackknife interval (the models
of both norms share seeds and keep rows, so model m is deleted from both), and the overlap of the
top-k examples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bnmem import io
from bnmem.attacks.memscore import (
    confidence_values,
    leave_one_model_out,
    mem_scores,
    subset_summary,
    top1_values,
    top_k_overlap,
)
from bnmem.attacks.phi import open_phi
from bnmem.stats import jackknife_interval

MEM_FILE = "mem_scores.npz"
PRED_FILE = "pred.npy"
VARIANTS = ("top1", "conf")
TOP_K = (10, 50)


def _phi_values(norm_dir: Path, labels: np.ndarray, n_models: int) -> np.ndarray:
    """Per-model view-averaged p_y [M, N], read one model at a time (φ is never loaded whole)."""
    source = open_phi(norm_dir, labels)
    n = labels.shape[0]
    out = np.empty((n_models, n))
    block = max(1, 2_000_000 // max(1, n_models * source.shape[2]))
    for a in range(0, n, block):
        out[:, a : a + block] = confidence_values(source.read(a, min(n, a + block)))
    return out


def norm_mem_scores(norm_dir: str | Path) -> dict[str, np.ndarray]:
    """Compute, save (``mem_scores.npz``, atomically) and return one norm's memorization scores."""
    norm_dir = Path(norm_dir)
    keep = np.load(norm_dir / "keep.npy")
    labels = np.load(norm_dir / "labels.npy")
    n = labels.shape[0]
    arrays: dict[str, np.ndarray] = {"index": np.arange(n), "labels": labels,
                                     "is_noisy": np.load(norm_dir / "is_noisy.npy"),
                                     "is_ood": np.load(norm_dir / "is_ood.npy")}
    conf = _phi_values(norm_dir, labels, keep.shape[0])
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


def _paired(ref: dict[str, np.ndarray], other: dict[str, np.ndarray], name: str,
            subsets: dict[str, np.ndarray]) -> dict[str, Any]:
    diff = ref[f"mem_{name}"] - other[f"mem_{name}"]
    loo = ref[f"{name}_loo"] - other[f"{name}_loo"]
    out: dict[str, Any] = {}
    for sub, mask in subsets.items():
        ok = mask & np.isfinite(diff)
        if not ok.any():
            out[sub] = None
            continue
        full = float(diff[ok].mean())
        with np.errstate(invalid="ignore"):
            per_model = np.nanmean(np.where(ok[None, :], loo, np.nan), axis=1)
        out[sub] = jackknife_interval(full, per_model, unit="models").to_dict()
    return out


def memorization_section(per_norm: dict[str, dict[str, np.ndarray]], reference: str,
                         others: Sequence[str]) -> dict[str, Any]:
    """The ``memorization`` block of the lira ``metrics.json`` (module docstring)."""
    subsets = subsets_of(per_norm[reference])
    block: dict[str, Any] = {
        "definition": "Feldman–Zhang: mean over IN models minus mean over OUT models of top-1 correctness "
                      "(fraction of query views predicting the training label) or of p_y = sigmoid(φ) "
                      "averaged over views; per-example interval: Newcombe hybrid score, n = model counts",
        "files": {norm: f"{norm}/{MEM_FILE}" for norm in per_norm},
        "variants": [v for v in VARIANTS if np.isfinite(per_norm[reference][f"mem_{v}"]).any()],
        "by_norm": {norm: {name: subset_summary(a[f"mem_{name}"], subsets) for name in VARIANTS}
                    for norm, a in per_norm.items()},
        "paired": {},
        "top_k_overlap": {},
        "reference": reference,
        "interval": "delete-one-model jackknife of the mean per-example difference (model m deleted under both "
                    "norms); replicates as the unit when the study has several (the report)",
    }
    for other in others:
        key = f"{reference}-{other}"
        block["paired"][key] = {name: _paired(per_norm[reference], per_norm[other], name, subsets) for name in VARIANTS}
        block["top_k_overlap"][key] = {
            name: {str(k): top_k_overlap(per_norm[reference][f"mem_{name}"], per_norm[other][f"mem_{name}"], k)
                   for k in TOP_K if k <= per_norm[reference][f"mem_{name}"].size}
            for name in VARIANTS}
    return block


GALLERY_FILE = "mem_gallery.png"
DISTRIBUTION_FILE = "mem_scores.png"
GALLERY_SIZE = 8


def preferred_variant(arrays: dict[str, np.ndarray]) -> str:
    """top-1 when the run recorded predicted classes, else the confidence variant."""
    return "top1" if np.isfinite(arrays["mem_top1"]).any() else "conf"


def gallery_rows(per_norm: dict[str, dict[str, np.ndarray]], ds, norms: Sequence[str],
                 k: int = GALLERY_SIZE) -> dict[str, list[tuple[np.ndarray, str]]]:
    """The k most-memorized examples per norm: image, score, given and original label."""
    from bnmem.figures.gallery import to_display

    rows: dict[str, list[tuple[np.ndarray, str]]] = {}
    for norm in norms:
        a = per_norm[norm]
        name = preferred_variant(a)
        mem = a[f"mem_{name}"]
        idx = np.flatnonzero(np.isfinite(mem))
        top = idx[np.lexsort((idx, -mem[idx]))][:k]
        images = to_display(ds.x_train[top].numpy(), ds.mean, ds.std)
        rows[f"{norm} ({name})"] = [
            (img, f"#{i} mem {mem[i]:.2f}\ngiven {int(a['labels'][i])}, orig "
                  f"{'OOD' if a['is_ood'][i] else int(ds.y_train_orig[i])}")
            for img, i in zip(images, top)]
    return rows


def lens_memorization(out: Path, norms: Sequence[str], reference: str, ds, title: str = "") -> dict[str, Any]:
    """Scores for every norm of a lira run, its ``memorization`` block, the gallery and the distributions."""
    from bnmem.figures.gallery import plot_gallery, plot_mem_distributions

    per_norm = {norm: load_mem_scores(out / norm) for norm in norms}
    others = [n for n in norms if n != reference]
    block = memorization_section(per_norm, reference, others)
    shown = [reference] + others[:1]
    plot_gallery(gallery_rows(per_norm, ds, shown), out / GALLERY_FILE,
                 title=f"most-memorized training examples; {title}")
    name = preferred_variant(per_norm[reference])
    subsets = subsets_of(per_norm[reference])
    dists = {sub: {n: per_norm[n][f"mem_{name}"][mask] for n in norms} for sub, mask in subsets.items()}
    plot_mem_distributions(dists, out / DISTRIBUTION_FILE, title=f"memorization scores ({name}); {title}")
    block["figures"] = {"gallery": GALLERY_FILE, "distributions": DISTRIBUTION_FILE}
    return block
