"""The theory lens (``bnmem theory``): an older commit's code vs this checkout's, side by side.

Each side runs in its own process with ``PYTHONPATH`` on its ``src`` (the old one
extracted with ``git archive``), one torch thread, and measures:

- ``counterfactual_step``: one call on a mid-training BN state (best of ``--repeats``);
- ``counterfactual_run``: one run at the defaults (401 states, best of ``--run-repeats``),
  and that time per state (what one step of the run costs, training step included);
- ``run_theory``: the whole lens at its defaults into a fresh folder (simulation,
  10 counterfactual runs, theory.json, theory.png), once; plus the process's imports.

Times are the process's CPU seconds (``time.process_time``; the development
machine is shared, and CPU time is less disturbed by the neighbours than wall
time, which is printed for ``run_theory`` as well). Then the two theory.json files
are compared: the largest relative difference over every number (absolute where
the old value is below 1e-8 in magnitude) and any non-numeric difference.

Run (from the repository root)::

    OMP_NUM_THREADS=1 python benchmarks/bench_theory.py                  # old = c5ec76f (before the fast path)
    OMP_NUM_THREADS=1 python benchmarks/bench_theory.py --old-ref main --repeats 20
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OLD_REF = "c5ec76f"  # main before the closed-form counterfactual (one backward pass per outlier)
TINY = 1e-8  # below this magnitude a value is "~0": compared by absolute difference


def child(out: Path, repeats: int, run_repeats: int) -> dict[str, Any]:
    """The measurements of one side (runs inside the side's process)."""
    t_import = time.process_time()
    import torch
    import torch.nn.functional as F

    from bnmem.theory import TheoryConfig, bn_forward, counterfactual_run, counterfactual_step, init_bn_params
    from bnmem.theory import make_toy_data, run_theory

    imports = time.process_time() - t_import
    torch.set_num_threads(1)
    cfg = TheoryConfig()
    data = make_toy_data(cfg)
    p = init_bn_params(cfg)
    for _ in range(30):  # a mid-training state (γ and σ have moved)
        q = {k: v.clone().requires_grad_(True) for k, v in p.items()}
        g = torch.autograd.grad(F.cross_entropy(bn_forward(q, data.x, cfg.bn_eps)[0], data.y), list(q.values()))
        p = {k: (v - cfg.lr * gk).detach() for (k, v), gk in zip(q.items(), g)}

    def best(fn, n: int) -> float:
        fn()  # warm-up (first-call allocations)
        times = []
        for _ in range(n):
            t = time.process_time()
            fn()
            times.append(time.process_time() - t)
        return min(times)

    step = best(lambda: counterfactual_step(p, data.x, data.y, data.outlier_idx, cfg.bn_eps, cfg.lr), repeats)
    run = best(lambda: counterfactual_run(cfg), run_repeats)
    t_cpu, t_wall = time.process_time(), time.perf_counter()
    run_theory(cfg, out)
    return {"imports": imports, "step": step, "run": run, "per_state": run / (cfg.steps + 1),
            "run_theory": time.process_time() - t_cpu, "run_theory_wall": time.perf_counter() - t_wall}


def extract(ref: str, dest: Path) -> Path:
    """``ref``'s ``src`` folder, written under ``dest``."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


def measure(src: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run :func:`child` in a process that imports bnmem from ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--child", str(out), "--repeats", str(args.repeats),
           "--run-repeats", str(args.run_repeats)]
    res = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def differences(a: Any, b: Any, path: str = "") -> tuple[float, float, list[str]]:
    """(largest relative difference where |a| >= TINY, largest absolute where |a| < TINY, other mismatches)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return 0.0, 0.0, [f"{path}: keys {sorted(a.keys() ^ b.keys())}"]
        parts = [differences(a[k], b[k], f"{path}.{k}") for k in a]
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return 0.0, 0.0, [f"{path}: length {len(a)} vs {len(b)}"]
        parts = [differences(u, v, f"{path}[{i}]") for i, (u, v) in enumerate(zip(a, b))]
    elif isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return 0.0, 0.0, []
        if not (math.isfinite(a) and math.isfinite(b)):
            return 0.0, 0.0, [f"{path}: {a} vs {b}"]
        d = abs(a - b)
        return (d / abs(a), 0.0, []) if abs(a) >= TINY else (0.0, d, [])
    else:
        return 0.0, 0.0, [] if a == b else [f"{path}: {a!r} vs {b!r}"]
    return max((p[0] for p in parts), default=0.0), max((p[1] for p in parts), default=0.0), \
        [m for p in parts for m in p[2]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-ref", default=OLD_REF, help="the git commit whose code is 'old'")
    ap.add_argument("--repeats", type=int, default=30, help="counterfactual_step calls timed (the best counts)")
    ap.add_argument("--run-repeats", type=int, default=2, help="counterfactual_run calls timed (the best counts)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.repeats, args.run_repeats)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        old = measure(extract(args.old_ref, tmp_path / "old"), tmp_path / "out_old", args)
        new = measure(ROOT / "src", tmp_path / "out_new", args)
        docs = [json.loads((tmp_path / f"out_{s}" / "theory.json").read_text()) for s in ("old", "new")]
    rel, absd, other = differences(*docs)
    rows = [("counterfactual_step (ms)", "step", 1e3), ("counterfactual_run (s)", "run", 1),
            ("  per state (ms)", "per_state", 1e3), ("run_theory, CPU (s)", "run_theory", 1),
            ("run_theory, wall (s)", "run_theory_wall", 1), ("imports (s)", "imports", 1)]
    print(f"{'':26s} {'old ' + args.old_ref:>14s} {'new':>10s} {'old/new':>8s}")
    for label, key, scale in rows:
        print(f"{label:26s} {old[key] * scale:14.2f} {new[key] * scale:10.2f} {old[key] / new[key]:8.2f}")
    print(f"theory.json old vs new: max relative difference {rel:.2e} (|old| >= {TINY:g}), "
          f"max absolute difference {absd:.2e} (|old| < {TINY:g}), {len(other)} other differences")
    for line in other[:10]:
        print("  " + line)


if __name__ == "__main__":
    main()
