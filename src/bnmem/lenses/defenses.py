"""The defenses lens: what to use instead of BN, and what it costs — one privacy–utility frontier.

Variants, all on the same data, outliers, keep matrix and model seeds:

- ``batch``: BatchNorm, the recipe as given;
- ``batch+gs<λ>``: BN with the γ/σ regularizer at λ = ``gs_lambda`` (τ =
  ``train.gs_tau``); λ comes from the config (see :class:`DefensesConfig`);
- ``group``, ``layer``, ``none``: the other normalizations (``norms``);
- ``dp-<norm>-eps<ε>``: DP-SGD (:mod:`bnmem.train.dp`, Opacus) at each target ε
  of ``dp_epsilons`` for each norm of ``dp_norms`` (group, layer or none: BN
  cannot be trained with per-example clipping).

Each variant's M shadow models are trained by the shadow-model engine
(:mod:`bnmem.shadow`, the layout the LiRA lens uses too; the
non-private ones by its chunk job, with the ensemble engine; the DP ones one by
one by :mod:`bnmem.shadow.dp`, because the ensemble engine has no
per-example clipping), all through the one executor and resumable per chunk
(DP: per model). The engine's query and attack code then gives, per
variant: clean test accuracy, memorization of the corrupted subset (fraction of
corrupted training examples a model trained on that it predicts with their
corrupted label), online LiRA and RMIA AUC and TPR at 0.1% / 1% FPR on all
examples and on the outliers (leave-one-out, means over targets), ε where it
applies, and training seconds per model.

Replicates: the whole experiment runs ``replicates`` times with a different
corruption seed, keep-matrix seed and model base seed; every interval is a 95%
Student t-interval over the replicate means (targets inside one replicate
share data and reference models, so they are never treated as independent).

Run directory::

    <out>/config.json  environment.json  metrics.json  frontier.png
    <out>/rep<r>/<variant>/   a LiRA norm directory (shadow/, query/, logits.npy, ...; DP: dp.json)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from bnmem import io
from bnmem.config import (
    ExperimentConfig,
    QueryViews,
    Seed32,
    ShadowModels,
    ShadowProtocol,
    check_norms,
    check_views_fit,
)
from bnmem.data.loaded import load_once
from bnmem.errors import BnmemError
from bnmem.executors import Executor
from bnmem.executors.local import LocalExecutor
from bnmem.attacks import spec as attack_spec
from bnmem.attacks.epsilon import epsilon_audit
from bnmem.figures.frontier import plot_frontier
from bnmem.frontier import front_points, pareto_front, recommendation, risk_name
from bnmem.lenses.registry import Lens, register
from bnmem.lenses.work import LensWork
from bnmem.lenses.spec import SPECS
from bnmem.names import DEFENSES
from bnmem.lenses.conditions import conditions
from bnmem.lenses.defenses_text import audit_text, summary, summary_table
from bnmem.rundir import prepare_run_dir
from bnmem.shadow.config import SEED_STRIDE, ShadowConfig
from bnmem.shadow.dp import dp_accounting, pending_dp_chunks, train_chunk
from bnmem.shadow.evaluate import accuracy_summary, attack_norm
from bnmem.shadow.work import estimate as shadow_estimate
from bnmem.shadow.memscores import mem_summary, norm_mem_scores
from bnmem.shadow.query import QUERY_FILE, query_models, query_shadow_chunk
from bnmem.shadow.training import ShadowChunk, chunk_dir, pending_chunks
from bnmem.stats import t_interval
from bnmem.train.dp import (  # imports Opacus only when a DP model trains
    DP_NORMS,
    DPConfig,
    require_opacus,
)

__all__ = ["DefensesConfig", "Variant", "frontier_panels", "frontier_title", "pareto_front", "recommendation",
           "run_defenses", "summary", "summary_table"]

SPEC = SPECS[DEFENSES]
METRICS = ("auc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr")
SUBSETS = ("all", "outliers")


@dataclass(frozen=True)
class Variant:
    """One recipe of the comparison."""

    name: str
    norm: str
    lam: float = 0.0  # γ/σ regularizer λ (0: off)
    epsilon: float | None = None  # DP-SGD target ε (None: not private)

    @property
    def folder(self) -> str:
        return self.name.replace("+", "_")

    @property
    def private(self) -> bool:
        return self.epsilon is not None


class DefensesConfig(ExperimentConfig):
    """Config of the defenses lens.

    Attributes:
        norms: the plain variants (any of batch, group, layer, none).
        seeds: exactly one base seed; replicate r uses base seed ``seeds[0] + r``.
        gs_lambda: λ of the BN + γ/σ-regularizer variant (0: no such variant).
            The default 1.0 is the smallest λ of the demo's mitigation grid; a
            λ selected on a validation split (by the mitigation lens) should be
            passed here when available. The lens does not select λ itself.
        dp_norms: norms of the DP-SGD variants (group, layer or none).
        dp_epsilons: target ε of the DP-SGD variants (δ = 1/N per model).
        dp_max_grad_norm: per-example clipping norm C.
        dp_lr: learning rate of the DP variants (None: ``train.lr``).
        dp_accountant: Opacus accountant (``prv``, Opacus's default).
        shadow_models, chunk_size, keep_seed, views, query_bn_mode: the shadow-model protocol's
            fields (:class:`bnmem.config.ShadowProtocol`: their rules and help), with this lens's defaults:
            M = 8 per variant and replicate; keep-matrix seed ``keep_seed + r`` in replicate r; the
            identity view only, because training uses no augmentation (the views should be the training's).
        replicates: independent repetitions (corruption, keep matrix, model seeds).
        risk_attack, risk_metric: the privacy-risk axis of the frontier
            (declared up front: online LiRA AUC).
    """

    norms: list[str] = ["batch", "group", "layer", "none"]
    seeds: list[int] = [0]
    gs_lambda: float = Field(1.0, ge=0)
    dp_norms: list[str] = ["group"]
    dp_epsilons: list[float] = [1.0, 8.0]
    dp_max_grad_norm: float = Field(1.0, gt=0)
    dp_lr: float | None = Field(None, gt=0)
    dp_accountant: Literal["prv", "rdp", "gdp"] = "prv"
    shadow_models: ShadowModels = ShadowProtocol.field("shadow_models", 8, "shadow models per variant and "
                                                                          "replicate (even, >= 4)")
    chunk_size: int = ShadowProtocol.field("chunk_size", 8)
    replicates: int = Field(2, ge=1)
    keep_seed: Seed32 = ShadowProtocol.field("keep_seed", 0, "keep-matrix seed of replicate 0 (replicate r: "
                                                               "keep_seed + r)")
    views: QueryViews = ShadowProtocol.field("views", ["identity"], "LiRA query views (identity only by default: "
                                                                     "training uses no augmentation)")
    query_bn_mode: Literal["eval", "batch"] = ShadowProtocol.field("query_bn_mode", "eval")
    risk_attack: Literal["online", "rmia"] = "online"
    risk_metric: Literal["auc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr"] = "auc"

    @field_validator("seeds")
    @classmethod
    def _one_seed(cls, v: list[int]) -> list[int]:
        if len(v) != 1 or v[0] < 0:
            raise ValueError(f"the defenses lens takes one base seed >= 0 (replicate r uses seed + r), got {v}")
        return v

    @field_validator("norms")
    @classmethod
    def _norms(cls, v: list[str]) -> list[str]:
        return check_norms(list(dict.fromkeys(v)))  # the one norm check (config.py); repeats dropped

    @field_validator("dp_norms")
    @classmethod
    def _dp_norms(cls, v: list[str]) -> list[str]:
        if "batch" in v:
            raise BnmemError("dp_norms cannot include batch: DP-SGD needs per-example gradients, which BN's "
                             "batch statistics couple; use group, layer or none")
        bad = [n for n in v if n not in DP_NORMS]
        if bad:
            raise BnmemError(f"unknown DP norm(s) {bad}; choose from {', '.join(DP_NORMS)}")
        return list(dict.fromkeys(v))

    @field_validator("dp_epsilons")
    @classmethod
    def _epsilons(cls, v: list[float]) -> list[float]:
        if any(not (e > 0 and math.isfinite(e)) for e in v):
            raise BnmemError(f"dp_epsilons must be positive numbers, got {v}")
        return sorted(dict.fromkeys(float(e) for e in v))

    @model_validator(mode="after")
    def _consistent(self) -> DefensesConfig:
        if self.train.gs_reg != 0:
            raise BnmemError("the defenses lens sets the regularizer per variant: use gs_lambda, not train.gs_reg")
        if self.gs_lambda > 0 and "batch" not in self.norms:
            raise BnmemError("gs_lambda > 0 adds a BN + γ/σ-regularizer variant: norms must include batch "
                             "(or set gs_lambda: 0)")
        if not self.variants():
            raise BnmemError("the defenses lens has no variant to run")
        check_views_fit(self.views, self.data.dataset)
        return self

    def variants(self) -> list[Variant]:
        """Plain norms (BN first, then its regularized variant), then DP-SGD by norm and ε."""
        out: list[Variant] = []
        for n in self.norms:
            out.append(Variant(n, n))
            if n == "batch" and self.gs_lambda > 0:
                out.append(Variant(f"batch+gs{self.gs_lambda:g}", "batch", lam=self.gs_lambda))
        out += [Variant(f"dp-{n}-eps{e:g}", n, epsilon=e) for n in self.dp_norms for e in self.dp_epsilons]
        return out

    def dp_config(self, epsilon: float) -> DPConfig:
        """The :class:`~bnmem.train.dp.DPConfig` of the DP variant at ``epsilon``."""
        return DPConfig(target_epsilon=epsilon, max_grad_norm=self.dp_max_grad_norm, lr=self.dp_lr,
                        accountant=self.dp_accountant)

    def lira_config(self, v: Variant, replicate: int) -> ShadowConfig:
        """The shadow-model protocol (the LiRA lens's, one norm) of variant ``v`` in replicate ``replicate``."""
        data = self.data.model_copy(update={"seed": self.data.seed + replicate})
        train = self.train.model_copy(update={"gs_reg": v.lam})
        if v.private and self.dp_lr is not None:
            train = train.model_copy(update={"lr": self.dp_lr})  # recorded in shadow.json's identity
        return ShadowConfig(data=data, arch=self.arch, norms=[v.norm], seeds=[self.seeds[0] + replicate],
                          train=train, shadow_models=self.shadow_models, chunk_size=self.chunk_size,
                          views=self.views, query_bn_mode=self.query_bn_mode, keep_seed=self.keep_seed + replicate)


def _pending(cfg: DefensesConfig, v: Variant, r: int, out: Path, progress: bool) -> list[ShadowChunk]:
    lcfg, vdir = cfg.lira_config(v, r), out / f"rep{r}" / v.folder
    if v.private:
        return pending_dp_chunks(lcfg, v.norm, cfg.dp_config(v.epsilon), vdir, progress)
    return pending_chunks(lcfg, v.norm, vdir, progress)


def _seconds_per_model(lcfg: ShadowConfig, vdir: Path) -> tuple[float, str]:
    """Mean training seconds per model (chunk seconds / models; DP: per model) and the trainer's name."""
    per_model, trainer = [], ""
    for c in lcfg.chunks():
        done = io.read_json(chunk_dir(vdir, c) / io.DONE)
        trainer = done.get("trainer", "")
        per_model += done["per_model_seconds"] if "per_model_seconds" in done else [done["seconds"] / len(c)] * len(c)
    return float(np.mean(per_model)), trainer


def query_all(cfg: DefensesConfig, out: Path, executor: Executor) -> None:
    """Query every unqueried chunk of every variant and replicate in one executor map.

    One map instead of one per variant: a process-pool executor starts its
    workers once. Each chunk job leaves its own marker, so :func:`_replicate_entry`'s
    ``query_models`` then only assembles (in-process).
    """
    chunks = []
    for r in range(cfg.replicates):
        for v in cfg.variants():
            lcfg, vdir = cfg.lira_config(v, r), out / f"rep{r}" / v.folder
            if not (vdir / QUERY_FILE).exists():  # an assembled query is checked (settings) by query_models
                chunks += [ShadowChunk.of(lcfg, v.norm, vdir, c) for c in lcfg.chunks()]
    if chunks:
        executor.map(query_shadow_chunk, chunks, desc="defense queries", resources={"num_cpus": cfg.train.threads})


def _replicate_entry(cfg: DefensesConfig, v: Variant, r: int, out: Path) -> dict[str, Any]:
    """Query (assemble) and attack one variant's shadow models of one replicate; that replicate's numbers."""
    lcfg, vdir = cfg.lira_config(v, r), out / f"rep{r}" / v.folder
    # In-process: query_all has run the chunk queries; a chunk whose settings changed is redone here.
    info = query_models(lcfg, v.norm, vdir, LocalExecutor(progress=False))
    attacks = attack_spec.playing(attack_spec.DEFENSES)
    res = attack_norm(vdir, attacks=attacks)
    acc = accuracy_summary(info["accuracy"])
    mem_key = "noisy_in" if cfg.data.label_noise > 0 else "ood_in"
    seconds, trainer = _seconds_per_model(lcfg, vdir)
    entry: dict[str, Any] = {
        "test_acc": acc["test"]["mean"],
        "train_in_acc": acc["train_in"]["mean"],
        "memorization": acc[mem_key]["mean"],
        "attacks": {a: {s: {m: res["metrics"][a][s][m] for m in METRICS} for s in SUBSETS if s in res["metrics"][a]}
                    for a in attacks},
        "subset_sizes": res["subset_sizes"],
        # Empirical ε lower bound (mean over targets; δ = 1/N): every variant's leakage in DP units.
        "eps_lb": {a: {s: res["metrics"][a][s]["eps_lb"] for s in SUBSETS if s in res["metrics"][a]} for a in attacks},
        "seconds_per_model": seconds,
        "memorization_scores": mem_summary(norm_mem_scores(vdir)),  # Feldman–Zhang (mem_scores.npz)
        "trainer": trainer,
        "model_seeds": lcfg.model_seeds(),
        "keep_seed": lcfg.keep_seed,
        "data_seed": lcfg.data.seed,
    }
    if v.private:
        records = dp_accounting(lcfg, vdir)
        entry["epsilon"] = float(np.mean([a["epsilon"] for a in records]))
        entry["dp_audit"] = _dp_audit(res, vdir, records, cfg.replicates)
        entry["accounting"] = {
            "epsilon_max": float(max(a["epsilon"] for a in records)),
            **{k: float(np.mean([a[k] for a in records])) for k in
               ("noise_multiplier", "sample_rate", "steps", "delta", "n_train", "expected_batch_size")},
            "max_grad_norm": records[0]["max_grad_norm"],
            "accountant": records[0]["accountant"],
            "secure_mode": records[0]["secure_mode"],
        }
    return entry


def _dp_audit(res: dict[str, Any], vdir: Path, records: list[dict[str, Any]], replicates: int) -> dict[str, Any]:
    """ε_lb ≤ accountant ε for every attack, subset and target of one DP variant's replicate
    (:func:`bnmem.attacks.epsilon.epsilon_audit`; the family spans the replicates)."""
    outliers = np.load(vdir / "is_noisy.npy") | np.load(vdir / "is_ood.npy")
    masks = {"all": np.ones_like(outliers)} | ({"outliers": outliers} if outliers.any() else {})
    tgt = res["targets"]
    scores = {a: res["scores"][a] for a in attack_spec.playing(attack_spec.DEFENSES)}
    return epsilon_audit(scores, res["members"], masks,
                         [records[t]["epsilon"] for t in tgt], [records[t]["delta"] for t in tgt],
                         family_extra=replicates)


def _summary(values: list[float | None]) -> dict[str, Any]:
    """Mean and 95% t-interval over replicates (None entries skipped; interval None below 2 values)."""
    ok = [float(v) for v in values if v is not None and math.isfinite(v)]
    ci = t_interval(ok) if len(ok) >= 2 else None
    return {"mean": float(np.mean(ok)) if ok else None, "ci": list(ci) if ci else None, "per_replicate": values}


def aggregate(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's numbers over replicates: mean, t-interval and per-replicate values of each."""
    agg: dict[str, Any] = {k: _summary([e[k] for e in entries])
                           for k in ("test_acc", "train_in_acc", "memorization", "seconds_per_model")}
    attacks = attack_spec.playing(attack_spec.DEFENSES)
    agg["attacks"] = {
        a: {s: {m: _summary([e["attacks"][a].get(s, {}).get(m) for e in entries]) for m in METRICS}
            for s in SUBSETS}
        for a in attacks
    }
    agg["eps_lb"] = {a: {s: _summary([e["eps_lb"][a].get(s) for e in entries]) for s in SUBSETS} for a in attacks}
    if "epsilon" in entries[0]:
        agg["epsilon"] = _summary([e["epsilon"] for e in entries])
        audits = [e["dp_audit"] for e in entries]
        agg["dp_audit"] = {"passed": all(a["passed"] for a in audits),
                           "eps_lb_max": max(a["eps_lb_max"] for a in audits), "per_replicate": audits}
    agg["trainer"] = entries[0]["trainer"]
    return agg


def run_defenses(cfg: DefensesConfig, out: str | Path, *, progress: bool = True,
                 executor: Executor | None = None) -> dict[str, Any]:
    """Train, query and attack every variant in every replicate; the frontier, table and recommendation.

    Writes ``config.json``, one LiRA norm directory per ``rep<r>/<variant>``
    (resumable), ``metrics.json`` (``"lens": "defenses"``, ``"schema_version": 1``)
    and ``frontier.png`` into ``out``.

    Args:
        cfg: the configuration.
        out: run directory.
        progress: progress bars.
        executor: where training and query jobs run (default: in-process).

    Returns:
        The metrics dict (also written to ``metrics.json``).

    Raises:
        BnmemError: bad config, Opacus missing for DP variants, a directory of
            another configuration.
    """
    variants = cfg.variants()
    if any(v.private for v in variants):
        require_opacus()  # one line before anything is written, not a failure inside the first DP job
    out = prepare_run_dir(out, cfg.model_dump(mode="json"))
    executor = executor or LocalExecutor(progress=progress)
    # One map over every unfinished chunk: DP chunks (the slowest, one model at a time) first,
    # so a parallel executor does not end on them.
    order = sorted(variants, key=lambda v: not v.private)
    chunks = [c for r in range(cfg.replicates) for v in order for c in _pending(cfg, v, r, out, progress)]
    if chunks:
        executor.map(train_chunk, chunks, desc="defense shadow chunks", resources={"num_cpus": cfg.train.threads})
    query_all(cfg, out, executor)
    entries = {v.name: [_replicate_entry(cfg, v, r, out) for r in range(cfg.replicates)] for v in variants}
    ds = load_once(cfg.data)
    first = entries[variants[0].name][0]
    result: dict[str, Any] = {
        "lens": SPEC.name,
        "schema_version": SPEC.schema_version,
        "variant_names": [v.name for v in variants],
        "variants": {v.name: {"norm": v.norm, "gs_lambda": v.lam, "target_epsilon": v.epsilon,
                              **aggregate(entries[v.name]), "replicates": entries[v.name]} for v in variants},
        "subset_sizes": first["subset_sizes"],
        "conditions": {
            **conditions(cfg),
            "variants": {v.name: {"norm": v.norm, "gs_lambda": v.lam, "dp_target_epsilon": v.epsilon}
                         for v in variants},
            "replicates": cfg.replicates,
            "replicate_seeds": "replicate r: data.seed + r (corruption), keep_seed + r, model base seed seeds[0] + r",
            "shadow_models": cfg.shadow_models,
            "epochs": cfg.train.epochs,
            "train": cfg.train.model_dump(mode="json"),
            "gs_lambda": cfg.gs_lambda,
            "gs_lambda_source": "config (gs_lambda); not selected by this lens",
            "gs_tau": cfg.train.gs_tau,
            "dp": {"norms": cfg.dp_norms, "target_epsilons": cfg.dp_epsilons, "delta": "1/N per model",
                   "max_grad_norm": cfg.dp_max_grad_norm, "lr": cfg.dp_lr or cfg.train.lr,
                   "accountant": cfg.dp_accountant, "sampling": "Poisson (Opacus DPDataLoader)",
                   "secure_mode": False,
                   "trainer": "Opacus make_private_with_epsilon, one model at a time (the ensemble engine has "
                              "no per-example clipping)"},
            "bn_mode_at_query": cfg.query_bn_mode,
            "views": cfg.views,
            "attacks": {"online": "online LiRA (leave-one-out over the shadow models)", "rmia": "RMIA"},
            "risk_attack": cfg.risk_attack,
            "risk_metric": cfg.risk_metric,
            "memorization": "fraction of corrupted training examples a model trained on that it predicts with "
                            "their corrupted label (mean over models)",
            "interval": "95% Student t-interval over replicate means",
            "seconds_per_model": "training seconds per model: chunk time / models for the ensemble engine "
                                 "(several models at once), per model for DP-SGD (one at a time)",
        },
        "dataset": ds.summary(),
    }
    result["frontier"] = {s: pareto_front({p.name: (p.accuracy, p.risk) for p in front_points(result, s)})
                          for s in SUBSETS}
    result["recommendation"] = recommendation(result)
    io.write_json(out / SPEC.results, result)
    plot_frontier(frontier_panels(result), out / "frontier.png", title=frontier_title(result))
    return result


def frontier_panels(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The frontier figure's data (:func:`bnmem.figures.frontier.plot_frontier`): per subset, every
    variant as a point (accuracy, risk, intervals) and the Pareto front."""
    norms = {name: v["norm"] for name, v in result["variants"].items()}
    regularized = {name for name, v in result["variants"].items() if v.get("gs_lambda")}
    panels = []
    for sub in ["all"] + (["outliers"] if result["subset_sizes"].get("outliers") else []):
        pts = front_points(result, sub)
        panels.append({"title": f"privacy vs utility, {'all examples' if sub == 'all' else 'outliers'}",
                       "risk_label": risk_name(result, sub), "points": pts, "norms": norms,
                       "regularized": regularized, "front": pareto_front({p.name: (p.accuracy, p.risk) for p in pts})})
    return panels


def frontier_title(result: dict[str, Any]) -> str:
    """The frontier figure's title: its conditions."""
    c = result["conditions"]
    return (f"{c['dataset']} {c['arch']}, label noise {c['label_noise']}, OOD {c['ood']}; "
            f"{c['shadow_models']} shadow models, {c['replicates']} replicates (bars: 95% "
            "t-interval); filled: on the front")


class DefensesWork(LensWork):
    """The defenses lens's work in one cell: the shadow models of every variant and replicate."""

    def bytes(self, n_train: int, parameter_count: Any) -> dict[str, int]:
        """The shadow-model estimate (:func:`bnmem.shadow.work.estimate`) per variant and replicate."""
        total: dict[str, int] = {}
        for r in range(self.cfg.replicates):
            for v in self.cfg.variants():
                for kind, size in shadow_estimate(self.cfg.lira_config(v, r), n_train, parameter_count).items():
                    total[kind] = total.get(kind, 0) + size
        return total


LENS = register(Lens.of(SPEC, config=DefensesConfig, run=run_defenses, summary=summary, work=DefensesWork))
