"""Membership risk of a training recipe, for ``bnmem audit``: LiRA over shadow copies of a user's model.

The user's model is one trained network; what leaks is a property of the
architecture and recipe. So M fresh copies of the architecture (every
submodule's ``reset_parameters``, seeded) train with the recipe on balanced
halves of the training data (the lira lens's keep matrix: every example IN for
exactly half of them), are queried on every training example (the views the recipe trains
with: the identity alone without augmentation; BN in eval mode), and the
attacks of :mod:`bnmem.attacks` run leave-one-out on the attack statistic φ,
with the test split as RMIA's population, as the lira lens does for bnmem's own
architectures.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bnmem import io
from bnmem.auditing.data import masks_known
from bnmem.auditing.load import is_scripted
from bnmem.config import TrainConfig
from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError
from bnmem.measure.predict import predict_logits

# Attacks reported from the shadow models (online LiRA is the reference one).
AUDIT_ATTACKS = ("online", "offline", "rmia", "loss")


def fresh_copy(model: nn.Module, seed: int) -> tuple[nn.Module, int, int]:
    """A re-initialized deep copy: every submodule with ``reset_parameters`` is reset under ``seed``.

    Returns:
        The copy, the number of parameter tensors reset and the total number.
    """
    m = copy.deepcopy(model).cpu()
    torch.manual_seed(seed)
    reset = set()
    for mod in m.modules():
        if callable(getattr(mod, "reset_parameters", None)):
            mod.reset_parameters()
            reset.update(id(p) for p in mod.parameters(recurse=False))
        if callable(getattr(mod, "reset_running_stats", None)):
            mod.reset_running_stats()
    params = list(m.parameters())
    return m.train(), sum(id(p) in reset for p in params), len(params)


def check_shadow_request(model: nn.Module, shadow_models: int) -> None:
    """Raise BnmemError unless shadow copies of ``model`` can be trained.

    Raises:
        BnmemError: a TorchScript model (its architecture cannot be re-instantiated),
            or ``shadow_models`` odd or below 4.
    """
    if is_scripted(model):
        raise BnmemError("--shadow-models needs to re-instantiate the architecture, which a TorchScript model "
                         "cannot do; save the model with torch.save(model, path) (a pickled nn.Module) instead")
    if shadow_models < 4 or shadow_models % 2:
        raise BnmemError(f"--shadow-models must be even and at least 4, got {shadow_models}")


def shadow_cost(model: nn.Module, ds: OutlierDataset, shadow_models: int, train: TrainConfig,
                done: int = 0) -> dict[str, Any]:
    """What training the shadow copies will take: steps, and a time estimate from one timed step.

    One forward/backward of a fresh copy on a training batch (after one untimed
    warm-up) on ``train.device``, times the number of optimizer steps left.

    Returns:
        ``{"models", "finished", "epochs", "examples_per_model", "steps", "seconds_per_step",
        "estimated_seconds", "parameters", "text"}``.
    """
    from bnmem.measure.predict import to_layout

    net, _, _ = fresh_copy(model, seed=0)
    device = torch.device(train.device)
    net = net.to(device).train()
    per_model = ds.n_train // 2
    batch = to_layout(ds.x_train[: min(train.batch_size, ds.n_train)].to(device))
    labels = ds.y_train[: batch.shape[0]].to(device)
    if batch.ndim == 4:
        net = net.to(memory_format=torch.channels_last)
    timings = []
    for _ in range(2):  # the first call pays for allocations and kernel selection
        start = time.perf_counter()
        torch.nn.functional.cross_entropy(net(batch), labels).backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        timings.append(time.perf_counter() - start)
    steps = (shadow_models - done) * train.epochs * math.ceil(per_model / train.batch_size)
    seconds = steps * timings[-1]
    n_params = sum(p.numel() for p in net.parameters())
    text = (f"membership: training {shadow_models - done} of {shadow_models} shadow copies "
            f"({type(model).__name__}, {n_params / 1e6:.1f} M parameters) for {train.epochs} epochs on "
            f"{per_model} examples each: {steps} steps of batch {train.batch_size} on {device}, "
            f"~{timings[-1]:.3f} s per step, about {seconds / 60:.1f} min")
    return {"models": shadow_models, "finished": done, "epochs": train.epochs, "examples_per_model": per_model,
            "steps": steps, "seconds_per_step": timings[-1], "estimated_seconds": seconds,
            "parameters": n_params, "text": text}


SHADOW_INPUTS = "inputs.pt"


def copy_dir(out: Path, m: int) -> Path:
    """Where shadow copy ``m`` is trained (resumable: its checkpoint, then ``model.pt`` and ``DONE``)."""
    return out / "shadow" / f"model_{m:04d}"


def train_copy(spec: dict[str, Any]) -> dict[str, Any]:
    """Executor job: train shadow copy ``spec["m"]`` from the architecture and data saved in ``spec["inputs"]``.

    Plain-data spec (paths as strings), so any executor can ship it; the copy is the one
    :func:`membership_section` would train in-process (same seed, keep row and recipe), written
    with the trainer's atomic checkpoints and ``DONE`` marker.
    """
    from bnmem.train import train_model

    run_dir = Path(spec["run_dir"])
    if io.is_done(run_dir):
        return {"m": spec["m"], "skipped": True}
    # The user's own pickled module, saved by the audit from the model it already loaded (trusted).
    inputs = torch.load(spec["inputs"], weights_only=False)
    train = TrainConfig.model_validate(spec["train"])
    net, _, _ = fresh_copy(inputs["model"], seed=int(spec["m"]))
    train_model(net, inputs["ds"], train, seed=int(spec["m"]), run_dir=run_dir,
                train_idx=np.asarray(spec["train_idx"]), measure=False, progress=False)
    return {"m": spec["m"], "skipped": False}


def train_copies(model: nn.Module, ds: OutlierDataset, keep: np.ndarray, train: TrainConfig, out: Path,
                 executor: Any) -> None:
    """Train every unfinished shadow copy through ``executor`` (one job per copy)."""
    pending = [m for m in range(keep.shape[0]) if not io.is_done(copy_dir(out, m))]
    if not pending:
        return
    inputs = out / "shadow" / SHADOW_INPUTS
    io.save_torch(inputs, {"model": copy.deepcopy(model).cpu(), "ds": ds})
    specs = [{"m": m, "run_dir": str(copy_dir(out, m)), "inputs": str(inputs), "train": train.model_dump(mode="json"),
              "train_idx": np.flatnonzero(keep[m]).tolist()} for m in pending]
    executor.map(train_copy, specs, desc="shadow copies", resources={"num_cpus": train.threads})


def membership_section(model: nn.Module, ds: OutlierDataset, shadow_models: int, train: TrainConfig,
                       out: Path | None, keep_seed: int = 0, progress: bool = False,
                       executor: Any = None) -> dict[str, Any]:
    """Train ``shadow_models`` fresh copies on balanced halves and attack them leave-one-out.

    Args:
        model: the (pickled) model whose architecture is copied.
        ds: the training data (every example is IN for exactly half the copies).
        shadow_models: M, even and >= 4.
        train: the training recipe of the copies.
        out: folder for the copies (resumable); None keeps them in memory.
        keep_seed: seed of the keep matrix.
        progress: progress bars.
        executor: train the copies through it (local worker processes, Ray; needs ``out``);
            None trains them here, one after another. The copies are the same either way.

    Raises:
        BnmemError: a TorchScript model, or M odd or below 4.
    """
    from bnmem.attacks import keep_matrix
    from bnmem.attacks.phi import phi_from_logits_block
    from bnmem.attacks.streaming import evaluate_stream
    from bnmem.data import augment
    from bnmem.data.views import make_views
    from bnmem.train import load_finished, train_model

    check_shadow_request(model, shadow_models)
    keep = keep_matrix(shadow_models, ds.n_train, keep_seed)
    # Query views = the training views (the identity alone when the recipe trains without augmentation).
    views = (augment.matched_views(augment.spec_of(train, ds.input_shape, ds.name)) if ds.x_train.ndim == 4
             else make_views(["identity"], ()))
    y_test = ds.y_test.numpy()
    done = sum(io.is_done(out / "shadow" / f"model_{m:04d}") for m in range(shadow_models)) if out else 0
    cost = shadow_cost(model, ds, shadow_models, train, done)
    if progress:
        print(cost["text"], file=sys.stderr, flush=True)
    if executor is not None and out is not None:
        train_copies(model, ds, keep, train, out, executor)
    phi, pop_phi, reset_info, accs = [], [], None, []
    for m in range(shadow_models):
        net, n_reset, n_params = fresh_copy(model, seed=m)
        reset_info = (n_reset, n_params)
        run_dir = None if out is None else copy_dir(out, m)
        if run_dir is not None and io.is_done(run_dir):
            net = load_finished(net, run_dir).model
        else:
            net = train_model(net, ds, train, seed=m, run_dir=run_dir, train_idx=np.flatnonzero(keep[m]),
                              measure=False, progress=f"shadow {m}" if progress else False).model
        net = net.to(train.device)
        per_view = [predict_logits(net, fn(ds.x_train).to(train.device)).numpy() for _, fn in views]
        phi.append(phi_from_logits_block(np.stack(per_view, axis=1), ds.y_train.numpy()))
        # RMIA's population: the test split, which no copy trained on (never a scored example).
        test_views = [predict_logits(net, fn(ds.x_test).to(train.device)).numpy() for _, fn in views]
        pop_phi.append(phi_from_logits_block(np.stack(test_views, axis=1), y_test))
        pred = per_view[0].argmax(1)
        accs.append({"train_in": float((pred[keep[m]] == ds.y_train.numpy()[keep[m]]).mean()),
                     "train_out": float((pred[~keep[m]] == ds.y_train.numpy()[~keep[m]]).mean())})
    subsets = {"outliers": ds.is_outlier, "inliers": ds.is_clean} if masks_known(ds) else None
    population = f"the test split (n={ds.x_test.shape[0]}; no copy trained on it)"
    res = evaluate_stream(np.stack(phi), keep, subsets=subsets, attacks=AUDIT_ATTACKS,
                          population_phi=np.stack(pop_phi), population_name=population)
    metrics = {a: {s: {k: v[k] for k in ("auc", "auc_std", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "balanced_acc",
                                                     "eps_lb", "eps_lb_max", "eps_lb_per_target")}
                   for s, v in subs.items()} for a, subs in res["metrics"].items()}
    return {
        "shadow_models": shadow_models,
        "protocol": "fresh copies of the architecture (reset_parameters, seeded) train with the given recipe on "
                    "balanced halves of the training data (each example IN for exactly half); LiRA/RMIA "
                    "leave-one-out: each copy is the target once, the others its references",
        "reinitialized_parameters": f"{reset_info[0]} of {reset_info[1]} parameter tensors "
                                    "(others keep the given model's values)",
        "views": [name for name, _ in views],
        "bn_mode_at_query": "eval",
        "rmia_population": population,
        "train": train.model_dump(mode="json"),
        "keep_seed": keep_seed,
        "attacks": metrics,
        "shadow_accuracy": {k: float(np.mean([a[k] for a in accs])) for k in ("train_in", "train_out")},
        "subset_sizes": res["subset_sizes"],
        "cost": {k: v for k, v in cost.items() if k != "text"},
    }
