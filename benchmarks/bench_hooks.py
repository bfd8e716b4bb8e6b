"""Per-epoch measurement hooks, before/after side by side: seconds per call of the old and new path.

The demo's shape: digits LeNet with BN, 5% label noise, a 10% validation split,
one torch thread, a model after two training epochs. Cases:

* ``gradnorms-batch``: the batch definition of the per-sample gradient norms
  (float64, batches of 64 from a 300-example subset, as the demo's gradnorms
  lens): before, the batched Jacobian over every row of every batch; after,
  ``auto`` (the rows path, :mod:`bnmem.measure.batch_rows`, skipping the last
  batch's repeated examples). Also the largest relative difference between them
  and against the one-backward-per-example loop.
* ``rows-chunks``: the rows path on one batch of 64 (float64): before, one plain
  backward per row to the layer outputs (the path until 2026-12-02), then the same
  identities; after, up to 32 rows per batched backward (the default).
* ``gamma-push``: claim 7's push pass (the γ/σ lens's per-epoch hook; float32 model,
  batch 64, the plan's clean sample of 128): before, ``method="rows"`` (a batched
  backward per batch for the two group sums plus a Jacobian row per outlier and
  sampled clean example, over every parameter); after, ``auto`` (the stacked path:
  every row of a batch in one batched backward to the layer outputs). Also the largest
  relative difference of its numbers (float32, and float64 on a float64 copy).
Measured here and dropped (kept out of the code, numbers in the commit log): a one-pass
``subset_accuracies`` (forwards running across the train/test/validation splits), 22.8 -> 22.4 ms
per call, since eval forwards are compute-bound; the rows path (one plain backward per row) for the
γ/σ push pass's gradient norms alone (float32 model, ~13 rows per batch of 64), 260 -> 293 ms per
call, since its extra forward costs more than the few rows save. The stacked path that replaced it
(2026-12-02) takes the group sums' backward into the same batched backward as the rows, γ's and
β's gradients from the BN backward itself, and the dense small-image convs. Also measured and
dropped then: ``torch.func.vmap`` over a ``vjp`` (its batched BN backward copies: ~2x slower per
batch than autograd's batched backward), BN rewritten as plain ops or as a custom Function for a
batched backward (broadcasting elementwise ops: slower), the R rows as R copies of the batch in one
ordinary backward (R x the forward's memory traffic: slower), and all batches of an epoch in one
batched backward (the rows padded to the largest batch's count, ~30 MB per tensor: slower). At
these sizes the backward is bound by memory traffic, not by the number of calls.

``--job``: instead, one demo job's hooks: the demo's BN model trained for its 20 epochs (lr
0.05, momentum 0.9, weight decay 5e-4, batch 64), both ways of the push pass at every epoch and
both ways of the batch-definition norms at the gradnorms lens's epochs 1, 2, 3, 4, 5, 10, 20
(before: the rows path as it ran until 2026-12-02, one plain backward per row; after: ``auto``),
in alternating order, CPU seconds summed over the job.

Both ways alternate ``--repeats`` times in one process; each way's best CPU time
counts (the development machine is shared; CPU time of a one-thread run equals
its wall time on an idle machine). Last line: ``ratio_<case>=X`` per case
(before / after; above 1: the new path is faster).

Run: ``.venv/bin/python benchmarks/bench_hooks.py [--repeats 5] [--job]``
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np
import torch

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.lenses.gradnorms import batch_subset_indices
from bnmem.analysis_plan import PUSH_NORM_SAMPLE
from bnmem.measure.batch_rows import StackedRows, _recorded_outputs
from bnmem.measure.gamma_push import gamma_pushes
from bnmem.measure.gradnorms import batch_partition, batch_sq_norms_one, float64_copy, per_sample_grad_norms
from bnmem.measure.predict import bn_query_mode
from bnmem.train import seeded_model, train_model


def _subset_norms(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, subset: np.ndarray,
                  batch_sq: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]) -> np.ndarray:
    """Batch-definition norms of ``subset`` in float64 (batches of 64, each example measured in its first
    batch), one batch's squared norms by ``batch_sq``; NaN outside the subset."""
    m64 = float64_copy(model)
    xs, ys = x[torch.as_tensor(subset)].double(), y[torch.as_tensor(subset)]
    out = torch.full((xs.shape[0],), float("nan"), dtype=torch.float64)
    with bn_query_mode(m64, "batch"):
        for b in batch_partition(xs.shape[0], 64, 0):
            new = torch.isnan(out[b])
            out[b[new]] = batch_sq(m64, xs[b], ys[b])[new]
    norms = np.full(x.shape[0], np.nan)
    norms[subset] = out.sqrt().numpy()
    return norms


