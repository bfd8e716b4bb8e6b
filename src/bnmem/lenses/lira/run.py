"""Lens 3, membership inference: LiRA/RMIA on BN vs other-norm shadow models.

For each norm, M shadow models train on seeded halves of the corrupted training
set, are queried on every training example (both through the shadow-model
engine, :mod:`bnmem.shadow`), and every attack of :mod:`bnmem.attacks` is
run leave-one-out: each model in turn is the target, the others its reference
models. Model seeds and the keep matrix are the same for every norm, so target m
under BN and target m without BN are the same experiment but for the norm; the
``paired`` section of ``metrics.json`` reports those per-target differences with
a bootstrap confidence interval.

Run directory::

    <out>/config.json  environment.json  metrics.json  roc.png  mem_gallery.png  mem_scores.png
    <out>/<norm>/phi.npy population_phi.npy population_labels.npy keep.npy labels.npy pred.npy
                 is_noisy.npy is_ood.npy query.json mem_scores.npz  (logits.npy with save_logits)
    <out>/<norm>/shadow/...  query/...      (resumable work)

Python use (e.g. another recipe's LiRA AUC), through the shadow-model engine::

    cfg = ShadowConfig(data=DataConfig(dataset="digits", label_noise=0.05), norms=["batch"],
                     train=TrainConfig(epochs=30, gs_reg=0.1), shadow_models=32)
    entry = bnmem.shadow.run_shadow_norm(cfg, "batch", out / "batch_gsreg", get_executor("local"))
    entry["attacks"]["online"]["all"]["auc"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bnmem import io
from bnmem.analysis_plan import MATCHED_FIT_OPTION
from bnmem.attacks import spec as attack_spec
from bnmem.data.loaded import load_once
from bnmem.executors import Executor
from bnmem.executors.local import LocalExecutor
from bnmem.figures.roc import plot_lira_roc
from bnmem.formatting import fmt, interval, pct
from bnmem.lenses.lira.config import LiraConfig
from bnmem.lenses.lira.jackknife import attach_jackknife
from bnmem.lenses.lira.matched_fit import (
    MATCHED_FIT_WORK, epoch_query_bytes, matched_fit_block, matched_fit_table, study_train_job, train_job,
)
from bnmem.lenses.lira.memorization import lens_memorization
from bnmem.lenses.lira.shadow_gamma_sigma import shadow_gamma_sigma
from bnmem.lenses.registry import Lens, register
from bnmem.lenses.work import LensWork
from bnmem.lenses.spec import SPECS
from bnmem.names import LIRA
from bnmem.lenses.conditions import conditions
from bnmem.rundir import prepare_run_dir
from bnmem.shadow.evaluate import attack_norm, query_and_attack
from bnmem.shadow.work import LENS_SHARE_AFTER_PHASES, PHASES, ShadowWork, estimate
from bnmem.shadow.recipe import norm_configs
from bnmem.shadow.training import chunk_dir, pending_chunks
# The one paired-difference implementation (the report computes the same interval).
from bnmem.stats import N_RESAMPLES, SEED, paired_summary as paired_differences
from bnmem.texttable import table

__all__ = ["LiraConfig", "paired_differences", "run_lira", "summary_table"]

SUBSETS = ("all", "outliers", "inliers")
# Where metrics.json keeps the attacks re-run on the identity query view alone (when there are other views).
IDENTITY_BLOCK = "identity_only"
PAIRED_METRICS = ("auc", "tpr_at_1pct_fpr")
BOOTSTRAP = {"resamples": N_RESAMPLES, "seed": SEED, "level": 0.95,
             "rule": "Student t-interval at every n (the percentile bootstrap reported next to it)"}


def paired_section(metrics: dict[str, dict], reference: str, others: Sequence[str]) -> dict[str, Any]:
    """``{"<ref>-<other>": {attack: {subset: {metric: paired_differences}}}}``."""
    out: dict[str, Any] = {}
    for other in others:
        out[f"{reference}-{other}"] = {
            attack: {
                sub: {
                    name: paired_differences(metrics[reference][attack][sub][f"{name}_per_target"],
                                             metrics[other][attack][sub][f"{name}_per_target"])
                    for name in PAIRED_METRICS
                }
                for sub in metrics[reference][attack]
            }
            for attack in metrics[reference]
        }
    return out


def run_lira(cfg: LiraConfig, out: str | Path, executor: Executor | None = None,
             progress: bool = True, jackknife: bool = False) -> dict[str, Any]:
    """The membership-inference lens: shadow models per norm, attacks, paired comparison.

    Writes ``config.json``, per-norm arrays (see module docstring),
    ``metrics.json`` and ``roc.png`` into ``out``; a rerun resumes.

    Args:
        cfg: the configuration.
        out: run directory.
        executor: where training and query jobs run (default: in-process).
        progress: progress bars.
        jackknife: also compute the delete-one-model jackknife of the paired AUC differences
            (:mod:`bnmem.lenses.lira.jackknife`; one attack evaluation per model and norm), the report's
            interval when the run has a single replicate.

    Returns:
        The metrics dict (also in ``metrics.json``): per norm → attack → subset
        → summary; ``accuracy`` per norm; ``paired``; ``conditions``;
        ``subset_sizes``; ``dataset``.

    Raises:
        BnmemError: bad configuration or data, or ``out`` holds another run.
    """
    for norm in cfg.norms:
        cfg.model(norm)  # an unknown norm fails before anything is written
    out = prepare_run_dir(out, cfg.model_dump(mode="json"))
    executor = executor or LocalExecutor(progress=progress)
    ds = load_once(cfg.data)  # the cell's one copy in this process (its chunk jobs here share it)
    cfgs, selection = norm_configs(cfg, ds, out)
    # One map over every norm's unfinished chunks: a parallel executor overlaps norms.
    chunks = [c for norm in cfg.norms for c in pending_chunks(cfgs[norm], norm, out / norm, progress=progress)]
    if chunks:
        executor.map(train_job(cfg), chunks, desc="shadow chunks", resources={"num_cpus": cfg.train.threads})
    entries = {norm: query_and_attack(cfgs[norm], norm, out / norm, executor, ds) for norm in cfg.norms}
    result = _metrics(cfg, cfgs, selection, entries, ds.summary(), ds.n_val)
    reference, others = _reference(cfg)
    names = result["conditions"]["views"]
    if len(names) > 1:
        # The attacks on the identity view alone: the report's "identity-only" robustness alternative.
        ident = {norm: attack_norm(out / norm, views=[names.index("identity")])["metrics"] for norm in cfg.norms}
        result[IDENTITY_BLOCK] = {**ident, "paired": paired_section(ident, reference, others)}
    # Feldman–Zhang scores from the same shadow models (mem_scores.npz per norm, gallery, distributions).
    result["memorization"] = lens_memorization(out, cfg.norms, reference, ds, _title(cfg))
    if jackknife:
        attach_jackknife(result["paired"], out, reference, others)
    if cfg.matched_fit:  # row 3c: the attack at every epoch, the report matches the norms' test accuracy
        result[MATCHED_FIT_OPTION] = matched_fit_block(cfgs, out, ds)
    io.write_json(out / LENS.results, result)
    plot_lira_roc(entries, out / "roc.png", attack_spec.default_attacks(), title=_title(cfg))
    shadow_gamma_sigma(cfg, out)  # the BN shadow models are there: γ/σ over M models at no extra training
    return result


def _reference(cfg: LiraConfig) -> tuple[str, list[str]]:
    """The paired comparison's reference norm (BN when present) and the others."""
    reference = "batch" if "batch" in cfg.norms else cfg.norms[0]
    return reference, [n for n in cfg.norms if n != reference]


