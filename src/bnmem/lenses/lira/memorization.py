"""The lira lens's memorization block, gallery and distributions (docs/attacks.md).

The per-norm scores are :mod:`bnmem.shadow.memscores` (``<norm>/mem_scores.npz``).
:func:`memorization_section` turns them into the ``memorization`` block of ``metrics.json``:
per norm and subset the mean score and the fraction above 0.5, per other norm the paired
(BN − other, per example) mean difference with a delete-one-model jackknife interval (the models
of both norms share seeds and keep rows, so model m is deleted from both), and the overlap of the
top-k examples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bnmem.attacks.memscore import subset_summary, top_k, top_k_overlap
from bnmem.shadow.memscores import MEM_FILE, VARIANTS, load_mem_scores, subsets_of
from bnmem.stats import jackknife_interval

TOP_K = (10, 50)


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
        top = top_k(mem, k)
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
