"""Per-norm recipe selection: candidates one by one vs together (ensemble engine).

A selection on the demo's data: digits LeNet (5% label noise, validation fraction 0.1),
5 learning rates (0.25x-4x of 0.05) x 2 seeds per norm, up to the plateau rule's cap (2 x --epochs),
batch 64, SGD momentum 0.9, one torch thread. "One by one" is each candidate a ``train_model`` run to the
cap measuring its accuracies every epoch, then the same plateau rule and score. "Together" is
``recipe.select_lr``: all 10 candidates of a norm in one ensemble, their validation accuracy measured after
every epoch, training ended once every candidate has stopped. Both run in this process, alternating, ``--repeats`` times; each way's best CPU
time counts (this machine is shared; CPU time of a one-thread run is its wall time on an idle core).

Usage::

    python benchmarks/bench_recipe.py [--epochs 20] [--repeats 2]

The last line reads ``speedup_batch=X speedup_none=Y`` (one by one / together, CPU seconds).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.train import recipe, seeded_model, train_model

SEEDS = [0, 1]


def one_by_one(mc: ModelConfig, ds, train: TrainConfig) -> dict[float, float]:
    """Every candidate alone to the cap, measured every epoch; the same rule and score."""
    scores = {}
    cap = recipe.cap_epochs(train)
    for lr in recipe.lr_grid(train):
        cand = train.model_copy(update={"lr": lr, "epochs": cap})
        runs = [[h["val_acc"] for h in train_model(seeded_model(mc, ds, s), ds, cand, s, progress=False).history]
                for s in SEEDS]
        curve = [sum(r[e] for r in runs) / len(runs) for e in range(cap)]
        epochs, _ = recipe.plateau_stop(curve, recipe.PLATEAU_MIN_DELTA_EXAMPLES / ds.n_val, cap=cap)
        scores[lr] = recipe.plateau_score(curve, epochs)
    return scores


def together(mc: ModelConfig, ds, train: TrainConfig) -> dict[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        rec = recipe.select_lr(mc, ds, train, SEEDS, tmp)
    return {c["lr"]: c["score"] for c in rec["candidates"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, val_fraction=0.1, seed=0))
    train = TrainConfig(epochs=args.epochs, batch_size=64, lr=0.05, momentum=0.9, weight_decay=5e-4, threads=1)
    ratios = {}
    for norm in ("batch", "none"):
        mc = ModelConfig(arch="lenet", norm=norm)
        best = {"one by one": float("inf"), "together": float("inf")}
        picks = {}
        for _ in range(args.repeats):
            for name, fn in (("one by one", one_by_one), ("together", together)):
                t0 = time.process_time()
                scores = fn(mc, ds, train)
                best[name] = min(best[name], time.process_time() - t0)
                picks[name] = recipe.pick(scores, train.lr)
        ratios[norm] = best["one by one"] / best["together"]
        print(f"{norm}: 10 candidates x up to {recipe.cap_epochs(train)} epochs: one by one {best['one by one']:.1f} CPU s, "
              f"together {best['together']:.1f} CPU s ({ratios[norm]:.2f}x); selected lr "
              f"{picks['one by one']:g} vs {picks['together']:g}")
    print(" ".join(f"speedup_{n}={r:.2f}" for n, r in ratios.items()))


if __name__ == "__main__":
    main()
