"""Row 3c's measurement: the lira lens's shadow models queried after every epoch, attacked at every epoch.

With ``lenses.lira.matched_fit: true`` each shadow-model training job also queries its models at the end
of every epoch, while they train (:class:`EpochQueries`, the ensemble engine's per-epoch hook): the same
query as the final one (:func:`bnmem.shadow.query.query_model`: the lens's views and BN mode), so the last
epoch's numbers are the final query's. Per chunk it writes, before the chunk's models are saved and marked
done::

    <norm_dir>/matched_fit/<chunk>.phi.npy, <chunk>.phi_lo.npy   φ [E, n_chunk, N, V] (float32 + residual)
    <norm_dir>/matched_fit/<chunk>.json                           per-epoch accuracies; written last (marker)

:func:`matched_fit_block` then runs, per norm and epoch, online LiRA leave-one-out over the M shadow models
with the threshold at 0.1% FPR fitted on each target's references alone
(:func:`bnmem.attacks.shadow_operating_point.shadow_operating_points`), and returns the ``matched_fit``
block of ``metrics.json`` that row 3c reads (:mod:`bnmem.report.claims.claim3c`): the grid over every
epoch, from which the report picks the matched epochs by the plan's rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from bnmem import io
from bnmem.analysis_plan import MATCH_FPR, MATCHED_FIT_OPTION
from bnmem.attacks.phi import split_phi
from bnmem.attacks import spec as attack_spec
from bnmem.attacks.shadow_operating_point import shadow_operating_points
from bnmem.allocator import keep_freed_memory
from bnmem.data import OutlierDataset
from bnmem.data.loaded import load_once
from bnmem.errors import BnmemError
from bnmem.shadow.config import ShadowConfig
from bnmem.shadow.query import device_inputs, query_model, query_settings
from bnmem.shadow.training import ShadowChunk, chunk_dir, chunk_name, shadow_keep, train_shadow_chunk
from bnmem.texttable import table
from bnmem.train.trainer import seeded_model

MATCHED_DIR = "matched_fit"
ACCURACY_KEYS = ("train_in", "train_out", "test")


def _base(norm_dir: str | Path, models: Sequence[int]) -> Path:
    return Path(norm_dir) / MATCHED_DIR / chunk_name(list(models))


def marker_path(norm_dir: str | Path, models: Sequence[int]) -> Path:
    """The chunk's per-epoch query marker (written after its φ files)."""
    return _base(norm_dir, models).with_suffix(".json")


class EpochQueries:
    """The per-epoch hook of one training chunk (:data:`bnmem.train.ensemble.StatesHook`): queries every
    model at the end of every epoch and writes the chunk's files once every (epoch, model) is in.

    The states are loaded into one scratch model built as :func:`~bnmem.shadow.training.load_shadow_model`
    builds a shadow model for its final query, so the two queries compute the same numbers. The chunk's φ
    stays in memory until the last epoch (E × n_chunk × N × V float64: 1.8 MB for a demo chunk, but
    ~11 GB for 16 CIFAR-10 models × 100 epochs × 18 views; such a run wants small chunks).
    """

    def __init__(self, cfg: ShadowConfig, norm: str, norm_dir: str | Path, models: Sequence[int],
                 ds: OutlierDataset):
        self.cfg, self.norm_dir, self.models, self.ds = cfg, Path(norm_dir), [int(m) for m in models], ds
        self.views = cfg.query_views(ds.input_shape)
        self.keep = shadow_keep(cfg, ds.n_train)[self.models]
        device = torch.device(cfg.train.device)
        with torch.random.fork_rng(devices=[]):  # seeding the scratch model must not move training's RNG
            self.scratch = seeded_model(cfg.model(norm), ds, cfg.model_seed(self.models[0])).to(device)
        self.inputs = device_inputs(ds, device)
        e, n = cfg.train.epochs, len(self.models)
        self.phi = np.zeros((e, n, ds.n_train, len(self.views)), dtype=np.float64)
        self.acc = {k: np.full((e, n), np.nan) for k in ACCURACY_KEYS}
        self.seen = np.zeros((e, n), dtype=bool)

    def __call__(self, epoch: int, indices: list[int], states: list[dict[str, torch.Tensor]]) -> None:
        for i, state in zip(indices, states):
            self.scratch.load_state_dict(state)
            q = query_model(self.scratch, self.ds, self.views, self.cfg, self.inputs)
            self.phi[epoch - 1, i] = q.phi
            for key, value in q.accuracy(self.ds, self.keep[i]).items():
                if key in self.acc:
                    self.acc[key][epoch - 1, i] = np.nan if value is None else value
            self.seen[epoch - 1, i] = True
        if self.seen.all():
            self.write()

    def write(self) -> None:
        """The chunk's φ files, then its marker."""
        base = _base(self.norm_dir, self.models)
        hi, lo = split_phi(self.phi)
        io.write_npy(base.with_name(f"{base.name}.phi.npy"), hi)
        io.write_npy(base.with_name(f"{base.name}.phi_lo.npy"), lo)
        io.write_json(marker_path(self.norm_dir, self.models), {
            "models": self.models, "epochs": list(range(1, self.cfg.train.epochs + 1)),
            "settings": query_settings(self.cfg, self.ds),
            "accuracy": {k: [[None if np.isnan(x) else float(x) for x in row] for row in a]
                         for k, a in self.acc.items()}})


