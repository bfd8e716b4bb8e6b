"""Cost of training augmentation in the grouped ensemble and the plain trainer.

Digits LeNet-BN (5% label noise), 16 models on random halves of the training
set, 5 epochs, batch 64, one torch thread. Each engine trains the same models
with ``augment: none`` and ``augment: shift`` (pad 1, reflect), alternating,
``--repeats`` times; each way's best process CPU time counts (the machine is
shared; a one-thread run's CPU time is its wall time on an idle machine).

Usage::

    .venv/bin/python benchmarks/bench_augment.py [--models 16] [--repeats 3]

The last line reads ``overhead_grouped=X overhead_plain=Y``: time with
augmentation over time without, per engine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.train import seeded_model, train_model
from bnmem.train.ensemble import train_models


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, seed=0))
    rng = np.random.default_rng(0)
    idx = [np.flatnonzero(rng.random(ds.n_train) < 0.5) for _ in range(args.models)]
    seeds = list(range(args.models))
    mc = ModelConfig(arch="lenet", norm="batch")
    cfgs = {a: TrainConfig(epochs=5, batch_size=64, lr=0.05, augment=a) for a in ("none", "shift")}

    def grouped(cfg: TrainConfig) -> None:
        train_models(mc, ds, cfg, seeds, idx, method="grouped", progress=False)

    def plain(cfg: TrainConfig) -> None:
        for s, i in zip(seeds[:4], idx[:4]):  # 4 models: the plain loop is slow
            train_model(seeded_model(mc, ds, s), ds, cfg, s, train_idx=i, measure=False, progress=False)

    best: dict[tuple[str, str], float] = {}
    for _ in range(args.repeats):
        for engine, fn in (("grouped", grouped), ("plain", plain)):
            for aug, cfg in cfgs.items():
                t0 = time.process_time()
                fn(cfg)
                dt = time.process_time() - t0
                best[(engine, aug)] = min(dt, best.get((engine, aug), float("inf")))
    for (engine, aug), dt in sorted(best.items()):
        print(f"{engine:8s} augment={aug:5s} {dt:7.2f} s CPU")
    print(" ".join(f"overhead_{e}={best[(e, 'shift')] / best[(e, 'none')]:.2f}" for e in ("grouped", "plain")))


if __name__ == "__main__":
    main()
