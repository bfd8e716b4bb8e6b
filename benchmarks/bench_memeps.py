"""What empirical ε lower bounds and memorization scores add to an attack evaluation, side by side.

Synthetic φ with a planted membership signal (M models, N examples, V views), the default attacks
on subsets all/outliers/inliers, leave-one-out over every target, evaluated twice on the same φ:
with the ε_lb of every (attack, subset) summary and with ε_lb switched off. Then the two
Feldman–Zhang variants (top-1 and confidence) with their intervals and leave-one-model-out scores.
Prints seconds and the ratio; wall time depends on what else the machine runs. Run::

    OMP_NUM_THREADS=1 python benchmarks/bench_memeps.py                       # digits-like size
    OMP_NUM_THREADS=1 python benchmarks/bench_memeps.py --models 64 --examples 10000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import bnmem.attacks.streaming as streaming
from bnmem.attacks import ALL, evaluate_stream, keep_matrix
from bnmem.attacks.memscore import confidence_values, leave_one_model_out, mem_scores, top1_values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=16)
    ap.add_argument("--examples", type=int, default=900)
    ap.add_argument("--views", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    m, n, v = args.models, args.examples, args.views
    keep = keep_matrix(m, n, 0)
    phi = rng.normal(0, 1, (m, n, v)) + 1.5 * keep[:, :, None]
    outliers = rng.random(n) < 0.05
    subsets = {"outliers": outliers, "inliers": ~outliers}

    def timed(fn) -> float:
        best = np.inf
        for _ in range(args.repeats):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        return best

    with_eps = timed(lambda: evaluate_stream(phi, keep, subsets, attacks=ALL))
    original = streaming.epsilon_summary
    streaming.epsilon_summary = lambda *a, **k: {}
    try:
        without = timed(lambda: evaluate_stream(phi, keep, subsets, attacks=ALL))
    finally:
        streaming.epsilon_summary = original
    pred = np.where(rng.random((m, n, v)) < 0.9, 0, 1).astype(np.int16)
    labels = np.zeros(n, dtype=np.int64)

    def scores() -> None:
        for values in (top1_values(pred, labels), confidence_values(phi)):
            mem_scores(values, keep)
            leave_one_model_out(values, keep)

    mem = timed(scores)
    print(f"M={m} N={n} V={v}: attacks {without:.2f}s without ε_lb, {with_eps:.2f}s with "
          f"(×{with_eps / without:.2f}); memorization scores (both variants, intervals, leave-one-out) "
          f"{1000 * mem:.1f} ms (×{mem / without:.4f} of the attacks)")


if __name__ == "__main__":
    main()