def old_batch_norms(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, subset: np.ndarray) -> np.ndarray:
    """The batch definition as measured before: the batched Jacobian over every row of every batch."""
    return _subset_norms(model, x, y, subset, lambda m, xb, yb: batch_sq_norms_one(m, xb, yb, "jacobian"))


def per_row_backward_norms(model: torch.nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
    """The rows path as it ran until 2026-12-02: one plain backward per row to the layer outputs."""
    losses, names, records, patches, outputs = _recorded_outputs(model, xb, yb, None)
    per = [torch.autograd.grad(losses[i], outputs, retain_graph=True) for i in range(losses.shape[0])]
    grads = [torch.stack([p[k] for p in per]) for k in range(len(outputs))]
    return StackedRows(names, records, patches, grads).sq_norms()


def old_rows_norms(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, subset: np.ndarray) -> np.ndarray:
    """The batch definition as measured until 2026-12-02: the rows path with one plain backward per row."""
    return _subset_norms(model, x, y, subset, per_row_backward_norms)


def job(ds, subset: np.ndarray) -> None:
    """One demo job's hook time, before and after (see the module docstring)."""
    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0)
    spent = {(k, w): 0.0 for k in ("gamma-push", "gradnorms-batch") for w in ("before", "after")}
    worst = {"gamma-push": 0.0, "gradnorms-batch": 0.0}

    def timed(key: tuple[str, str], fn):
        t0 = time.process_time()
        out = fn()
        spent[key] += time.process_time() - t0
        return out

    def hook(epoch: int, m: torch.nn.Module) -> None:
        order = ("before", "after") if epoch % 2 else ("after", "before")
        x, y = ds.x_train, ds.y_train
        got = {w: timed(("gamma-push", w), lambda w=w: gamma_pushes(
            m, x, y, ds.is_outlier, 64, 0, PUSH_NORM_SAMPLE, method="rows" if w == "before" else "auto"))
            for w in order}
        worst["gamma-push"] = max(worst["gamma-push"], push_difference(got["after"], got["before"], scaled=True))
        if epoch in (1, 2, 3, 4, 5, 10, 20):
            n = {w: timed(("gradnorms-batch", w), lambda w=w: old_rows_norms(m, x, y, subset) if w == "before"
                          else per_sample_grad_norms(m, x, y, definition="batch", batch_size=64, subset=subset).norms)
                 for w in order}
            worst["gradnorms-batch"] = max(worst["gradnorms-batch"],
                                           float(np.nanmax(np.abs(n["after"] - n["before"]) / n["before"])))

    t0 = time.process_time()
    train_model(model, ds, TrainConfig(epochs=20, lr=0.05, momentum=0.9, weight_decay=5e-4, threads=1), 0,
                on_epoch=hook, progress=False)
    total = time.process_time() - t0
    for k in worst:
        b, a = spent[(k, "before")], spent[(k, "after")]
        print(f"job {k:16s} before {b:6.2f} s  after {a:6.2f} s  ratio {b / a:.2f}  (max relative difference "
              f"{worst[k]:.1e}{', per list scale, float32' if k == 'gamma-push' else ', float64'})")
    print(f"job total {total:.1f} s CPU with both ways; training and the rest "
          f"{total - sum(spent.values()):.1f} s; torch {torch.__version__}, 1 thread")


def push_difference(a: dict, b: dict, scaled: bool = False) -> float:
    """The largest relative difference between two push records, per element (``scaled``: relative to the
    largest |value| of each per-channel list instead); the radial component, ≈ 0 by scale invariance,
    relative to its scale ‖(γ, β)‖·‖∇‖."""
    def rel(u, v) -> float:
        u, v = np.asarray(u, dtype=float), np.asarray(v, dtype=float)
        den = np.abs(v).max() if scaled else np.maximum(np.abs(v), 1e-300)
        return float(np.max(np.abs(u - v) / den))

    worst = abs(a["outlier_acc"] - b["outlier_acc"])
    for n, la in a["layers"].items():
        lb = b["layers"][n]
        worst = max([worst] + [rel(la[k], lb[k]) for k in ("outlier", "all", "outlier_rows", "param_norm", "grad_norm")])
        worst = max(worst, abs(la["radial"] - lb["radial"]) / (lb["param_norm"] * lb["grad_norm"]))
    return max([worst] + [rel(a["grad_norm"][k], b["grad_norm"][k]) for k in ("outlier", "clean_sampled")])