def train_matched_chunk(chunk: ShadowChunk) -> dict[str, Any]:
    """Executor job: :func:`~bnmem.shadow.training.train_shadow_chunk` with the per-epoch queries.

    Raises:
        BnmemError: the chunk was trained without them (the option was off when it ran).
    """
    cfg, models = chunk.config, list(chunk.models)
    if io.is_done(chunk_dir(chunk.run_dir, models)):
        if not marker_path(chunk.run_dir, models).exists():
            raise BnmemError(f"shadow models {models[0]}-{models[-1]} in {chunk.run_dir} were trained without "
                             f"the per-epoch queries of {MATCHED_FIT_OPTION}; delete "
                             f"{chunk_dir(chunk.run_dir, models)} to train them again with them")
        return train_shadow_chunk(chunk)  # finished: skipped
    hook = EpochQueries(cfg, chunk.norm, chunk.run_dir, models, load_once(cfg.data))
    return train_shadow_chunk(chunk, on_epoch=hook)


# The per-epoch queries and attacks as a multiple of the lens's training (what its cell work declares): measured
# on one demo lira cell (digits LeNet, 8 shadow models per norm, 20 epochs, one thread), two pairs of runs at a
# load of ~14 on 2 cores: 5.4 / 4.3 s of CPU without the option, 12.3 / 14.1 s with it (of which 3.2 / 3.8 s the
# attacks at every epoch): (13.2 − 4.85) / 4.85 ≈ 1.7.
MATCHED_FIT_WORK = 1.7


def train_job(cfg: Any) -> Callable[[ShadowChunk], dict[str, Any]]:
    """The training job of the lira lens's config: with the per-epoch queries when the option is on."""
    return train_matched_chunk if getattr(cfg, MATCHED_FIT_OPTION, False) else train_shadow_chunk


def train_matched_chunk_job(chunk: ShadowChunk) -> dict[str, Any]:
    """Job: :func:`train_matched_chunk` in a study (the process's malloc thresholds first, as every study job)."""
    keep_freed_memory()
    return train_matched_chunk(chunk)


def study_train_job(cfg: Any) -> Callable[[ShadowChunk], dict[str, Any]] | None:
    """The cell work's training job when the option is on (None: the shadow engine's own)."""
    return train_matched_chunk_job if getattr(cfg, MATCHED_FIT_OPTION, False) else None


def load_epoch_queries(cfg: ShadowConfig, norm_dir: str | Path, ds: OutlierDataset
                       ) -> tuple[list[int], np.ndarray, dict[str, np.ndarray]]:
    """Every chunk's per-epoch queries of one norm: (epochs, φ float64 [E, M, N, V], accuracies [E, M]).

    Raises:
        BnmemError: a chunk's queries are missing or were made with other settings.
    """
    settings = query_settings(cfg, ds)
    phis, accs, epochs = [], {k: [] for k in ACCURACY_KEYS}, None
    for c in cfg.chunks():
        marker = marker_path(norm_dir, c)
        info = io.read_json(marker) if marker.exists() else None
        if info is None or info.get("settings") != settings:
            raise BnmemError(f"{marker}: the per-epoch queries of models {c[0]}-{c[-1]} are missing or were made "
                             f"with other query settings; delete {chunk_dir(norm_dir, c)} to train them again")
        base = _base(norm_dir, c)
        phis.append(np.load(base.with_name(f"{base.name}.phi.npy")).astype(np.float64)
                    + np.load(base.with_name(f"{base.name}.phi_lo.npy")))
        for k in ACCURACY_KEYS:
            accs[k].append(np.array([[np.nan if x is None else x for x in row] for row in info["accuracy"][k]]))
        epochs = info["epochs"]
    return list(epochs or []), np.concatenate(phis, axis=1), {k: np.concatenate(v, axis=1) for k, v in accs.items()}


def epoch_query_bytes(cfg: Any, n_train: int) -> int:
    """Bytes the per-epoch queries write: per norm φ [E, M, N, V] as float32 plus its float32 residual
    (0 when the option is off)."""
    if not getattr(cfg, MATCHED_FIT_OPTION, False):
        return 0
    from bnmem.data import model_shape

    views = len(cfg.query_views(model_shape(cfg.data)[0]))
    return len(cfg.norms) * 2 * 4 * cfg.train.epochs * cfg.shadow_models * n_train * views


