"""A tiny job pipeline with the shape of a real study, to check an executor end to end.

:func:`selftest_job` trains a small BN network on seeded synthetic data inside a
fixed torch thread count, writes its logits atomically and a ``DONE`` marker,
and returns a checksum: the same spec must give the same checksum under every
executor. :func:`run_selftest` is a miniature study (keep matrix, chunked jobs,
resume, aggregate) over it. It lives inside the package so that every Ray
worker can import it, and doubles as a cluster smoke test::

    python -m bnmem.executors._selftest --out /shared/tmp/selftest --executor ray --ray-address auto

Test hooks in the spec (``hold_first_attempt``, ``raise``) simulate a worker
killed mid-job and a job that fails.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bnmem import io
from bnmem.executors import Executor, get_executor
from bnmem.names import METRICS_FILE
from bnmem.threads import torch_threads

PID_FILE = "worker.pid"
PARTIAL_FILE = "partial.tmp"


def interrupt_handler(spec: dict[str, Any]) -> dict[str, Any]:
    """Which Ctrl-C handler the worker running this job has ("default": Python's, raising KeyboardInterrupt)."""
    import signal

    handler = signal.getsignal(signal.SIGINT)
    return {"id": spec["id"], "handler": "default" if handler is signal.default_int_handler else str(handler)}


def job_dir(out: str | Path, index: int) -> Path:
    return Path(out) / "jobs" / f"job_{index:04d}"


def _train_logits(seed: int, keep_row: np.ndarray | None, steps: int, width: int) -> np.ndarray:
    """Seeded data, seeded BN-MLP, a few SGD steps on the kept rows; logits on all rows.

    Big enough (matmuls of width ``width``) that a different intra-op thread count
    can change the float32 bits, which is what the determinism checks need.
    """
    g = torch.Generator().manual_seed(1234)  # the "dataset": the same for every job
    x = torch.randn(256, 64, generator=g)
    y = torch.randint(0, 10, (256,), generator=g)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rows = torch.as_tensor(np.flatnonzero(keep_row)) if keep_row is not None else torch.arange(256)
    order = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        batch = rows[torch.randperm(len(rows), generator=order)[:64]]
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        return model(x).numpy()


def selftest_job(spec: dict[str, Any]) -> dict[str, Any]:
    """Executor job: train one tiny model and save its logits, resumably.

    Args:
        spec: ``out`` (run directory), ``index``, ``seed``; optional ``threads``
            (torch intra-op threads, default 1), ``steps``, ``width``, ``keep``
            (0/1 list of training rows), ``hold_first_attempt`` (seconds to
            sleep mid-job on the first attempt, after writing the worker PID to
            ``worker.pid`` and a partial file: a window to kill the worker in),
            ``raise`` (a message: fail with ValueError).

    Returns:
        ``index``, ``checksum`` (sha256 of the logits), ``skipped``, and what the
        job saw: ``pid``, ``torch_threads``, ``omp_num_threads`` (env).

    Raises:
        ValueError: the spec asks for it (``raise``).
    """
    out = job_dir(spec["out"], int(spec["index"]))
    seen = {"pid": os.getpid(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if io.is_done(out):
        return {**io.read_json(out / io.DONE), **seen, "skipped": True}
    if spec.get("raise"):
        raise ValueError(spec["raise"])
    io.ensure_dir(out)
    keep = np.asarray(spec["keep"], dtype=bool) if spec.get("keep") is not None else None
    with torch_threads(int(spec.get("threads", 1))):
        threads = torch.get_num_threads()
        hold = float(spec.get("hold_first_attempt", 0))
        pid_file = out / PID_FILE
        if hold and not pid_file.exists():
            # A half-written file, as a real job killed mid-write would leave;
            # the retry must overwrite it rather than trust it.
            (out / PARTIAL_FILE).write_bytes(b"half")
            io.write_text(pid_file, str(os.getpid()))
            time.sleep(hold)
        logits = _train_logits(int(spec["seed"]), keep, int(spec.get("steps", 20)), int(spec.get("width", 256)))
    io.write_npy(out / "logits.npy", logits)
    summary = {"index": int(spec["index"]), "checksum": hashlib.sha256(logits.tobytes()).hexdigest(),
               "torch_threads": threads}
    (out / PARTIAL_FILE).unlink(missing_ok=True)
    io.mark_done(out, summary)  # last
    return {**summary, **seen, "skipped": False}


def run_selftest(out: str | Path, executor: Executor, n_jobs: int = 4, threads: int = 1,
                 steps: int = 20, hold_first_attempt: float = 0.0, seed: int = 0) -> dict[str, Any]:
    """A miniature resumable study: keep matrix, one job per model, aggregate.

    Only jobs without a ``DONE`` marker are submitted, so a killed driver's rerun
    redoes only what is missing.

    Args:
        out: run directory (on storage every worker sees).
        executor: where the jobs run.
        n_jobs: number of models (even).
        threads: torch threads per job.
        steps: SGD steps per model.
        hold_first_attempt: per-job first-attempt sleep (fault-injection window).
        seed: base seed (keep matrix and model seeds).

    Returns:
        ``{"ran": [indices run now], "checksum": sha256 of the stacked logits}``;
        ``logits.npy``, ``keep.npy`` and ``metrics.json`` are written into ``out``.
    """
    out = io.ensure_dir(out)
    rng = np.random.default_rng(seed)
    # Every row IN for exactly half the models, as in the LiRA keep matrix.
    keep = np.argsort(rng.uniform(size=(n_jobs, 256)), axis=0) < n_jobs // 2
    io.write_npy(out / "keep.npy", keep)
    specs = [{"out": str(Path(out).resolve()), "index": i, "seed": seed * 1000 + i, "threads": threads,
              "steps": steps, "keep": keep[i].astype(int).tolist(), "hold_first_attempt": hold_first_attempt}
             for i in range(n_jobs) if not io.is_done(job_dir(out, i))]
    executor.map(selftest_job, specs, desc="selftest", resources={"num_cpus": threads})
    logits = np.stack([np.load(job_dir(out, i) / "logits.npy") for i in range(n_jobs)])
    io.write_npy(out / "logits.npy", logits)
    checksum = hashlib.sha256(logits.tobytes()).hexdigest()
    io.write_json(out / METRICS_FILE, {"checksum": checksum, "n_jobs": n_jobs,
                                         "mean_logit": float(logits.astype(np.float64).mean())})
    return {"ran": [s["index"] for s in specs], "checksum": checksum}


def main(argv: list[str] | None = None) -> None:
    """``python -m bnmem.executors._selftest``: run the miniature study and print its checksum."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--executor", default="local", choices=["local", "ray"])
    p.add_argument("--ray-address", default=None)
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--hold", type=float, default=0.0, help="first-attempt sleep per job (fault injection)")
    args = p.parse_args(argv)
    kwargs: dict[str, Any] = {"progress": False}
    if args.executor == "ray":
        kwargs["address"] = args.ray_address
    ex = get_executor(args.executor, **kwargs)
    try:
        res = run_selftest(args.out, ex, n_jobs=args.jobs, threads=args.threads, steps=args.steps,
                           hold_first_attempt=args.hold)
    finally:
        ex.close()
    print(f"ran {res['ran']} checksum {res['checksum']}", flush=True)


if __name__ == "__main__":
    main()