def best_times(ways: dict, repeats: int) -> dict[str, float]:
    """Best CPU seconds per call of each way, the ways alternating."""
    best = {k: float("inf") for k in ways}
    for _ in range(repeats):
        for k, fn in ways.items():
            t0 = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--job", action="store_true", help="one demo job's hook time instead of per call")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, seed=0, val_fraction=0.1))
    if args.job:
        return job(ds, batch_subset_indices(ds, 300, 0))
    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0)
    train_model(model, ds, TrainConfig(epochs=2, lr=0.05, momentum=0.9, threads=1), 0, measure=False,
                progress=False)
    subset = batch_subset_indices(ds, 300, 0)
    x, y = ds.x_train, ds.y_train

    old = old_batch_norms(model, x, y, subset)
    new = per_sample_grad_norms(model, x, y, definition="batch", batch_size=64, subset=subset)
    loop = per_sample_grad_norms(model, x, y, definition="batch", batch_size=64, subset=subset, method="loop")
    rel = float(np.nanmax(np.abs(new.norms - old) / old))
    rel_loop = float(np.nanmax(np.abs(new.norms - loop.norms) / loop.norms))
    if not rel < 1e-12:
        raise SystemExit(f"the new batch norms differ from the old by {rel:.2e} relative")
    push = {m: lambda m=m, mod=model: gamma_pushes(mod, x, y, ds.is_outlier, 64, 0, PUSH_NORM_SAMPLE, method=m)
            for m in ("rows", "auto")}
    m64, x64 = float64_copy(model), x.double()
    new32, old32 = push["auto"](), push["rows"]()
    new64, old64 = (gamma_pushes(m64, x64, y, ds.is_outlier, 64, 0, PUSH_NORM_SAMPLE, method=m) for m in ("auto", "rows"))
    rel_push = push_difference(new32, old32)
    rel_push64 = push_difference(new64, old64)
    # float32 round-off: each float32 path against the float64 copy, relative to each list's scale
    err32 = {k: push_difference(v, old64, scaled=True) for k, v in (("old", old32), ("new", new32))}
    xb, yb = x64[:64], y[:64]

    def rows_one_batch(per_row: bool) -> torch.Tensor:
        with bn_query_mode(m64, "batch"):
            return per_row_backward_norms(m64, xb, yb) if per_row else batch_sq_norms_one(m64, xb, yb, "rows")

    rel_chunks = float(((rows_one_batch(True) - rows_one_batch(False)).abs() / rows_one_batch(False)).max())

    ratios = {}
    cases = {
        "gamma-push": {"before": push["rows"], "after": push["auto"]},
        "rows-chunks": {"before": lambda: rows_one_batch(True), "after": lambda: rows_one_batch(False)},
        "gradnorms-batch": {
            "before": lambda: old_batch_norms(model, x, y, subset),
            "after": lambda: per_sample_grad_norms(model, x, y, definition="batch", batch_size=64, subset=subset)},
    }
    for case, ways in cases.items():
        t = best_times(ways, args.repeats)
        ratios[case] = t["before"] / t["after"]
        print(f"{case:16s} before {t['before'] * 1e3:8.1f} ms/call  after {t['after'] * 1e3:8.1f} ms/call  "
              f"ratio {ratios[case]:.2f}")
    print(f"gradnorms-batch ({new.method}): max relative difference {rel:.1e} vs the old path, "
          f"{rel_loop:.1e} vs the loop oracle (float64)")
    print(f"rows-chunks: max relative difference {rel_chunks:.1e} (float64)")
    print(f"gamma-push: max relative difference new vs old {rel_push64:.1e} (float64 copy), {rel_push:.1e} (float32 "
          f"model; per element); float32 vs float64, relative to each list's largest value: old {err32['old']:.1e}, "
          f"new {err32['new']:.1e}; {int(ds.is_outlier.sum())} outliers + {PUSH_NORM_SAMPLE} sampled clean of "
          f"{x.shape[0]} examples")
    print(f"torch {torch.__version__}, 1 thread, CPU time, best of {args.repeats}")
    print(" ".join(f"ratio_{k.replace('-', '_')}={v:.2f}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
