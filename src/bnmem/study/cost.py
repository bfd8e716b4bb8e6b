"""How long a study would take: every job's training work, timed on this machine, calibrated by a pilot run.

A job's *work* is the example-epochs of the models it trains itself (models × epochs × training
examples; a lens whose (norm, seed) runs a shared-training job trains has none of its own). Its seconds
are ``work × step(arch) × factor(lens)`` plus the lens's fixed seconds:

* ``step(arch)``: seconds per training example of one SGD step of the architecture on the dataset's
  input shape at the study's batch size and thread count, **measured now** (a few timed steps);
* ``factor(lens)`` and the fixed seconds: what the lens does besides plain training (per-epoch hooks,
  per-sample gradients, LiRA's queries, summarizing). Without a pilot the declared :data:`DEFAULT_FACTORS`
  (uncalibrated); with a finished pilot run (:func:`calibrate`) the ratio of the seconds its DONE markers
  recorded to the work of its jobs, per lens.

Estimates are for the local executor with one worker: a study's jobs run one after another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.analysis_plan import MATCHED_FIT_OPTION
from bnmem.study.dryrun import human_seconds, n_train
from bnmem.study.run import Job
from bnmem.study.recipes import SELECTION
from bnmem.study.share import SHARED

# Seconds per example-epoch relative to plain training, and fixed seconds per job, without a pilot.
DEFAULT_FACTORS: dict[str, float] = {SHARED: 1.5, "memorize": 1.5, "gradnorms": 4.0, "gamma-sigma": 2.0,
                                     "mitigate": 1.5, "lira": 1.3, "defenses": 2.0}
DEFAULT_FIXED: dict[str, float] = {"theory": 60.0, "memorize": 5.0, "gradnorms": 30.0, "gamma-sigma": 5.0,
                                   "mitigate": 10.0, "lira": 10.0}
TIMED_STEPS = 8


@lru_cache(maxsize=None)
def step_seconds(arch: str, dataset: str, batch_size: int, threads: int = 1) -> float:
    """Measured seconds per training example of one SGD step (BN model, forward + backward + update)."""
    import torch

    from bnmem.data.sources import dataset_shape
    from bnmem.models import build_model
    from bnmem.threads import torch_threads

    shape, classes = dataset_shape(dataset)
    with torch_threads(threads):
        torch.manual_seed(0)
        model = build_model(arch, shape, classes, "batch")
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.randn(batch_size, *shape), torch.randint(0, classes, (batch_size,))
        loss_fn = torch.nn.CrossEntropyLoss()

        def step() -> None:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

        step()  # warm-up
        t0 = time.perf_counter()
        for _ in range(TIMED_STEPS):
            step()
        return (time.perf_counter() - t0) / (TIMED_STEPS * batch_size)


# The lira lens's per-epoch queries and attacks (matched_fit) as a multiple of its training: measured on one
# demo lira cell (digits LeNet, 8 shadow models per norm, 20 epochs, one thread), two pairs of runs at a load
# of ~14 on 2 cores: 5.4 / 4.3 s of CPU without the option, 12.3 / 14.1 s with it (of which 3.2 / 3.8 s the
# attacks at every epoch): (13.2 − 4.85) / 4.85 ≈ 1.7.
MATCHED_FIT_WORK = 1.7


def _train(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg.get("train") or (cfg.get("training") or {}).get("train") or {}


def job_models(job: Job, shared_folders: set[str]) -> float:
    """How many models a job trains itself (0 when a shared-training job trains its runs)."""
    cfg = job.config
    norms, seeds = len(cfg.get("norms") or [1]), len(cfg.get("seeds") or [1])
    if job.lens == SHARED:
        return float(len(cfg.get("seeds") or [1]))
    if job.folder in shared_folders:
        return 0.0
    if job.lens == "lira":
        # matched_fit (row 3c) queries and attacks every shadow model after every epoch as well
        return float(cfg.get("shadow_models", 0)) * norms * (1.0 + (MATCHED_FIT_WORK if cfg.get(MATCHED_FIT_OPTION)
                                                                     else 0.0))
    if job.lens == "mitigate":
        return float(seeds * len(cfg.get("lambdas") or []) + 2 * int(cfg.get("lira_models") or 0))
    if job.lens == "theory":
        return 0.0
    if job.lens == SELECTION:
        # every learning-rate candidate of every norm, up to the plateau rule's cap (counted in the shared epochs)
        from bnmem.train.recipe import LR_FACTORS, PLATEAU_CAP_FACTOR

        epochs = float(_train(cfg).get("epochs", 1)) or 1.0
        cap = float(cfg.get("max_epochs") or PLATEAU_CAP_FACTOR * epochs)
        return float(norms * seeds * len(cfg.get("lr_grid") or LR_FACTORS)) * cap / epochs
    return float(norms * seeds)


def job_work(job: Job, shared_folders: set[str]) -> float:
    """Example-epochs the job trains itself."""
    cfg = job.config
    data = cfg.get("data") or (cfg.get("training") or {}).get("data")
    if not data:
        return 0.0
    return job_models(job, shared_folders) * float(_train(cfg).get("epochs", 1)) * n_train(data)


def shared_folders(jobs: list[Job]) -> set[str]:
    """Lens folders whose runs a shared-training job trains."""
    return {t["folder"] for j in jobs if j.lens == SHARED for t in j.config.get("targets", [])}


def job_step(job: Job) -> float:
    """Measured seconds per example-epoch of the job's architecture (0 for a job that trains nothing)."""
    cfg = job.config
    training = cfg.get("training") or cfg
    arch, data = training.get("arch"), training.get("data")
    if not arch or not data:
        return 0.0
    t = _train(cfg)
    return step_seconds(arch, data["dataset"], int(t.get("batch_size", 64)), int(t.get("threads", 1) or 1))


