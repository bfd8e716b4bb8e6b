"""``bnmem run STUDY.yaml``: every lens over a grid of datasets, architectures and outliers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from bnmem.cli.app import Quiet, RunWorkers, Set, app, available_cores

StudyFile = Annotated[Path, typer.Argument(help="study YAML file (see studies/)", show_default=False)]
StudyOut = Annotated[Optional[Path], typer.Option(help="run directory (default: runs/<study name>); rerun to resume")]
ExecutorName = Annotated[str, typer.Option("--executor", help=(
    "where jobs run: local (this machine: --workers processes, as a dependency graph; with one worker, in this "
    "process) or ray"))]
RayAddress = Annotated[Optional[str], typer.Option(help="Ray cluster address (default: start a local Ray)")]


@app.command()
def run(
    study: StudyFile,
    out: StudyOut = None,
    executor: ExecutorName = "local",
    ray_address: RayAddress = None,
    workers: RunWorkers = None,
    set: Set = None,  # noqa: A002 - the flag is --set
    quiet: Quiet = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the planned jobs and the estimated disk; "
                                                            "write nothing")] = False,
    download: Annotated[bool, typer.Option("--download", help="fetch missing datasets before the first job "
                                                              "(same as --set data.download=true)")] = False,
    skip_disk_check: Annotated[bool, typer.Option("--skip-disk-check", help="start even if the free disk is "
                                                  "below the dry-run estimate plus its margin")] = False,
    confirmatory: Annotated[bool, typer.Option("--confirmatory", help="derive every seed (corruption, keep matrix, "
                                               "models) from the SHA-256 of the analysis plan, the source and the "
                                               "study, record them and the commit in study.json, and log the start "
                                               "and end in docs/confirmatory-attempts.jsonl: the report calls the run "
                                               "confirmatory. Refused on a modified git checkout")] = False,
) -> None:
    """Run a study: its lenses on every (dataset, architecture, outlier) cell; resumable."""
    from bnmem.errors import BnmemError
    from bnmem.executors import get_executor
    from bnmem.study import build_jobs, read_study, run_study
    from bnmem.study.confirmatory import current_key

    if executor != "ray" and ray_address:
        raise BnmemError("--ray-address needs --executor ray")
    if confirmatory and not dry_run:
        from bnmem.study.confirmatory import require_clean_checkout

        require_clean_checkout()  # before any worker starts or anything is written (run_study checks again)
    kwargs: dict = {"progress": not quiet}
    ex = None
    if executor != "ray" and not dry_run:
        from bnmem.study.graph import WORKER_PRELOAD

        # Made first: its worker processes' fork server imports torch while this process plans.
        ex = get_executor(executor, **kwargs, workers=available_cores() if workers is None else workers,
                          preload=WORKER_PRELOAD)
    elif executor == "ray" and workers not in (None, 1):
        raise BnmemError("--workers is for the local executor; Ray schedules by the study's resources")
    try:
        spec = read_study(study, [*(set or []), *(["data.download=true"] if download else [])])
        # The study's jobs, built once: building validates every lens's options (before anything is written),
        # and they are what the dry run prints, the preflight checks and the run runs.
        study_jobs = build_jobs(spec, current_key(spec, study) if confirmatory else None)
        if dry_run:
            _print_dry_run(spec, study_jobs)
            return
        if executor != "ray":  # Ray's workers may see devices this process does not
            from bnmem.train.device import check_device_here

            check_device_here(spec.train.device, "train.device")
        out = out or Path("runs") / spec.name
        if executor == "ray":
            # Shadow-model chunks of the lira lens are submitted by the lens itself;
            # the study's per-job request becomes the executor's default for them.
            kwargs.update(address=ray_address, num_cpus_per_job=spec.resources.num_cpus,
                          num_gpus_per_job=spec.resources.num_gpus)
        from bnmem.study.preflight import preflight

        # Data and disk, before the executor starts and before anything is written into --out.
        preflight(study_jobs[1], out.expanduser().resolve(), disk=not skip_disk_check)
        ex = ex or get_executor(executor, **kwargs)
        result = run_study(spec, out, executor=ex, progress=not quiet, confirmatory=confirmatory, study_file=study,
                           study_jobs=study_jobs)
    finally:
        if ex is not None:
            ex.close()
    done = sum(j["status"] == "done" for j in result.jobs)
    skipped = sum(j["status"] == "skipped" for j in result.jobs)
    typer.echo(f"study {spec.name}: {len(result.index['cells'])} cells, {len(result.jobs)} jobs "
               f"({done} run, {skipped} already finished)")
    if confirmatory:
        from bnmem.provenance import ATTEMPTS_LOG

        typer.echo("confirmatory: every seed was derived from the SHA-256 of the analysis plan, the source and the "
                   f"study (study.json, 'confirmatory'); its start and end are logged in {ATTEMPTS_LOG}: commit it")
    typer.echo(f"results in {result.out}/ (index.json lists every cell and lens folder)")


def _print_dry_run(spec: Any, study_jobs: tuple[list[Any], list[Any]]) -> None:
    """The study's jobs, their disk and their estimated seconds (``--dry-run``)."""
    from bnmem.study.cost import Calibration, cost_lines, estimate_seconds
    from bnmem.study.dryrun import dry_run_text

    cells, jobs = study_jobs
    cal = Calibration()
    seconds = estimate_seconds(jobs, cal)
    typer.echo(dry_run_text(spec.name, cells, jobs, seconds, cost_lines(jobs, seconds, cal.source)))
