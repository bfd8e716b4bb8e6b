"""Leave-one-out attack evaluation at CIFAR scale: time and peak memory of the streaming evaluator.

Synthetic φ with a planted membership signal at (M=256 models, N=50,000
examples, V=18 views; a 10,000-point RMIA population), stored as the query step
stores it (float32 φ + float32 residual, memory-mapped), every default attack,
leave-one-out over all 256 targets, subsets all/outliers/inliers. Then, side by
side on a smaller size both can run, today's in-memory per-target evaluator
(:func:`bnmem.attacks.evaluate_inputs`) against the streaming one, on the same
φ, with a check that their AUCs agree.

Each measurement runs in a fresh subprocess, so its peak RSS (ru_maxrss) is
its own. Run::

    OMP_NUM_THREADS=1 python benchmarks/bench_attacks.py              # the full size
    OMP_NUM_THREADS=1 python benchmarks/bench_attacks.py --models 32 --examples 2000 --small-models 16

Targets (issue "paper scale"): full size in <= 10 minutes and <= 4 GB peak RSS
on a 2-core machine. Wall time depends on what else the machine runs; the CPU
time of the evaluating process is printed next to it. The last line printed is
the summary.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bnmem.attacks import ALL, AttackInputs, evaluate_inputs, evaluate_stream, keep_matrix
from bnmem.attacks.phi import NpyPhi, lo_path, split_phi


def make_phi(out: Path, m: int, n: int, v: int, p: int, seed: int = 0) -> None:
    """Write phi.npy/phi_lo.npy [m, n, v], population_phi(+_lo) [m, p, v], keep.npy, outliers.npy.

    φ = difficulty + susceptibility·IN + per-model noise + per-view jitter, with
    10% "outliers" (low difficulty, high susceptibility), in blocks of examples.
    """
    rng = np.random.default_rng(seed)
    keep = keep_matrix(m, n, seed)
    np.save(out / "keep.npy", keep)
    outliers = rng.random(n) < 0.1
    np.save(out / "outliers.npy", outliers)
    for name, count, members in (("phi", n, keep), ("population_phi", p, np.zeros((m, p), bool))):
        hi = np.lib.format.open_memmap(out / f"{name}.npy", mode="w+", dtype=np.float32, shape=(m, count, v))
        lo = np.lib.format.open_memmap(lo_path(out / f"{name}.npy"), mode="w+", dtype=np.float32, shape=(m, count, v))
        for a in range(0, count, 2000):
            b = min(count, a + 2000)
            k = b - a
            out_blk = outliers[a:b] if name == "phi" else np.zeros(k, bool)
            diff = rng.normal(3.0, 2.0, k) - 4.0 * out_blk
            susc = rng.exponential(0.5, k) * (1 + 4 * out_blk)
            spread = rng.lognormal(0.0, 0.5, k)
            model = spread[None, :] * rng.normal(0, 1, (m, k))
            phi = (diff[None, :] + susc[None, :] * members[:, a:b] + model)[..., None] + rng.normal(0, 0.2, (m, k, v))
            hi[:, a:b], lo[:, a:b] = split_phi(phi)
        hi.flush()
        lo.flush()
        del hi, lo


def child(kind: str, root: Path) -> dict:
    """One measured evaluation in this process; returns seconds, peak RSS and per-attack mean AUCs."""
    keep = np.load(root / "keep.npy")
    outliers = np.load(root / "outliers.npy")
    subsets = {"outliers": outliers, "inliers": ~outliers}
    phi, pop = NpyPhi(root / "phi.npy"), NpyPhi(root / "population_phi.npy")
    t0, c0 = time.perf_counter(), time.process_time()
    if kind == "stream":
        res = evaluate_stream(phi, keep, subsets, ALL, population_phi=pop)
    else:  # today's evaluator: everything in memory, each target re-gathers and re-reduces its references
        inputs = AttackInputs.from_phi(phi.read(0, phi.shape[1]), keep, pop.read(0, pop.shape[1]))
        res = evaluate_inputs(inputs, subsets, ALL)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "auc_per_target": {a: {s: res["metrics"][a][s]["auc_per_target"] for s in res["metrics"][a]} for a in ALL},
        "auc": {a: res["metrics"][a]["all"]["auc"] for a in ALL},
    }


def run_child(kind: str, root: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", kind, "--root", str(root)],
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"{kind} evaluation failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=256)
    parser.add_argument("--examples", type=int, default=50_000)
    parser.add_argument("--views", type=int, default=18)
    parser.add_argument("--population", type=int, default=10_000)
    parser.add_argument("--small-models", type=int, default=64)
    parser.add_argument("--small-examples", type=int, default=4_000)
    parser.add_argument("--child", choices=["stream", "oracle"])
    parser.add_argument("--root", type=Path)
    parser.add_argument("--skip-full", action="store_true", help="only the side-by-side comparison")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.root)))
        return
    with tempfile.TemporaryDirectory(prefix="bench_attacks_") as tmp:
        small = Path(tmp) / "small"
        small.mkdir()
        make_phi(small, args.small_models, args.small_examples, args.views, args.population // 10, seed=1)
        old, new = run_child("oracle", small), run_child("stream", small)
        worst = max(abs(x - y) for a in ALL for s in old["auc_per_target"][a]
                    for x, y in zip(old["auc_per_target"][a][s], new["auc_per_target"][a][s]))
        ratio = old["seconds"] / new["seconds"]
        small_size = f"M={args.small_models} N={args.small_examples} V={args.views}"
        print(f"side by side at {small_size}: today's evaluator {old['seconds']:.1f} s "
              f"(CPU {old['cpu_seconds']:.1f} s, {old['peak_rss_gb']:.2f} GB peak RSS), streaming "
              f"{new['seconds']:.1f} s (CPU {new['cpu_seconds']:.1f} s, {new['peak_rss_gb']:.2f} GB); "
              f"{ratio:.1f}x faster; max |ΔAUC| per target {worst:.1e}", flush=True)
        if args.skip_full:
            return
        full = Path(tmp) / "full"
        full.mkdir()
        t0 = time.perf_counter()
        make_phi(full, args.models, args.examples, args.views, args.population, seed=0)
        size = sum(f.stat().st_size for f in full.iterdir()) / 2**30
        print(f"synthetic φ written ({size:.2f} GB on disk) in {time.perf_counter() - t0:.0f} s", flush=True)
        res = run_child("stream", full)
        aucs = ", ".join(f"{a} {v:.3f}" for a, v in res["auc"].items())
        print(f"mean AUC (all examples): {aucs}")
        ok = res["seconds"] <= 600 and res["peak_rss_gb"] <= 4
        print(f"bench_attacks: M={args.models} N={args.examples} V={args.views} P={args.population}, "
              f"{len(ALL)} attacks x 3 subsets, leave-one-out over {args.models} targets: "
              f"{res['seconds']:.0f} s (CPU {res['cpu_seconds']:.0f} s), peak RSS {res['peak_rss_gb']:.2f} GB "
              f"({'within' if ok else 'OUTSIDE'} 600 s / 4 GB); at {small_size} the streaming evaluator "
              f"is {ratio:.1f}x faster than today's ({new['seconds']:.1f} s vs {old['seconds']:.1f} s)")


if __name__ == "__main__":
    main()