def _grid(a: np.ndarray) -> list[list[float | None]]:
    return [[None if not np.isfinite(x) else float(x) for x in row] for row in np.asarray(a, dtype=np.float64)]


def matched_fit_block(cfgs: dict[str, ShadowConfig], out: str | Path, ds: OutlierDataset) -> dict[str, Any]:
    """The ``matched_fit`` block of the lira ``metrics.json`` (the layout :mod:`bnmem.report.claims.claim3c`
    reads): per norm the per-epoch test (and IN-training) accuracy of every model, and online LiRA at every
    epoch: the per-target AUC, and the TPR and FPR at the threshold fitted on the references' non-members.

    Args:
        cfgs: each norm's config (its own recipe under ``recipe: per-norm``).
        out: the lira run directory (``<out>/<norm>/matched_fit/`` holds the per-epoch queries).
        ds: the dataset.
    """
    attack = attack_spec.the(attack_spec.PRIMARY)  # the paper's attack (bnmem.attacks.spec); row 3c reads it
    block: dict[str, Any] = {
        "epochs": None,
        "definition": (
            f"every shadow model queried at the end of every epoch exactly as at the final one (views, BN mode); "
            f"per epoch, {attack} LiRA leave-one-out over the M shadow models of that epoch (each the target "
            f"once, its references the others at the same epoch); the threshold at {MATCH_FPR:.1%} FPR fitted "
            "per target on the non-member scores of its references, each scored leave-one-out among the "
            "references alone (never on the target's scores); test_acc: identity-view accuracy on the test "
            "split; train_acc: on the model's IN examples"),
        "fpr": MATCH_FPR,
    }
    own: dict[str, list[int]] = {}
    for norm, cfg in cfgs.items():
        epochs, phi, acc = load_epoch_queries(cfg, Path(out) / norm, ds)
        own[norm] = list(epochs)
        keep = shadow_keep(cfg, ds.n_train)
        per_epoch = [shadow_operating_points(phi[e], keep, attack, MATCH_FPR) for e in range(len(epochs))]
        block[norm] = {
            "test_acc": _grid(acc["test"]),
            "train_acc": _grid(acc["train_in"]),
            attack: {"auc_per_target": _grid([p["auc_per_target"] for p in per_epoch]),
                     "tpr_at_0.1pct_fpr_shadow": _grid([p["tpr_at_shadow_threshold"] for p in per_epoch]),
                     "fpr_at_shadow_threshold": _grid([p["fpr_at_shadow_threshold"] for p in per_epoch])},
        }
    # Under fair arms each norm trains its own epochs: the block's epochs are all of them, and a norm's rows at
    # the epochs it did not train are missing (None), never filled in.
    union = sorted({e for eps in own.values() for e in eps})
    for norm, eps in own.items():
        if eps != union:
            at = {e: i for i, e in enumerate(eps)}
            rec = block[norm]
            for key, rows in [("test_acc", rec["test_acc"]), ("train_acc", rec["train_acc"]),
                              *((f"{attack}/{k}", v) for k, v in rec[attack].items())]:
                width = len(rows[0]) if rows else 0
                padded = [rows[at[e]] if e in at else [None] * width for e in union]
                if "/" in key:
                    rec[attack][key.split("/", 1)[1]] = padded
                else:
                    rec[key] = padded
    block["epochs"] = union
    if len({tuple(e) for e in own.values()}) > 1:
        block["epochs_per_norm"] = own
    return block


def matched_fit_table(block: dict[str, Any], norms: Sequence[str]) -> str:
    """The block per epoch, means over the shadow models: test accuracy, online-LiRA AUC and the TPR / FPR at
    the threshold fitted on the references (the report matches the norms' test accuracy on these)."""
    header = ["epoch"] + [f"{h} {n}" for n in norms for h in ("test acc", "AUC", "TPR@0.1% (shadow thr.)", "FPR")]
    attack, rows = attack_spec.the(attack_spec.PRIMARY), []
    for e, epoch in enumerate(block["epochs"]):
        row = [str(epoch)]
        for n in norms:
            att = block[n][attack]
            grids = (block[n]["test_acc"], att["auc_per_target"], att["tpr_at_0.1pct_fpr_shadow"],
                     att["fpr_at_shadow_threshold"])
            values = [np.array(g[e], dtype=np.float64) for g in grids]
            if not np.isfinite(values[0]).any():  # an epoch this norm did not train (fair arms)
                row += ["-"] * 4
                continue
            means = [np.nanmean(v) for v in values]
            row += [f"{means[0]:.3f}", f"{means[1]:.3f}", f"{means[2]:.2%}", f"{means[3]:.2%}"]
        rows.append(row)
    return (f"Per epoch ({MATCHED_FIT_OPTION}; the report reads the norms at matched test accuracy), means over "
            f"shadow models:\n" + table(rows, header))
