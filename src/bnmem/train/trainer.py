"""The single-model trainer used by every experiment.

The whole training set lives on the device as one tensor; batches are index
tensors into it (no DataLoader in the hot loop). Data order depends only on
(seed, epoch) (see :mod:`bnmem.train.batching`), so a run that is resumed from
its last completed epoch ends bit-for-bit where an uninterrupted run ends
(at the same thread count).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from bnmem import io
from bnmem.config import ModelConfig, TrainConfig
from bnmem.data import augment
from bnmem.data.dataset import OutlierDataset
from bnmem.measure.memorization import subset_accuracies
from bnmem.measure.predict import to_layout
from bnmem.train.batching import epoch_batches
from bnmem.train.optim import build_optimizer, lr_at, set_lr
from bnmem.train.precision import autocast, channels_last, compiled
from bnmem.threads import torch_threads

CHECKPOINT = "checkpoint.pt"
MODEL = "model.pt"

# Called after each epoch with (epoch (1-based), model); returns extra per-epoch
# measurements to store in the history, or None.
EpochHook = Callable[[int, nn.Module], dict | None]
# Extra loss terms (e.g. the γ/σ regularizer) computed after the forward pass.
LossHook = Callable[[nn.Module], torch.Tensor]


@dataclass
class TrainResult:
    """What a finished training run leaves behind."""

    model: nn.Module
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def curve(self, key: str) -> list:
        return [h.get(key) for h in self.history]


def seeded_model(model_cfg: ModelConfig, ds: OutlierDataset, seed: int) -> nn.Module:
    """Build the model with initial weights fixed by ``seed``.

    Normalization layers draw no random numbers at init, so the same seed gives
    identical conv/linear weights for every norm: comparisons across norms are paired.
    """
    from bnmem.models import build_model

    torch.manual_seed(seed)
    return build_model(model_cfg.arch, ds.input_shape, ds.num_classes, model_cfg.norm)


def train_model(
    model: nn.Module,
    ds: OutlierDataset,
    cfg: TrainConfig,
    seed: int,
    run_dir: str | Path | None = None,
    train_idx: np.ndarray | None = None,
    on_epoch: EpochHook | None = None,
    extra_loss: LossHook | None = None,
    measure: bool = True,
    progress: bool | str = True,
) -> TrainResult:
    """Train ``model`` on ``ds`` (or on its examples ``train_idx``) with recipe ``cfg``.

    Args:
        model: freshly initialized model (see :func:`seeded_model`).
        ds: dataset; its tensors are moved to ``cfg.device``.
        cfg: the training recipe.
        seed: fixes the data order and the augmentation draws (initial weights
            are the caller's business).
        run_dir: if given, a checkpoint is written there after every epoch and
            training resumes from it; ``model.pt`` and ``DONE`` mark completion.
        train_idx: indices of the training examples this model sees (shadow models).
        on_epoch: hook after each epoch returning extra measurements.
        extra_loss: extra loss term added to the cross-entropy each step; by
            default the γ/σ regularizer when ``cfg.gs_reg > 0``.
        measure: record subset accuracies every epoch (``subset_accuracies``).
        progress: show a tqdm bar (a string is used as its description).

    Returns:
        The trained model and its per-epoch history.
    """
    device = torch.device(cfg.device)
    run_dir = Path(run_dir) if run_dir is not None else None
    with torch_threads(cfg.threads):
        model = model.to(device)
        nhwc = channels_last(cfg, True)
        if ds.x_train.ndim == 4 and nhwc:
            model = model.to(memory_format=torch.channels_last)
        x_all = to_layout(ds.x_train.to(device)) if nhwc else ds.x_train.to(device).contiguous()
        y_all = ds.y_train.to(device)
        idx = torch.arange(ds.n_train) if train_idx is None else torch.as_tensor(np.asarray(train_idx), dtype=torch.long)
        idx = idx.to(device)
        aug = augment.spec_of(cfg, ds.input_shape, ds.name)
        opt = build_optimizer(model, cfg)
        forward = compiled(model, cfg)  # the model itself unless cfg.compile
        if extra_loss is None and cfg.gs_reg > 0:
            from bnmem.train.regularizer import GammaSigmaRegularizer

            extra_loss = GammaSigmaRegularizer(model, cfg.gs_reg, cfg.gs_tau, track_activity=True)
        history, start_epoch, seconds = _resume(run_dir, model, opt)
        desc = progress if isinstance(progress, str) else "train"
        bar = tqdm(range(start_epoch, cfg.epochs), desc=desc, disable=not progress, leave=False,
                   initial=start_epoch, total=cfg.epochs)
        for epoch in bar:
            t0 = time.perf_counter()
            train_loss, extra_share = _train_epoch(model, opt, x_all, y_all, idx, cfg, aug, seed, epoch,
                                                   extra_loss, forward)
            seconds += time.perf_counter() - t0
            record: dict = {"epoch": epoch + 1, "lr": lr_at(cfg, epoch), "train_loss": train_loss}
            if extra_loss is not None:  # how active an extra term (the γ/σ penalty) was: claim 6 reports it
                record["extra_loss_share"] = extra_share
                record.update(getattr(extra_loss, "epoch_activity", dict)())
            if not np.isfinite(record["train_loss"]):
                raise FloatingPointError(f"training diverged at epoch {epoch + 1} (loss {record['train_loss']}); lower --lr")
            if measure:
                record.update(subset_accuracies(model, ds, None if train_idx is None else np.asarray(train_idx)))
            if on_epoch is not None:
                record.update(on_epoch(epoch + 1, model) or {})
            history.append(record)
            if measure:
                bar.set_postfix({k: f"{v:.2f}" for k, v in record.items() if k.endswith("acc") and v is not None})
            if run_dir is not None:
                io.save_torch(run_dir / CHECKPOINT, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                                     "history": history, "epoch": epoch + 1, "seconds": seconds})
        bar.close()
        if run_dir is not None:
            _finish(run_dir, model, history, cfg.epochs, seconds)
    return TrainResult(model=model, history=history, seconds=seconds)


def _resume(run_dir: Path | None, model: nn.Module, opt: torch.optim.Optimizer) -> tuple[list[dict], int, float]:
    """(history, epochs done, seconds so far): from the run's checkpoint, loaded into model and optimizer,
    or a fresh start."""
    if run_dir is None or not (run_dir / CHECKPOINT).exists():
        return [], 0, 0.0
    ckpt = io.load_torch(run_dir / CHECKPOINT)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    return ckpt["history"], ckpt["epoch"], ckpt["seconds"]


def _train_epoch(model: nn.Module, opt: torch.optim.Optimizer, x_all: torch.Tensor, y_all: torch.Tensor,
                 idx: torch.Tensor, cfg: TrainConfig, aug: augment.AugmentSpec, seed: int, epoch: int,
                 extra_loss: LossHook | None, forward: Callable | None = None) -> tuple[float, float | None]:
    """One epoch of SGD over the examples ``idx`` (order and augmentation fixed by (seed, epoch)); the mean
    loss and the extra loss term's share of it (None without one). ``forward``: the model's training forward
    (a compiled wrapper of it; default the model)."""
    set_lr(opt, lr_at(cfg, epoch))
    model.train()
    loss_sum, n_steps, extra_sum = 0.0, 0, 0.0
    batches = epoch_batches(len(idx), cfg.batch_size, seed, epoch)
    params = augment.epoch_params(aug, len(batches), len(batches[0]), seed, epoch) if aug.active else None
    for s, b in enumerate(batches):
        sel = idx[b.to(idx.device)]
        xb = x_all[sel] if params is None else augment.apply(x_all[sel], params[s], aug.padding)
        with autocast(cfg, x_all.device):
            logits = (model if forward is None else forward)(xb)
        loss = F.cross_entropy(logits.to(x_all.dtype), y_all[sel])  # float32 logits under bf16
        if extra_loss is not None:
            extra = extra_loss(model)
            extra_sum += float(extra.detach())
            loss = loss + extra
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_sum += float(loss.detach())
        n_steps += 1
    share = (extra_sum / loss_sum if loss_sum > 0 else None) if extra_loss is not None else None
    return loss_sum / max(n_steps, 1), share


def _finish(run_dir: Path, model: nn.Module, history: list[dict], epochs: int, seconds: float) -> None:
    """Write the final weights and history, mark the run DONE, drop the checkpoint."""
    io.save_torch(run_dir / MODEL, model.state_dict())
    io.write_json(run_dir / "history.json", history)
    io.mark_done(run_dir, {"epochs": epochs, "seconds": seconds})
    (run_dir / CHECKPOINT).unlink(missing_ok=True)


def load_finished(model: nn.Module, run_dir: str | Path) -> TrainResult:
    """Load a finished run (``DONE`` present) into ``model``."""
    run_dir = Path(run_dir)
    model.load_state_dict(io.load_torch(run_dir / MODEL))
    history = io.read_json(run_dir / "history.json")
    return TrainResult(model=model, history=history, seconds=io.read_json(run_dir / io.DONE).get("seconds", 0.0))
