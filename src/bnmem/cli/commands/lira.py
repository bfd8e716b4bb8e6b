"""``bnmem lira``: lens 3, membership inference on BN vs other-norm shadow models."""

# No `from __future__ import annotations`: the option aliases below must be real
# objects, since typer resolves string annotations in bnmem.cli.app's namespace.

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from bnmem.cli.app import Out, Quiet, Workers, app, experiment_options
from bnmem.cli.fields import field_flags, validated, with_flags
from bnmem.config import ShadowProtocol

# The shadow-model protocol's flags, generated from its fields (defaults, help and rules live there);
# query_seed stays reachable through --set.
SHADOW_FLAGS = field_flags(ShadowProtocol, skip={"query_seed"})

ExecutorName = Annotated[str, typer.Option("--executor", help=(
    "where shadow-model jobs run: local (this machine: in this process, or in --workers processes) or ray"))]
RayAddress = Annotated[Optional[str], typer.Option(help="Ray cluster address, auto or HOST:PORT (default: start a local Ray)")]
GpusPerJob = Annotated[float, typer.Option(help="GPUs each Ray job reserves (0.25: four jobs share a GPU); for --device cuda")]


@app.command()
@experiment_options(omit=("n_seeds",), helps={
    "seed": "one base seed for all shadow models: model m's seed derives from it, the same for every norm "
            "(default: {})",
    "seeds": "a one-item list: the base seed (the old --seeds 1, base seed 0, still works; deprecated)"})
@with_flags(SHADOW_FLAGS)
def lira(
    exp: dict[str, Any],
    out: Out = None,
    executor: ExecutorName = "local",
    ray_address: RayAddress = None,
    workers: Workers = 1,
    gpus_per_job: GpusPerJob = 0.0,
    quiet: Quiet = False,
    **protocol: Any,
) -> None:
    """LiRA/RMIA membership inference on shadow models of each norm; paired BN vs other-norm differences.

    Shadow model m's seed derives from one base seed and is the same for every norm.
    """
    from bnmem.train.device import check_device_here
    from bnmem.errors import BnmemError
    from bnmem.executors import get_executor
    from bnmem.lenses.lira import LiraConfig, run_lira, summary_table
    from bnmem.rundir import default_out, removed_if_unstarted

    # --set overrides (already in exp) win over the flags' defaults; a bad value names its flag.
    cfg = validated(LiraConfig, {**protocol, **exp}, SHADOW_FLAGS)
    if executor != "ray":
        check_device_here(cfg.train.device)  # Ray's workers may see devices this process does not
    if executor != "ray" and (ray_address or gpus_per_job):
        raise BnmemError("--ray-address and --gpus-per-job need --executor ray")
    kwargs: dict[str, Any] = {"progress": not quiet}
    if executor != "ray":
        kwargs["workers"] = workers
    elif workers != 1:
        raise BnmemError("--workers is for the local executor; Ray schedules by --gpus-per-job and CPUs")
    if executor == "ray":
        # Jobs ask for as many CPUs as the torch threads they run with.
        kwargs.update(address=ray_address, num_cpus_per_job=cfg.train.threads, num_gpus_per_job=gpus_per_job)
    out = Path(out) if out is not None else default_out("lira", cfg.model_dump(mode="json"))
    ex = get_executor(executor, **kwargs)
    try:
        with removed_if_unstarted(out):
            result = run_lira(cfg, out, executor=ex, progress=not quiet)
    finally:
        ex.close()
    typer.echo(summary_table(result))
    typer.echo(f"results in {out}/ (metrics.json, roc.png, <norm>/phi.npy, keep.npy, ...)")
