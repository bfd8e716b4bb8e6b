"""The torchvision zoo through a digits-sized ``bnmem.audit`` (CPU, float64 gradient norms, one thread).

Per model (random weights, norm affines and BN statistics drawn as after training, ``num_classes=10``; ``vit_b_16`` with ``image_size=32``): whether the ghost
path covers it, the wall and CPU time and the peak memory of a full audit of the digits training split
(upsampled to 3x32x32) under a stated memory budget, and the largest relative difference between the
ghost, vmap and loop norms on a few examples. Each model runs in its own process so that its peak
resident set (``ru_maxrss``, minus the resident set before the audit) is its own.

The audit runs first, so the agreement check's per-sample gradients (vmap) do not set the peak.

Run: ``.venv/bin/python benchmarks/bench_zoo_audit.py [--models resnet18,vit_b_16] [--max-memory 4GB]
[--n N] [--agree 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

MODELS = ("resnet18", "densenet121", "mobilenet_v2", "efficientnet_b0", "convnext_tiny", "vit_b_16")


def build(name: str):
    """The model, with norm affines and BN running statistics drawn away from their init (as after
    training; at init some of these models give nearly constant logits and trivial gradients): the
    zoo test's :func:`as_if_trained`, so the benchmark measures what the test checks."""
    import torchvision.models as tvm

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_zoo import as_if_trained

    model = tvm.vit_b_16(image_size=32, num_classes=10) if name == "vit_b_16" else getattr(tvm, name)(num_classes=10)
    return as_if_trained(model)


def digits_32(n: int | None):
    """The digits splits as 3x32x32 images (bilinear upsampling, the gray channel repeated)."""
    import torch.nn.functional as F

    from bnmem.config import DataConfig
    from bnmem.data import load_dataset

    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05))

    def up(x):
        return F.interpolate(x, size=32, mode="bilinear", align_corners=False).repeat(1, 3, 1, 1).contiguous()

    n = ds.n_train if n is None else n
    return up(ds.x_train[:n]), ds.y_train[:n], up(ds.x_test), ds.y_test, ds.is_noisy[:n]


def one(name: str, budget: str, n: int | None, agree: int) -> dict:
    import torch

    import bnmem
    from bnmem.measure.ghost import unsupported_reason
    from bnmem.measure.gradnorms import eval_sq_norms, float64_copy, loop_sq_norms
    from bnmem.measure.memory import parse_size

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build(name).eval()
    x, y, xt, yt, noisy = digits_32(n)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    w0, c0 = time.perf_counter(), time.process_time()
    result = bnmem.audit(model, (x, y), (xt, yt), noisy_mask=noisy, max_examples=None, max_memory=budget)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    m64 = float64_copy(model).eval()
    reason = unsupported_reason(m64)
    xa, ya = x[:agree].double(), y[:agree]
    ghost = eval_sq_norms(m64, xa, ya, "ghost")[0] if reason is None else None
    vm = eval_sq_norms(m64, xa, ya, "vmap", max_memory=parse_size(budget))[0]
    loop = loop_sq_norms(m64, xa, ya)
    del m64

    def rel(a, b):
        return None if a is None else float(((a - b).abs() / b.abs()).max())

    gn = result.data["gradient_norms"]
    return {"model": name, "parameters": sum(p.numel() for p in model.parameters()), "n": int(x.shape[0]),
            "ghost_static": reason or "yes", "method": gn["method"], "chunk": gn["chunk_size"], "budget": budget,
            "wall_s": wall, "cpu_s": cpu, "peak_mb": peak / 2**20, "base_mb": before / 2**20,
            "ghost_vs_loop": rel(ghost, loop), "vmap_vs_loop": rel(vm, loop),
            "ghost_vs_vmap": rel(ghost, vm), "agree_n": agree, "median_norm": gn["median"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--max-memory", default="4GB")
    ap.add_argument("--n", type=int, default=None, help="training examples (default: all of digits)")
    ap.add_argument("--agree", type=int, default=3, help="examples for the ghost/vmap/loop agreement")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.max_memory, args.n, args.agree)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print("| model | params | ghost | method | chunk | n | wall s | CPU s | peak +MB (budget) | ghost/loop | vmap/loop "
          "| ghost/vmap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        cmd = [sys.executable, __file__, "--one", name, "--max-memory", args.max_memory, "--agree", str(args.agree)]
        if args.n:
            cmd += ["--n", str(args.n)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            print(f"| {name} | failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode} |")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])

        def e(v):
            return "-" if v is None else f"{v:.0e}"

        print(f"| {name} | {r['parameters'] / 1e6:.1f} M | {r['ghost_static']} | {r['method']} | {r['chunk']} | "
              f"{r['n']} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | +{r['peak_mb']:.0f} over {r['base_mb']:.0f} ({r['budget']}) | "
              f"{e(r['ghost_vs_loop'])} | {e(r['vmap_vs_loop'])} | {e(r['ghost_vs_vmap'])} |", flush=True)


if __name__ == "__main__":
    main()