@dataclass
class Calibration:
    """Per lens: seconds per example-epoch relative to plain training, and fixed seconds per job."""

    factors: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_FACTORS))
    fixed: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_FIXED))
    source: str = "uncalibrated (declared factors; step times measured now)"


def estimate_seconds(jobs: list[Job], cal: Calibration | None = None) -> dict[str, float]:
    """Job id -> estimated seconds on one local worker."""
    cal = cal or Calibration()
    folders = shared_folders(jobs)
    out = {}
    for j in jobs:
        work = job_work(j, folders)
        train = work * job_step(j) * cal.factors.get(j.lens, 1.5) if work else 0.0
        out[j.id] = train + cal.fixed.get(j.lens, 0.0)
    return out


def _done_seconds(path: Path) -> float | None:
    try:
        doc = io.read_json(path / "DONE")
    except (OSError, ValueError):
        return None
    s = doc.get("seconds") if isinstance(doc, dict) else None
    return float(s) if isinstance(s, (int, float)) else None


def calibrate(run_dir: str | Path, jobs: list[Job]) -> Calibration:
    """Per-lens factors from a finished pilot run: measured seconds (DONE markers) / (work × step time now).

    ``jobs`` are the pilot's own planned jobs. A shared-training job's seconds are the sum of those its runs
    recorded (each ``<norm>/seed<k>/DONE`` of its first target lens). Lenses the pilot did not finish, and
    finished ones whose DONE recorded no seconds (runs from before it did), keep the defaults; the source line
    names each kind.
    """
    root = Path(run_dir)
    folders = shared_folders(jobs)
    cal = Calibration()
    sums: dict[str, list[float]] = {}
    fixed: dict[str, list[float]] = {}
    unclocked: set[str] = set()  # finished, but its DONE recorded no seconds (a run from before it did)
    for j in jobs:
        if j.lens == SHARED:
            t = j.config["targets"][0]
            each = [_done_seconds(root / t["folder"] / j.config["norm"] / f"seed{s}") for s in t["seeds"]]
            secs = None if None in each else sum(each)
        else:
            secs = _done_seconds(root / j.folder)
        if secs is None:
            if j.lens != SHARED and (root / j.folder / io.DONE).is_file():
                unclocked.add(j.lens)
            continue
        work = job_work(j, folders)
        if work:
            acc = sums.setdefault(j.lens, [0.0, 0.0])
            acc[0] += secs
            acc[1] += work * job_step(j)
        else:
            fixed.setdefault(j.lens, []).append(secs)
    for lens, (secs, base) in sums.items():
        if base > 0:
            cal.factors[lens] = secs / base
            cal.fixed[lens] = 0.0
    for lens, values in fixed.items():
        cal.fixed[lens] = sum(values) / len(values)
    measured = sorted(set(sums) | set(fixed))
    unclocked -= set(measured)
    declared = sorted((set(DEFAULT_FACTORS) | set(DEFAULT_FIXED)) - set(measured) - unclocked)
    cal.source = (f"calibrated on {root} for {', '.join(measured) or 'no lens'} (its DONE markers), declared "
                  f"factors for {', '.join(declared) or 'none'} (not finished in the pilot)"
                  + (f" and for {', '.join(sorted(unclocked))} (finished, but its DONE recorded no seconds)"
                     if unclocked else "") + "; step times measured now")
    return cal


def cost_lines(jobs: list[Job], seconds: dict[str, float], source: str = "") -> list[str]:
    """Estimated time per stage (with each lens's share) and in all, on one local worker."""
    from collections import Counter

    out = [f"estimated time on one local worker ({source or 'step times measured now'}):"]
    for stage in sorted({j.stage for j in jobs}):
        in_stage = [j for j in jobs if j.stage == stage]
        by_lens: Counter[str] = Counter()
        for j in in_stage:
            by_lens[j.lens] += seconds.get(j.id, 0.0)
        detail = ", ".join(f"{k} {human_seconds(v)}" for k, v in by_lens.items())
        out.append(f"  stage {stage}: {len(in_stage)} jobs, ~{human_seconds(sum(by_lens.values()))} ({detail})")
    out.append(f"  total: ~{human_seconds(sum(seconds.get(j.id, 0.0) for j in jobs))}")
    return out