def _metrics(cfg: LiraConfig, cfgs: dict[str, LiraConfig], selection: dict[str, Any],
             entries: dict[str, dict[str, Any]], dataset: dict[str, Any], n_val: int) -> dict[str, Any]:
    """metrics.json (before the identity-only and jackknife blocks): per-norm attacks, accuracy, paired
    differences and the conditions the numbers were measured under."""
    metrics = {norm: e["attacks"] for norm, e in entries.items()}
    reference, others = _reference(cfg)
    first = entries[cfg.norms[0]]
    return LENS.stamp({
        **metrics,
        "accuracy": {norm: e["accuracy"] for norm, e in entries.items()},
        "paired": paired_section(metrics, reference, others),
        "conditions": {
            **conditions(cfg),
            "shadow_models": cfg.shadow_models,
            "base_seed": cfg.base_seed,
            "model_seeds": cfg.model_seeds(),
            "keep_seed": cfg.keep_seed,
            "chunk_size": cfg.chunk_size,
            "epochs": (cfg.train.epochs if selection["mode"] != "per-norm"
                       else {norm: c.train.epochs for norm, c in cfgs.items()}),
            "train": cfg.train.model_dump(mode="json"),
            "recipe": selection["mode"],
            "recipe_selection": selection,
            "lr_per_norm": {norm: c.train.lr for norm, c in cfgs.items()},
            "epochs_per_norm": {norm: c.train.epochs for norm, c in cfgs.items()},
            "augment": cfg.train.augment,
            "n_val": n_val,
            "bn_mode_at_query": cfg.query_bn_mode,
            "rmia_population": first["attack_settings"]["rmia_population"],
            "query": first["query"],
            "views": first["query"]["views"],
            "attacks": first["attack_settings"],
            "paired_reference": reference,
            "bootstrap": {**BOOTSTRAP, "unit": "target model (paired by model index); targets share reference "
                                         "models, so this interval is descriptive, not a replication interval"},
            "protocol": "leave-one-out: each shadow model is the target once, the others are its references; "
                        "metrics are means over targets",
        },
        "subset_sizes": first["subset_sizes"],
        "dataset": dataset,
    })


def _title(cfg: LiraConfig) -> str:
    return (f"{cfg.data.dataset} {cfg.arch}, label noise {cfg.data.label_noise}, OOD {cfg.data.ood}, "
            f"{cfg.shadow_models} shadow models, BN queried in {cfg.query_bn_mode} mode")


