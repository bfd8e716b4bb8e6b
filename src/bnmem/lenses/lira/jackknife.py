"""Delete-one-model jackknife of the paired BN − other AUC difference, within one experiment.

The targets of a leave-one-out LiRA evaluation share reference models, the
training data and the keep matrix, so resampling targets as if independent
makes the interval about 2× too narrow. Deleting one shadow model at a time
(as a target and from every reference set) and re-running the attacks gives
the delete-one-model jackknife, whose spread includes that shared dependence;
:func:`bnmem.stats.jackknife_interval` turns the leave-one-out values into an
interval. It costs one full attack evaluation per model and norm, so it is
meant for runs with a single replicate (with replicates, the report's interval
is over replicates and needs none of this).

The report reads the result from ``metrics.json`` as
``paired["<ref>-<other>"][attack][subset]["auc"]["jackknife"] = {"leave_one_out": [...]}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from bnmem.attacks import spec as attack_spec
from bnmem.attacks.streaming import evaluate_stream
from bnmem.errors import BnmemError
from bnmem.shadow.query import load_attack_inputs

MIN_MODELS = 6  # with a balanced keep, fewer leave some example without an IN reference after a deletion


def paired_jackknife(
    phi_a: np.ndarray,
    phi_b: np.ndarray,
    keep: np.ndarray,
    subsets: Mapping[str, np.ndarray] | None = None,
    attacks: Sequence[str] | None = None,
    population_a: np.ndarray | None = None,
    population_b: np.ndarray | None = None,
    **attack_kwargs: Any,
) -> dict[str, dict[str, list[float]]]:
    """Leave-one-model-out means of the per-target AUC difference a − b.

    Args:
        phi_a: the attack statistic φ [n_models, n_examples, n_views] of one norm (e.g. BN).
        phi_b: the same shape for the other norm; model m of both trained on keep row m.
        keep: [n_models, n_examples] membership, shared by both norms.
        subsets: extra example subsets, as for :func:`bnmem.attacks.streaming.evaluate_stream` (``all`` is added).
        attacks: attack names (None: those playing :data:`~bnmem.attacks.spec.JACKKNIFE`).
        population_a, population_b: φ [n_models, n_population, n_views] of RMIA's population per norm (None:
            the legacy population).
        **attack_kwargs: passed to :func:`~bnmem.attacks.streaming.evaluate_stream` unchanged (e.g.
            ``rmia_params``), so the jackknife uses the lens's own attack settings.

    Returns:
        ``{attack: {subset: [value with model 0 deleted, ..., with model M−1 deleted]}}``: each value
        the mean over the remaining targets of the AUC difference, every attack re-run on the M − 1
        remaining models (nan where a subset had no scorable target).

    Raises:
        BnmemError: shapes disagree, or fewer than :data:`MIN_MODELS` models.
    """
    if phi_a.shape != phi_b.shape or keep.shape != phi_a.shape[:2]:
        raise BnmemError(f"jackknife: φ {phi_a.shape} / {phi_b.shape} and keep {keep.shape} disagree")
    n_models = keep.shape[0]
    if n_models < MIN_MODELS:
        raise BnmemError(f"jackknife: needs at least {MIN_MODELS} shadow models, got {n_models}")
    if attacks is None:
        attacks = attack_spec.playing(attack_spec.JACKKNIFE)
    out: dict[str, dict[str, list[float]]] = {}
    for j in range(n_models):
        rest = np.array([m for m in range(n_models) if m != j])
        res = [evaluate_stream(phi[rest], keep[rest], subsets=subsets, attacks=attacks,
                               population_phi=None if pop is None else pop[rest], **attack_kwargs)["metrics"]
               for phi, pop in ((phi_a, population_a), (phi_b, population_b))]
        for attack in attacks:
            for sub in res[0][attack]:
                d = (np.asarray(res[0][attack][sub]["auc_per_target"], dtype=np.float64)
                     - np.asarray(res[1][attack][sub]["auc_per_target"], dtype=np.float64))
                ok = d[np.isfinite(d)]
                out.setdefault(attack, {}).setdefault(sub, []).append(float(ok.mean()) if ok.size else float("nan"))
    return out


def attach_jackknife(paired: dict[str, Any], out_dir: str | Path, reference: str, others: Sequence[str],
                     attacks: Sequence[str] | None = None, **attack_kwargs: Any) -> dict[str, Any]:
    """Add the jackknife to a lira run's ``paired`` section (in place), from the arrays the lens saved.

    Args:
        paired: ``metrics.json``'s ``paired`` block (``{"<ref>-<other>": {attack: {subset: {"auc": ...}}}}``).
        out_dir: the lira run directory (``<out_dir>/<norm>/`` holds each norm's query arrays).
        reference: the reference norm (BN).
        others: the norms compared with it.
        attacks: attacks to re-run (None: those playing :data:`~bnmem.attacks.spec.JACKKNIFE`).
        **attack_kwargs: the lens's attack settings (see :func:`paired_jackknife`).

    Returns:
        ``paired``, with ``["auc"]["jackknife"] = {"leave_one_out": [...], "unit": ...}`` where computed.
    """
    ref = load_attack_inputs(Path(out_dir) / reference)
    outliers = ref["is_noisy"] | ref["is_ood"]
    subsets = {"outliers": outliers, "inliers": ~outliers}
    for other in others:
        arrays = load_attack_inputs(Path(out_dir) / other)
        if not np.array_equal(arrays["keep"], ref["keep"]):
            raise BnmemError(f"jackknife: {reference} and {other} were trained on different keep matrices")
        jk = paired_jackknife(_whole(ref["phi"]), _whole(arrays["phi"]), ref["keep"], subsets, attacks,
                              _whole(ref["population_phi"]), _whole(arrays["population_phi"]), **attack_kwargs)
        for attack, per_sub in jk.items():
            for sub, loo in per_sub.items():
                block = paired.get(f"{reference}-{other}", {}).get(attack, {}).get(sub, {}).get("auc")
                if isinstance(block, dict):
                    block["jackknife"] = {"leave_one_out": loo,
                                          "unit": "shadow model (deleted as a target and from every reference set)"}
    return paired


def _whole(source: Any) -> np.ndarray | None:
    """A φ source read whole (the jackknife re-evaluates on model subsets; meant for digits-sized runs)."""
    if source is None:
        return None
    return source.read(0, source.shape[1]) if hasattr(source, "read") else np.asarray(source)
