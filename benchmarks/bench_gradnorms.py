"""Per-sample gradient norms: samples/second of the one-backward-per-example loop vs the vectorized paths.

Digits LeNet, BN (eval-mode definition) and no norm, float64, one torch thread
for every path (so the ratio measures vectorization, not parallelism), models
after one training epoch. The vectorized rate is the best of ghost norms and a
chunked vmap(grad). Last line: ``speedup_batch=X speedup_none=Y`` (best
vectorized rate / loop rate).

Rates use the process's CPU time, best of several repeats: the development
machine is shared, and wall time there measures the neighbours' load as much
as this code (with one thread and no waiting, CPU time equals wall time on an
idle machine).

Run: ``.venv/bin/python benchmarks/bench_gradnorms.py [--repeats 5] [--loop-samples 300]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.measure.gradnorms import float64_copy, ghost_total_sq_norms, loop_sq_norms, vmap_sq_norms
from bnmem.train import seeded_model, train_model


def best_rate(fn, n: int, repeats: int) -> float:
    """Samples per CPU-second of the fastest of ``repeats`` calls (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return n / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--loop-samples", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, seed=0))
    x, y = ds.x_train.double(), ds.y_train
    n, nl = x.shape[0], min(args.loop_samples, x.shape[0])
    speedups = {}
    for norm in ("batch", "none"):
        model = seeded_model(ModelConfig(arch="lenet", norm=norm), ds, 0)
        train_model(model, ds, TrainConfig(epochs=1), 0, measure=False, progress=False)
        m64 = float64_copy(model).eval()
        # agreement first: a fast wrong answer is no speedup
        ref = loop_sq_norms(m64, x[:64], y[:64])
        for name, fn in (("ghost", ghost_total_sq_norms), ("vmap", vmap_sq_norms)):
            err = float(((fn(m64, x[:64], y[:64]) - ref).abs() / ref).max())
            assert err < 1e-5, (norm, name, err)
        loop = best_rate(lambda: loop_sq_norms(m64, x[:nl], y[:nl]), nl, args.repeats)
        ghost = best_rate(lambda: ghost_total_sq_norms(m64, x, y), n, args.repeats)
        vmap = best_rate(lambda: vmap_sq_norms(m64, x, y), n, args.repeats)
        best = max(ghost, vmap)
        speedups[norm] = best / loop
        print(f"{norm:5s}  loop {loop:9.0f}/s  vmap {vmap:9.0f}/s ({vmap / loop:5.1f}x)  "
              f"ghost {ghost:9.0f}/s ({ghost / loop:5.1f}x)  [n={n}, float64, 1 thread, CPU time]")
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    print(f"speedup_batch={speedups['batch']:.1f} speedup_none={speedups['none']:.1f}")


if __name__ == "__main__":
    main()