def summary_table(result: dict[str, Any]) -> str:
    """Printable tables: attack metrics per norm with paired differences, and shadow-model accuracy."""
    cond = result["conditions"]
    norms, ref = cond["norms"], cond["paired_reference"]
    others = [n for n in norms if n != ref]
    header = ["attack", "subset"] + [f"AUC {n}" for n in norms] + [f"ΔAUC {ref}−{o} [95% CI]" for o in others]
    header += [f"TPR@1% {n}" for n in norms] + [f"ΔTPR@1% {ref}−{o} (pts)" for o in others]
    header += [f"ε_lb {n}" for n in norms]  # empirical ε lower bound, mean over targets (docs/attacks.md)
    rows = []
    for attack in attack_spec.shown_in(attack_spec.LENS_TABLE):
        for sub in ("all", "outliers"):
            aucs = [result[n][attack][sub]["auc"] for n in norms]
            if not np.isfinite(aucs).any():
                continue  # e.g. no outliers on clean data
            paired = [result["paired"][f"{ref}-{o}"][attack][sub] for o in others]
            row = [attack, sub] + [fmt(a) for a in aucs]
            row += [interval(p["auc"]["mean"], *p["auc"]["ci"], "+.3f") for p in paired]
            row += [pct(result[n][attack][sub]["tpr_at_1pct_fpr"], suffix="") for n in norms]
            row += [interval(p["tpr_at_1pct_fpr"]["mean"], *p["tpr_at_1pct_fpr"]["ci"], "+.1f", scale=100)
                    for p in paired]
            row += [fmt(result[n][attack][sub].get("eps_lb"), ".2f") for n in norms]
            rows.append(row)
    acc_rows = []
    for n in norms:
        a = result["accuracy"][n]

        def span(key: str) -> str:
            return interval(a[key]["mean"], a[key]["min"], a[key]["max"])

        lr = (cond.get("lr_per_norm") or {}).get(n)
        acc_rows.append([n, "-" if lr is None else f"{lr:g}", span("train_in"), span("train_out"), span("test"),
                         span("noisy_in")])
    acc_header = ["norm", "lr", "train IN acc [min, max]", "train OUT acc", "test acc", "noisy IN fitted"]
    sizes = result["subset_sizes"]
    matched = [] if MATCHED_FIT_OPTION not in result else ["", matched_fit_table(result[MATCHED_FIT_OPTION], norms)]
    return "\n".join([
        f"LiRA leave-one-out over {cond['shadow_models']} shadow models per norm, "
        f"{sizes['all']} examples ({sizes['outliers']} outliers), BN queried in {cond['bn_mode_at_query']} mode, "
        f"views: {len(cond['views'])}",
        table(rows, header),
        "",
        table(acc_rows, acc_header),
        *matched,
    ])


class LiraWork(LensWork):
    """The lira lens's work in one cell: its shadow models (M per norm, with the per-epoch queries when
    ``matched_fit`` is on) trained and queried as the shadow engine's tasks
    (:class:`bnmem.shadow.work.ShadowWork`: recipe, training chunks, query chunks), then the lens job's attacks
    and figures."""

    lens_share = LENS_SHARE_AFTER_PHASES

    def phases(self) -> ShadowWork:
        """The shadow engine's work in this cell, training with the per-epoch queries when ``matched_fit`` is
        on (the same chunks; a job that also queries after every epoch)."""
        return ShadowWork.of(self.cfg, self.out, train=study_train_job(self.cfg))

    def tasks(self, job_id: str, cost: float) -> list[Any]:
        return self.phases().tasks(job_id, cost)

    def task_seconds(self) -> float | None:
        """The seconds every norm's training chunks recorded in their ``DONE`` markers (with ``matched_fit``, their
        per-epoch queries too: the same job). The query chunks and a per-norm cell's own recipe selection record
        none and are not counted (a study's per-norm cells read their setting's selection, a job of its own)."""
        chunks = self.cfg.chunks()
        return io.done_seconds_total(chunk_dir(self.out / norm, c) for norm in self.cfg.norms for c in chunks)

    def models(self) -> float:
        # matched_fit (row 3c) queries and attacks every shadow model after every epoch as well
        per_model = 1.0 + (MATCHED_FIT_WORK if getattr(self.cfg, MATCHED_FIT_OPTION, False) else 0.0)
        return float(self.cfg.shadow_models) * len(self.cfg.norms) * per_model

    def bytes(self, n_train: int, parameter_count: Any) -> dict[str, int]:
        """The shadow engine's bytes (:func:`bnmem.shadow.work.estimate`), plus the per-epoch queries when
        ``matched_fit`` is on."""
        out = estimate(self.cfg, n_train, parameter_count)
        extra = epoch_query_bytes(self.cfg, n_train)
        return {**out, "per-epoch queries (matched_fit)": extra} if extra else out


LENS = register(Lens.of(SPECS[LIRA], config=LiraConfig, run=run_lira, summary=summary_table, work=LiraWork))
assert LENS.phases == PHASES, "the lira spec names the shadow engine's phases"
