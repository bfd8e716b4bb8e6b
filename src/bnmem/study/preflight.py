"""Checks before a study's first job: every dataset is there (or fetched now with ``download``),
and the disk has room for what the dry run estimates. A failing check is one line and leaves
``--out`` untouched, so a missing file never costs an hour of jobs failing one by one.

``bnmem run`` calls :func:`preflight` before it starts the executor; from Python, call it
before :func:`bnmem.study.run_study` (``preflight(build_jobs(study)[1], out)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem.errors import BnmemError
from bnmem.io import free_bytes  # looked up here, so a test can patch preflight.free_bytes

# The dry run counts model weights and attack arrays only (not logs, JSON or figures): require
# this much more, plus a fixed allowance, before starting.
DISK_MARGIN = 0.25
DISK_ALLOWANCE = 50_000_000  # bytes
SKIP_DISK_FLAG = "--skip-disk-check"


def needed_datasets(jobs: list[Any]) -> dict[tuple[str, str | None], tuple[bool, list[str]]]:
    """(dataset, data root) -> (download asked, ids of the jobs that read it); OOD sources that name a
    dataset count too."""
    from bnmem.data.sources import DATASETS

    out: dict[tuple[str, str | None], tuple[bool, list[str]]] = {}
    for job in jobs:
        training = job.work.training()
        if training is None:
            continue
        data = training.data
        names = [data.dataset]
        if (data.ood or 0) > 0 and data.ood_source in DATASETS:
            names.append(data.ood_source)
        root = None if data.data_root is None else str(data.data_root)
        for name in names:
            download, ids = out.get((name, root), (False, []))
            out[(name, root)] = (download or bool(data.download), [*ids, job.id])
    return out


def check_data(jobs: list[Any]) -> None:
    """Every dataset the jobs read is on disk; with ``download`` a missing one is fetched now.

    Raises:
        BnmemError: a dataset is missing and not to be downloaded, or its download failed.
    """
    from bnmem.data.sources import default_data_root, fetch_if_missing, missing_files

    for (name, root), (download, ids) in needed_datasets(jobs).items():
        missing = missing_files(name, root)
        if not missing:
            continue
        if download:
            fetch_if_missing(name, root)
            continue
        where = root or default_data_root()
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        cells = len({i.split("/")[0] for i in ids})
        raise BnmemError(
            f"preflight: dataset {name} not found in {where} (missing {missing[0]}{more}), needed by {cells} "
            f"cell{'s' if cells != 1 else ''}; nothing was run. Pass --download to fetch it, or "
            f"--set data.data_root=DIR to point at it")


def pending_bytes(jobs: list[Any], out: Path) -> int:
    """The dry run's disk estimate of the jobs not finished yet in ``out``."""
    from bnmem.study.dryrun import job_bytes

    return sum(sum(job_bytes(j).values()) for j in jobs if not j.work.at(out).finished())


def check_disk(jobs: list[Any], out: Path) -> None:
    """Free space at ``out`` exceeds the pending jobs' estimate by :data:`DISK_MARGIN` and
    :data:`DISK_ALLOWANCE`.

    Raises:
        BnmemError: not enough free space (the line names both numbers and the override flag).
    """
    from bnmem.study.dryrun import human

    need = pending_bytes(jobs, out)
    required = int(need * (1 + DISK_MARGIN)) + DISK_ALLOWANCE
    free = free_bytes(out)
    if free < required:
        raise BnmemError(
            f"preflight: {human(free)} free at {out}, but the study needs about {human(need)} (the dry-run "
            f"estimate; {human(required)} with the margin for logs and figures); nothing was run. Free some "
            f"space, choose another --out, or pass {SKIP_DISK_FLAG}")


def preflight(jobs: list[Any], out: Path, disk: bool = True) -> None:
    """Both checks, data first; nothing is written into ``out``."""
    check_data(jobs)
    if disk:
        check_disk(jobs, out)
