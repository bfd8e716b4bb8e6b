"""``bnmem lira``: lens 3, membership inference on BN vs other-norm shadow models."""

# No `from __future__ import annotations`: the option aliases below must be real
# objects, since typer resolves string annotations in bnmem.cli.app's namespace.

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from bnmem.cli.app import Out, Quiet, Workers, app, experiment_options

ShadowModels = Annotated[int, typer.Option(help="shadow models per norm (even, >= 4); each example is IN for half")]
ChunkSize = Annotated[int, typer.Option(help="shadow models per training job (fixes resume granularity)")]
Views = Annotated[str, typer.Option(help="query views: augment (the training augmentation's views; identity without "
                                          "augmentation), or a list of identity, flip (cifar only), shift (±1 px; "
                                          "±2 from 28 px); identity,shift is the earlier fixed set")]
QueryBnMode = Annotated[str, typer.Option(help="BN at query time: eval (running stats) or batch (query-batch stats)")]
QueryBatchSize = Annotated[Optional[int], typer.Option(help="batch whose statistics BN uses in batch mode (default: --batch-size)")]
KeepSeed = Annotated[int, typer.Option(help="seed of the membership matrix (same for every norm)")]
ExecutorName = Annotated[str, typer.Option("--executor", help="where shadow-model jobs run: local (in this process) or ray")]
RayAddress = Annotated[Optional[str], typer.Option(help="Ray cluster address, auto or HOST:PORT (default: start a local Ray)")]
SaveLogits = Annotated[bool, typer.Option("--save-logits", help="also store full logits (C times the disk of φ, which is all the attacks read)")]
GpusPerJob = Annotated[float, typer.Option(help="GPUs each Ray job reserves (0.25: four jobs share a GPU); for --device cuda")]


@app.command()
@experiment_options(omit=("n_seeds",), helps={
    "seed": "one base seed for all shadow models: model m's seed derives from it, the same for every norm "
            "(default: {})",
    "seeds": "a one-item list: the base seed (the old --seeds 1, base seed 0, still works; deprecated)"})
def lira(
    exp: dict[str, Any],
    out: Out = None,
    shadow_models: ShadowModels = 32,
    chunk_size: ChunkSize = 16,
    views: Views = "augment",
    query_bn_mode: QueryBnMode = "eval",
    query_batch_size: QueryBatchSize = None,
    keep_seed: KeepSeed = 0,
    executor: ExecutorName = "local",
    ray_address: RayAddress = None,
    workers: Workers = 1,
    gpus_per_job: GpusPerJob = 0.0,
    save_logits: SaveLogits = False,
    quiet: Quiet = False,
) -> None:
    """LiRA/RMIA membership inference on shadow models of each norm; paired BN vs other-norm differences.

    Shadow model m's seed derives from one base seed and is the same for every norm.
    """
    from bnmem.errors import BnmemError
    from bnmem.executors import get_executor
    from bnmem.lenses.lira import LiraConfig, run_lira, summary_table
    from bnmem.rundir import default_out, removed_if_unstarted

    own = {"shadow_models": shadow_models, "chunk_size": chunk_size, "views": views,
           "query_bn_mode": query_bn_mode, "query_batch_size": query_batch_size, "keep_seed": keep_seed,
           "save_logits": save_logits}
    # --set overrides (already in exp) win over the flags' defaults.
    cfg = LiraConfig.model_validate({**own, **exp})
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
