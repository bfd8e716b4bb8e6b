"""DP-SGD clipping: bnmem's ghost norms + a reweighted second backward vs Opacus's per-sample gradients.

One DP-SGD clipping step = the sum over the batch of every example's gradient
scaled to norm at most C (noise and the optimizer update excluded: they cost the
same on every path). Paths, measured side by side in one process:

- ``opacus``: Opacus's ``GradSampleModule`` (hooks) materializes every
  per-sample gradient, then ``DPOptimizer.pre_step`` clips and sums them (what
  ``bnmem.train.dp`` uses; noise multiplier 0 here).
- ``ghost2``: :func:`bnmem.measure.ghost.ghost_sq_norms` gives the per-sample
  norms from one forward/backward to the layer outputs, then a second ordinary
  forward/backward of ``Σ_i min(1, C/‖g_i‖)·loss_i`` gives the clipped sum
  (ghost clipping needs this second pass: the clip factors are known only after
  the first).
- ``opacus-ghost``: Opacus's own fast gradient clipping (``grad_sample_mode="ghost"``),
  the same two-pass idea implemented inside Opacus, for reference.
- ``plain``: one ordinary forward/backward without clipping (the non-private cost).

Model: the study's LeNet on 28x28 one-channel inputs (MNIST shape; random
inputs, since the cost does not depend on pixel values), ``group`` and ``none``
norms, float32 (the training precision), one torch thread. Agreement is checked
first in float64: the clipped sums of ``ghost2`` and ``opacus`` must match.

Rates use the process's CPU time, best of several repeats (the development
machine is shared; with one thread CPU time equals wall time on an idle machine).
Last line: ``ratio_<norm>_b<batch>=X`` = ghost2 steps/s ÷ opacus steps/s.

Run: ``.venv/bin/python benchmarks/bench_dp_clipping.py [--repeats 7] [--batches 64,256] [--size 28]``
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from bnmem.measure.ghost import ghost_sq_norms
from bnmem.models import build_model

CLIP = 1.0


def ghost_clipped_sum(model: nn.Module, x: torch.Tensor, y: torch.Tensor, clip: float) -> None:
    """Leave Σ_i min(1, C/‖g_i‖)·g_i in ``p.grad`` (ghost norms, then a reweighted backward)."""
    sq = sum(ghost_sq_norms(model, x, y).values())
    factors = (clip / (sq.sqrt() + 1e-6)).clamp(max=1.0)
    model.zero_grad(set_to_none=True)
    loss = (F.cross_entropy(model(x), y, reduction="none") * factors).sum()
    loss.backward()


def opacus_parts(model: nn.Module, batch: int, mode: str):
    """(module, optimizer, criterion) from Opacus's PrivacyEngine, noise 0, clipping C."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(batch, 1), torch.zeros(batch)), batch_size=batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parts = PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=loader, noise_multiplier=0.0,
                                             max_grad_norm=CLIP, poisson_sampling=False, grad_sample_mode=mode,
                                             criterion=nn.CrossEntropyLoss(reduction="sum"), loss_reduction="sum")
    if mode == "ghost":
        module, optimizer, criterion, _ = parts
    else:
        module, optimizer, _ = parts
        criterion = nn.CrossEntropyLoss(reduction="sum")
    return module, optimizer, criterion


def opacus_step(parts, x: torch.Tensor, y: torch.Tensor) -> None:
    module, optimizer, criterion = parts
    optimizer.zero_grad(set_to_none=True)
    criterion(module(x), y).backward()
    optimizer.pre_step()  # clip + accumulate (+ zero noise) into p.grad


def plain_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y, reduction="sum").backward()


def best_rate(fn, repeats: int) -> float:
    """Calls per CPU-second of the fastest of ``repeats`` calls (after one warm-up)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return 1.0 / best


def agreement(norm: str, shape: tuple[int, int, int]) -> float:
    """Max relative difference of the clipped sums (ghost2 vs opacus), float64."""
    torch.manual_seed(0)
    model = build_model("lenet", shape, 10, norm).double()
    x, y = torch.randn(32, *shape, dtype=torch.float64), torch.randint(0, 10, (32,))
    a = copy.deepcopy(model)
    ghost_clipped_sum(a, x, y, CLIP)
    parts = opacus_parts(copy.deepcopy(model), 32, "hooks")
    opacus_step(parts, x, y)
    ga = torch.cat([p.grad.flatten() for p in a.parameters()])
    gb = torch.cat([p.grad.flatten() for p in parts[0]._module.parameters()])
    # Opacus divides by the expected batch size only for loss_reduction="mean"; "sum" here.
    return float((ga - gb).abs().max() / gb.abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batches", default="64,256")
    parser.add_argument("--size", type=int, default=28, help="image side (28: MNIST shape; 8: digits)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # Opacus's per-sample hooks fire on module outputs (inputs need no gradient): expected, not news.
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    shape = (1, args.size, args.size)
    import opacus

    ratios = {}
    for norm in ("group", "none"):
        err = agreement(norm, shape)
        assert err < 1e-9, (norm, err)
        for batch in (int(b) for b in args.batches.split(",")):
            torch.manual_seed(0)
            base = build_model("lenet", shape, 10, norm)
            x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))
            ghost_model, plain_model = copy.deepcopy(base), copy.deepcopy(base)
            hooks, fast = opacus_parts(copy.deepcopy(base), batch, "hooks"), opacus_parts(copy.deepcopy(base), batch, "ghost")
            # functools.partial binds this iteration's objects (each is timed before the loop moves on).
            rates = {
                "opacus": best_rate(partial(opacus_step, hooks, x, y), args.repeats),
                "ghost2": best_rate(partial(ghost_clipped_sum, ghost_model, x, y, CLIP), args.repeats),
                "opacus-ghost": best_rate(partial(opacus_step, fast, x, y), args.repeats),
                "plain": best_rate(partial(plain_step, plain_model, x, y), args.repeats),
            }
            ratios[f"{norm}_b{batch}"] = rates["ghost2"] / rates["opacus"]
            print(f"{norm:5s} batch {batch:4d}: " + "  ".join(
                f"{k} {v * batch:8.0f} samples/s ({v / rates['opacus']:4.2f}x opacus)" for k, v in rates.items())
                + f"   [agreement float64 rel err {err:.1e}]")
    print(f"torch {torch.__version__}, opacus {opacus.__version__}, float32, 1 thread, CPU time, "
          f"LeNet {args.size}x{args.size}")
    print(" ".join(f"ratio_{k}={v:.2f}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
