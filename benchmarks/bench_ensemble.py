"""Throughput of the ensemble trainer vs training the same models one by one.

Digits LeNet (5% label noise), each model on a random half of the ~898
training examples (each example IN with probability 1/2, as for LiRA shadow
models, so the IN sets differ in size and the skipped-step masking is part of
what is timed), 10 epochs, batch 64, lr 0.05, SGD momentum 0.9, one torch
thread, norm batch and none.

Both ways run in one process, alternating, ``--repeats`` times, and each way's
best time counts. Times are the process's CPU time by default: this machine
is shared, and CPU time of a one-thread run is what its wall time would be on
an idle machine, minus the waits for a core (``--clock wall`` to use wall time;
both are printed). Unless ``--no-workers``, the script also times two worker
processes that each train half of the models, one by one (a pool running
train_model loops) or as ensembles (``train_models_parallel``); those are wall
times, as their point is to use both cores.

Usage::

    .venv/bin/python benchmarks/bench_ensemble.py [--models 32] [--repeats 3] [--no-workers] [--vmap]

The last line reads ``speedup_batch=X speedup_none=Y``: ensemble models/s over
sequential models/s, both in one process with one thread (like for like; the
two-worker ratios are printed above it).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from typing import Callable

import numpy as np
import torch

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.train import seeded_model, train_model
from bnmem.train.ensemble import train_models, train_models_parallel

DATA = DataConfig(dataset="digits", label_noise=0.05)


def _recipe(epochs: int) -> TrainConfig:
    return TrainConfig(epochs=epochs, batch_size=64, lr=0.05, momentum=0.9, threads=1)


def _halves(n_train: int, n_models: int, seed: int = 0) -> list[np.ndarray]:
    """LiRA-style IN sets: every example IN with probability 1/2, per model."""
    rng = np.random.default_rng(seed)
    return [np.flatnonzero(rng.random(n_train) < 0.5) for _ in range(n_models)]


def _sequential(norm: str, seeds: list[int], idx: list[np.ndarray], epochs: int) -> None:
    ds = load_dataset(DATA)
    cfg, mc = _recipe(epochs), ModelConfig(arch="lenet", norm=norm)
    for seed, ix in zip(seeds, idx):
        train_model(seeded_model(mc, ds, seed), ds, cfg, seed, train_idx=ix, measure=False, progress=False)


def _ensemble(norm: str, seeds: list[int], idx: list[np.ndarray], epochs: int, method: str = "auto") -> None:
    ds = load_dataset(DATA)
    train_models(ModelConfig(arch="lenet", norm=norm), ds, _recipe(epochs), seeds, idx, method=method, progress=False)


def _vmap(norm: str, seeds: list[int], idx: list[np.ndarray], epochs: int) -> None:
    _ensemble(norm, seeds, idx, epochs, "vmap")


def _timed(fn: Callable, *args) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of fn(*args) in this process."""
    c0, w0 = time.process_time(), time.perf_counter()
    fn(*args)
    return time.process_time() - c0, time.perf_counter() - w0


def _worker(job: tuple) -> None:
    fn, *args = job
    torch.set_num_threads(1)
    fn(*args)


def _two_sequential_workers(pool, norm: str, seeds: list[int], idx: list[np.ndarray], epochs: int) -> tuple[float, float]:
    """Wall time of two processes each training half of the models one by one."""
    half = len(seeds) // 2
    jobs = [(_sequential, norm, seeds[:half], idx[:half], epochs), (_sequential, norm, seeds[half:], idx[half:], epochs)]
    w0 = time.perf_counter()
    pool.map(_worker, jobs)
    wall = time.perf_counter() - w0
    return wall, wall


def _two_ensemble_workers(norm: str, seeds: list[int], idx: list[np.ndarray], epochs: int) -> tuple[float, float]:
    """Wall time of ``train_models_parallel`` with two workers."""
    ds = load_dataset(DATA)
    w0 = time.perf_counter()
    train_models_parallel(ModelConfig(arch="lenet", norm=norm), ds, _recipe(epochs), seeds, idx, progress=False,
                          workers=2)
    wall = time.perf_counter() - w0
    return wall, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=32, help="models per measurement")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="alternating repetitions; the best time counts")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="clock of the in-process ways")
    parser.add_argument("--no-workers", dest="workers", action="store_false",
                        help="skip the two-worker-process measurements")
    parser.add_argument("--vmap", action="store_true", help="also time method='vmap'")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset(DATA)
    seeds = list(range(args.models))
    idx = _halves(ds.n_train, args.models)
    sizes = [len(i) for i in idx]
    print(f"digits lenet, {args.models} models on IN sets of {min(sizes)}-{max(sizes)} of {ds.n_train} examples, "
          f"{args.epochs} epochs, batch 64, 1 thread, best of {args.repeats}, {args.clock} clock")
    pool = mp.get_context("spawn").Pool(2) if args.workers else None
    clock = 0 if args.clock == "cpu" else 1
    speedups = {}
    for norm in ("batch", "none"):
        ways: dict[str, Callable] = {"sequential": _sequential, "ensemble": _ensemble}
        if args.vmap:
            ways["vmap"] = _vmap
        # Warm-up: first calls pay for oneDNN primitive creation and lazy imports.
        _sequential(norm, seeds[:2], idx[:2], 1)
        for fn in list(ways.values())[1:]:
            fn(norm, seeds, idx, 1)
        times: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
        if pool is not None:
            times["2 workers sequential"], times["2 workers ensemble"] = [], []
            _two_sequential_workers(pool, norm, seeds[:4], idx[:4], 1)
            _two_ensemble_workers(norm, seeds, idx, 1)  # starts the library's worker pool
        for _ in range(args.repeats):
            for w, fn in ways.items():
                times[w].append(_timed(fn, norm, seeds, idx, args.epochs))
            if pool is not None:
                times["2 workers sequential"].append(_two_sequential_workers(pool, norm, seeds, idx, args.epochs))
                times["2 workers ensemble"].append(_two_ensemble_workers(norm, seeds, idx, args.epochs))
        rate = {}
        for w, ts in times.items():
            in_process = not w.startswith("2 workers")
            rate[w] = args.models / min(t[clock if in_process else 1] for t in ts)
            shown = ", ".join(f"{c:.2f}s cpu/{wl:.2f}s wall" if in_process else f"{wl:.2f}s wall" for c, wl in ts)
            print(f"norm={norm:5s} {w:22s} {rate[w]:7.2f} models/s  ({shown})")
        speedups[norm] = rate["ensemble"] / rate["sequential"]
        print(f"norm={norm:5s} ensemble/sequential = {speedups[norm]:.2f}x")
        if pool is not None:
            print(f"norm={norm:5s} 2 workers: ensemble/sequential = "
                  f"{rate['2 workers ensemble'] / rate['2 workers sequential']:.2f}x; "
                  f"2-worker ensemble over 1-process sequential = {rate['2 workers ensemble'] / rate['sequential']:.2f}x")
    if pool is not None:
        pool.close()
    print(f"speedup_batch={speedups['batch']:.2f} speedup_none={speedups['none']:.2f}")


if __name__ == "__main__":
    main()
