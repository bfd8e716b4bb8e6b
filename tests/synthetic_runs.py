"""Synthetic runs for the claim tests: lens results in the schema each lens writes, built in memory.

Replicates are cells ``<id>-r<k>``; no training. Imported by the test modules that decide claims on
hand-made results (pytest puts this folder on ``sys.path``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bnmem.names import LIRA
from bnmem.report.rundata import CellOutput, LensOutput, RunData

NORMS = ["batch", "none"]


def make_run(cells: list[CellOutput]) -> RunData:
    return RunData(Path("/synthetic"), "study", "synthetic", cells, None, None)


def make_cell(base: str, r: int, lenses: dict[str, dict], label_noise: float = 0.05, seeds=None) -> CellOutput:
    cond = {"dataset": "digits", "arch": "lenet", "norms": NORMS, "label_noise": label_noise, "ood": 0.0,
            "ood_source": None, "replicate": r, "seeds": seeds if seeds is not None else [3 * r, 3 * r + 1]}
    cell = CellOutput(f"{base}-r{r}", cond)
    for kind, data in lenses.items():
        cell.lenses[kind] = LensOutput(kind, Path(f"/synthetic/{base}-r{r}/{kind}"), data)
    return cell


def dataset_info(label_noise: float) -> dict:
    return {"dataset": "digits", "n_train": 200, "n_noisy": int(200 * label_noise), "n_ood": 0}


def lira_data(bn: dict[str, np.ndarray], none: dict[str, np.ndarray], label_noise: float = 0.05) -> dict:
    """A lira metrics.json: per norm, attack -> {"all": {"auc", "auc_per_target"}}."""

    def block(per_attack: dict[str, np.ndarray]) -> dict:
        return {a: {"all": {"auc": float(np.mean(v)), "auc_per_target": [float(x) for x in v],
                            "tpr_at_0.1pct_fpr": 0.01}} for a, v in per_attack.items()}

    return {"batch": block(bn), "none": block(none), "paired": {},
            "conditions": {"norms": NORMS, "label_noise": label_noise, "shadow_models": len(next(iter(bn.values())))},
            "dataset": dataset_info(label_noise)}


def lira_run(per_replicate_diffs: list[np.ndarray], label_noise: float = 0.05, base_auc: float = 0.6,
             attacks=("online", "offline", "rmia")) -> RunData:
    """Replicates whose targets have the given BN − none AUC differences (the same for every attack)."""
    cells = []
    for r, d in enumerate(per_replicate_diffs):
        none = np.full(len(d), base_auc)
        data = lira_data({a: none + d for a in attacks}, {a: none for a in attacks}, label_noise)
        cells.append(make_cell("digits-lenet-noise", r, {LIRA: data}, label_noise))
    return make_run(cells)


def clean_curve(epochs: int) -> np.ndarray:
    """The default clean-subset training accuracy after each epoch: strictly rising from 0.5 to 0.99, the same
    for both norms, so matched progress (plan 5.0) reads both at the same epoch."""
    return np.linspace(0.5, 0.99, epochs)


def memorize_data(bn: np.ndarray, none: np.ndarray, clean_bn: np.ndarray | None = None,
                  clean_none: np.ndarray | None = None) -> dict:
    """A memorize metrics.json: per norm, per seed, the noisy-subset and clean-subset accuracy per epoch
    ([seeds, epochs]; clean: :func:`clean_curve` for every seed unless given)."""

    def block(acc: np.ndarray, clean: np.ndarray | None) -> dict:
        clean = np.broadcast_to(clean_curve(acc.shape[1]) if clean is None else clean, acc.shape)
        return {"per_seed": {str(s): {"noisy_acc": [float(x) for x in row], "clean_acc": [float(x) for x in c]}
                             for s, (row, c) in enumerate(zip(acc, clean))},
                "final": {"noisy_acc": float(acc[:, -1].mean()), "clean_acc": float(clean[:, -1].mean())},
                "epochs_to_fit_noisy": {}}

    return {"batch": block(bn, clean_bn), "none": block(none, clean_none),
            "conditions": {"norms": NORMS, "label_noise": 0.05}, "dataset": dataset_info(0.05)}
