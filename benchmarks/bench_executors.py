"""Jobs per second of the local vs the Ray executor on the same small LiRA workload.

Workload: LiRA shadow-model training chunks on digits (LeNet with BN, 5% label
noise, all ~898 training examples, each model on its keep-matrix half), one
torch thread per job, ``--chunks`` jobs of ``--chunk-size`` models each. The
job function is the real one, :func:`bnmem.shadow.training.train_shadow_chunk`,
writing its models into a fresh temporary run directory every repeat.

Measured separately:

* Ray startup: ``ray.init`` of a private single-node instance (``RayExecutor.start``);
* the first Ray map ("cold": worker processes start and import torch + bnmem);
* later Ray maps ("warm": workers reused), which is what a long study sees;
* ``close`` (shutting the instance down).

The local executor runs the jobs one after another in this process; Ray runs
as many at once as the node has CPUs (``--ray-cpus``, default all). On a shared
machine the best of ``--repeats`` counts, and the load average is printed so a
reader can judge the contention.

Usage::

    .venv/bin/python benchmarks/bench_executors.py [--chunks 8] [--chunk-size 2] [--epochs 5] [--repeats 2]

The last line reads ``ratio_warm=X ratio_with_startup=Y`` (Ray jobs/s over local jobs/s).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch  # noqa: E402

from bnmem.executors import Executor, get_executor  # noqa: E402
from bnmem.lenses.lira.config import LiraConfig  # noqa: E402
from bnmem.shadow.training import pending_chunks, train_shadow_chunk  # noqa: E402


def _config(chunks: int, chunk_size: int, epochs: int) -> LiraConfig:
    return LiraConfig.model_validate({
        "data": {"dataset": "digits", "label_noise": 0.05},
        "arch": "lenet", "norms": ["batch"],
        "shadow_models": chunks * chunk_size, "chunk_size": chunk_size,
        "train": {"epochs": epochs, "batch_size": 64, "lr": 0.05, "threads": 1},
    })


def _run(ex: Executor, cfg: LiraConfig, root: Path, tag: str) -> float:
    """Seconds for one map over every chunk, into a fresh directory."""
    specs = pending_chunks(cfg, "batch", root / tag)
    t0 = time.perf_counter()
    ex.map(train_shadow_chunk, specs, desc=tag, resources={"num_cpus": cfg.train.threads})
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chunks", type=int, default=8, help="jobs per map")
    p.add_argument("--chunk-size", type=int, default=2, help="shadow models per job")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--ray-cpus", type=int, default=None, help="CPUs of the private Ray node (default: all)")
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = _config(args.chunks, args.chunk_size, args.epochs)
    n = args.chunks
    print(f"workload: {n} jobs x {args.chunk_size} digits LeNet-BN shadow models, {args.epochs} epochs, "
          f"1 torch thread/job; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        local = get_executor("local", progress=False)
        # One untimed local job first: dataset cache and torch kernels warm, as Ray's warm maps are.
        _run(local, _config(2, 2, 1), root, "warmup")
        t_local = min(_run(local, cfg, root, f"local{r}") for r in range(args.repeats))

        init_kwargs = {"num_cpus": args.ray_cpus} if args.ray_cpus else None
        ray_ex = get_executor("ray", progress=False, init_kwargs=init_kwargs)
        ray_ex.start()
        t_start = ray_ex.startup_seconds or 0.0
        import ray

        ray_cpus = ray.cluster_resources().get("CPU", 0)
        t_cold = _run(ray_ex, cfg, root, "raycold")
        t_warm = min(_run(ray_ex, cfg, root, f"raywarm{r}") for r in range(args.repeats))
        t0 = time.perf_counter()
        ray_ex.close()
        t_close = time.perf_counter() - t0

    per_model = t_local / (n * args.chunk_size)
    print(f"local : {n / t_local:6.3f} jobs/s  ({t_local:6.2f} s per map; {per_model:.3f} s per shadow model)")
    print(f"ray   : startup {t_start:5.2f} s, close {t_close:4.2f} s, {ray_cpus:g} CPUs")
    print(f"ray   : {n / t_cold:6.3f} jobs/s cold ({t_cold:6.2f} s, first map: workers start and import torch)")
    print(f"ray   : {n / t_warm:6.3f} jobs/s warm ({t_warm:6.2f} s per map)")
    with_startup = t_start + t_cold
    print(f"load average now {os.getloadavg()[0]:.1f}")
    print(f"ratio_warm={t_local / t_warm:.2f} ratio_with_startup={t_local / with_startup:.2f}")


if __name__ == "__main__":
    main()
