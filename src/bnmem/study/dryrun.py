"""``bnmem run --dry-run``: what a study would do and roughly what it would write, before anything trains.

Sizes are estimates from the configs alone (dataset sizes from the dataset
table, parameter counts from building each architecture once on the CPU), as
each job's cell work declares them (:meth:`~bnmem.lenses.registry.CellWork.bytes`):
model files are float32 weights; lira adds its arrays (the attack statistic φ
per model, example and view). Logs, JSON files and figures are small and not counted.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Any

from bnmem.study.run import Cell, Job


@lru_cache(maxsize=None)
def parameter_count(arch: str, dataset: str, norm: str) -> int:
    """Trainable + buffer entries of ``arch`` with ``norm`` on ``dataset``'s input shape."""
    from bnmem.data.sources import dataset_shape
    from bnmem.models import build_model

    shape, classes = dataset_shape(dataset)
    model = build_model(arch, shape, classes, norm)
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())


def n_train(data: Any) -> int:
    """Training-set size a data config (:class:`~bnmem.config.DataConfig`) gives (validation split held out, the
    OOD images appended included)."""
    from bnmem.names import DATASETS

    n = data.train_size or DATASETS[data.dataset].n_train
    n -= round(float(data.val_fraction or 0.0) * n)
    ood = float(data.ood or 0.0)
    return n + (round(ood * n / (1 - ood)) if ood else 0)


def job_bytes(job: Job) -> dict[str, int]:
    """Estimated bytes a job leaves on disk, by kind (what its cell work declares)."""
    training = job.work.training()
    return {k: int(v) for k, v in job.work.bytes(n_train(training.data) if training else 0, parameter_count).items()}


def human(n: float) -> str:
    """Disk sizes in powers of 1000, as disks are sold."""
    from bnmem.measure.memory import fmt_bytes

    return fmt_bytes(n, base=1000)


def human_seconds(s: float) -> str:
    """'42 s', '3.5 min', '2.1 h'."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def dry_run_text(name: str, cells: list[Cell], jobs: list[Job], seconds: dict[str, float] | None = None,
                 time_lines: list[str] | None = None) -> str:
    """The study's jobs, printed by ``bnmem run --dry-run``: every job with its estimated disk (and time, when
    ``seconds`` gives job id -> estimated seconds), then the totals (``time_lines``: the time per stage)."""
    lines = [f"study {name}: {len(cells)} cells, {len(jobs)} jobs (nothing is written in a dry run)"]
    totals: Counter[str] = Counter()
    counts = Counter(j.lens for j in jobs)
    for job in jobs:
        sizes = job_bytes(job)
        totals.update(sizes)
        detail = ", ".join(f"{k} {human(v)}" for k, v in sizes.items()) or "-"
        when = f"  ~{human_seconds(seconds[job.id])}" if seconds and job.id in seconds else ""
        lines.append(f"  stage {job.stage}  {job.id:<48} {detail}{when}")
    lines.append("jobs by lens: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    total = sum(totals.values())
    lines.append("estimated disk: " + (", ".join(f"{k} {human(v)}" for k, v in totals.items()) or "-")
                 + f"; total {human(total)}")
    return "\n".join(lines + (time_lines or []))
