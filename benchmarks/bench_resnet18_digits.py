"""The practitioner's sequence: torchvision resnet18 (1-channel 3x3 stem) trained 5 epochs on the digits
with 5% flipped labels, then ``bnmem.audit``; time, peak memory, and the norms against the loop oracle.

Before ghost norms covered in-place activations this sequence fell back to vmap in chunks of 256
(256 x 11.2 M float64 gradients = 21 GB per chunk) and was killed by the OOM killer at 24 GB.

Peak memory is the process's peak resident set (``ru_maxrss``) minus the resident set before the
audit starts; times are wall and CPU seconds (the development machine is shared: CPU time is the
steadier number). One torch thread.

Run: ``.venv/bin/python benchmarks/bench_resnet18_digits.py [--epochs 5] [--oracle 8]``
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torchvision.models as tvm

import bnmem
from bnmem.config import DataConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.measure.gradnorms import per_sample_grad_norms
from bnmem.train import train_model


def rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--oracle", type=int, default=8, help="examples checked against the loop oracle")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05))
    torch.manual_seed(0)
    model = tvm.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    t0 = time.perf_counter()
    train_model(model, ds, TrainConfig(epochs=args.epochs), seed=0, measure=False, progress=False)
    model = model.to(memory_format=torch.contiguous_format).eval()
    print(f"trained {args.epochs} epochs in {time.perf_counter() - t0:.0f} s "
          f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters)")
    out = Path(tempfile.mkdtemp(prefix="bnmem_r18_"))
    before, w0, c0 = rss(), time.perf_counter(), time.process_time()
    result = bnmem.audit(model, (ds.x_train, ds.y_train), (ds.x_test, ds.y_test), noisy_mask=ds.is_noisy, out=out)
    wall, cpu, peak = time.perf_counter() - w0, time.process_time() - c0, rss() - before
    d = result.data
    gn = d["gradient_norms"]
    print(f"audit: {ds.n_train} examples, method {gn['method']}, chunk {gn['chunk_size']}, budget {gn['max_memory']}; "
          f"{wall:.1f} s wall, {cpu:.1f} s CPU, peak memory +{peak / 2**20:.0f} MB over {before / 2**20:.0f} MB")
    idx = np.random.default_rng(0).choice(ds.n_train, args.oracle, replace=False)
    loop = per_sample_grad_norms(model, ds.x_train[idx], ds.y_train[idx], method="loop").norms
    audit_norms = np.load(out / "gradient_norms.npy")
    print(f"oracle: {args.oracle} random examples, max relative difference audit ({gn['method']}) vs loop "
          f"{float(np.max(np.abs(audit_norms[idx] - loop) / loop)):.1e}")
    bn = [r["name"] for r in d["norm_layers"] if r["batchnorm"]]
    run = d["gamma_sigma"]["running"]["summary"]
    print(f"report: {len(bn)} BN layers ({', '.join(bn[:3])}, ...); |γ|/σ running: median "
          f"{run['median_ratio']:.2f}, {100 * run['frac_above_1']:.0f}% of {run['n_channels']} channels > 1")
    print(f"flagged: {gn['masks']['top_k_flagged']} of the top-{len(gn['top_k'])} gradient norms are flipped labels "
          f"({100 * gn['masks']['fraction_flagged_overall']:.0f}% of the data); top norm {gn['top_k'][0]['grad_norm']:.3f}")
    print(f"risk: {d['risk']['level']}; train acc {d['accuracy']['train_acc']:.3f}, test acc "
          f"{d['accuracy']['test_acc']:.3f}, flipped labels fit {d['accuracy']['noisy_acc']:.3f}")


if __name__ == "__main__":
    main()
