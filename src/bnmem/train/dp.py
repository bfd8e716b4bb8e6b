"""Differentially private training (DP-SGD) through Opacus.

DP-SGD clips every example's gradient to norm ``C`` (``max_grad_norm``), sums
the clipped gradients, adds Gaussian noise of standard deviation ``σ·C`` and
divides by the expected batch size; batches are drawn by Poisson sampling
(each example joins each step independently with probability ``q``). Opacus's
``PrivacyEngine.make_private_with_epsilon`` picks the noise multiplier ``σ``
that reaches the target ``(ε, δ)`` after the planned number of steps, and its
accountant (PRV, the default of Opacus's ``PrivacyEngine``) reports the ε
actually spent. Every number the guarantee depends on is recorded
(:class:`DPAccounting`).

BatchNorm is refused: a BN layer normalizes each example with statistics of the
whole batch, so an example's output (and gradient) depends on the others and
per-example clipping no longer bounds any one example's influence. DP-SGD runs
here only on ``group``, ``layer`` or ``none`` norms.

Reproducibility: ``secure_mode=False`` and two seeded ``torch.Generator``
objects (one for Poisson sampling, one for the noise), derived from the model
seed, make a run a pure function of (seed, data, recipe) at a fixed thread
count. That is right for experiments and wrong for deployment: a real DP
release needs ``secure_mode=True`` (a cryptographically secure noise source).

Optional dependency: ``pip install bnmem[dp]`` (Opacus).
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bnmem.config import StrictModel, TrainConfig
from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError
from bnmem.models.norms import batchnorm_layers
from bnmem.train.optim import build_optimizer, lr_at, set_lr
from bnmem.threads import torch_threads

DP_NORMS = ("group", "layer", "none")
# Keeps the sampling and noise streams of one model seed apart from each other
# and from the non-private trainer's data-order stream.
_SAMPLING_STREAM = 0xD5A1
_NOISE_STREAM = 0xD501


class DPConfig(StrictModel):
    """How a model is trained with DP-SGD.

    Attributes:
        target_epsilon: ε the noise multiplier is chosen for.
        max_grad_norm: per-example clipping norm C.
        delta: δ; None means 1/N with N the model's number of training examples.
        accountant: Opacus accountant (``prv`` is the PrivacyEngine's default).
        lr: learning rate of the private models (None: the recipe's ``lr``);
            clipped, noised gradients usually want a different step than plain ones.
    """

    target_epsilon: float = Field(8.0, gt=0)
    max_grad_norm: float = Field(1.0, gt=0)
    delta: float | None = Field(None, gt=0, lt=1)
    accountant: Literal["prv", "rdp", "gdp"] = "prv"
    lr: float | None = Field(None, gt=0)


@dataclass
class DPAccounting:
    """What the (ε, δ) guarantee of one trained model rests on.

    Attributes:
        target_epsilon: the ε asked for.
        epsilon: the ε the accountant reports after training.
        delta: δ used (1/N by default).
        noise_multiplier: σ (noise std / C).
        max_grad_norm: C.
        sample_rate: q, the Poisson sampling probability per step.
        steps: optimizer steps taken.
        epochs: passes planned (steps = epochs / q).
        n_train: N, the model's training examples.
        expected_batch_size: q·N.
        accountant: accountant name.
        secure_mode: whether Opacus's secure RNG was used.
    """

    target_epsilon: float
    epsilon: float
    delta: float
    noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    steps: int
    epochs: int
    n_train: int
    expected_batch_size: float
    accountant: str
    secure_mode: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DPTrainResult:
    """A DP-trained model, its accounting and its per-epoch losses."""

    model: nn.Module
    accounting: DPAccounting
    history: list[dict]
    seconds: float


def require_opacus():
    """Import Opacus or fail with one line saying how to install it.

    Raises:
        BnmemError: Opacus is not installed.
    """
    try:
        import opacus
    except ImportError as e:
        raise BnmemError("DP-SGD needs Opacus: pip install 'bnmem[dp]' (or pip install opacus)") from e
    return opacus


def check_dp_norm(norm: str) -> None:
    """Refuse norms DP-SGD cannot use.

    Raises:
        BnmemError: ``norm`` is ``batch`` (or unknown).
    """
    if norm == "batch":
        raise BnmemError("DP-SGD cannot train BatchNorm models (batch statistics couple the examples, so "
                         "per-example clipping bounds nothing); use norm group, layer or none")
    if norm not in DP_NORMS:
        raise BnmemError(f"DP-SGD norm must be one of {', '.join(DP_NORMS)}, got {norm!r}")


def epsilon_for(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                accountant: str = "prv") -> float:
    """ε that Opacus's ``accountant`` gives for ``steps`` Poisson-subsampled Gaussian steps.

    Args:
        noise_multiplier: σ.
        sample_rate: q.
        steps: number of steps.
        delta: δ.
        accountant: ``prv``, ``rdp`` or ``gdp``.

    Returns:
        ε.
    """
    require_opacus()
    from opacus.accountants import create_accountant

    acc = create_accountant(mechanism=accountant)
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")  # see train_dp_model
        return float(acc.get_epsilon(delta=float(delta)))


def _seed_of(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([int(seed), stream]).generate_state(1)[0])


def train_dp_model(
    model: nn.Module,
    ds: OutlierDataset,
    cfg: TrainConfig,
    dp: DPConfig,
    seed: int,
    train_idx: np.ndarray | None = None,
    progress: bool | str = False,
) -> DPTrainResult:
    """Train ``model`` with DP-SGD (per-example clipping + Gaussian noise) at ``dp.target_epsilon``.

    The recipe is ``cfg``'s (optimizer, momentum, weight decay, schedule,
    epochs, batch size) except the learning rate when ``dp.lr`` is set; the
    batch size is the *expected* size of the Poisson batches (sample rate
    q = 1 / ceil(N / batch_size), as Opacus derives it from the data loader).
    Momentum and weight decay act on the privatized gradient (post-processing),
    so they do not change ε.

    Args:
        model: a freshly initialized model without BatchNorm (see :func:`check_dp_norm`).
        ds: the dataset.
        cfg: the training recipe.
        dp: the privacy settings.
        seed: fixes Poisson sampling and noise (initial weights are the caller's).
        train_idx: the model's training examples (default: all).
        progress: a tqdm bar (a string is its description).

    Returns:
        The trained (unwrapped) model, its :class:`DPAccounting`, per-epoch
        losses and the training seconds.

    Raises:
        BnmemError: BatchNorm in the model, Opacus missing, or a budget Opacus
            cannot reach.
    """
    if batchnorm_layers(model):
        check_dp_norm("batch")
    if getattr(cfg, "augment", "none") != "none":
        # Opacus samples its own Poisson batches; the trainer's seeded augmentation is not applied there.
        raise BnmemError(f"DP-SGD training does not apply train.augment={cfg.augment!r}; use augment: none "
                         "for the DP variants")
    if getattr(cfg, "precision", "float32") != "float32" or getattr(cfg, "compile", "off") != "off":
        # Opacus's per-sample gradients run their own loop, which applies neither.
        raise BnmemError(f"DP-SGD training runs in float32, uncompiled; use precision: float32 and compile: off "
                         f"for the DP variants (got precision={cfg.precision!r}, compile={cfg.compile!r})")
    require_opacus()
    idx = np.arange(ds.n_train) if train_idx is None else np.asarray(train_idx, dtype=np.int64)
    n = int(idx.size)
    if n < 2:
        raise BnmemError(f"DP-SGD needs at least 2 training examples, got {n}")
    delta = dp.delta if dp.delta is not None else 1.0 / n
    recipe = cfg.model_copy(update={"lr": dp.lr if dp.lr is not None else cfg.lr})
    t0 = time.perf_counter()
    with torch_threads(cfg.threads), _opacus_warnings_silenced():
        private, dp_opt, dp_loader, engine, sample_rate = _make_private(model, ds, idx, recipe, dp, seed, delta)
        history = _dp_epochs(private, dp_opt, dp_loader, recipe, progress)
        accounting = DPAccounting(
            target_epsilon=float(dp.target_epsilon),
            epsilon=float(engine.get_epsilon(delta)),
            delta=float(delta),
            noise_multiplier=float(dp_opt.noise_multiplier),
            max_grad_norm=float(dp.max_grad_norm),
            sample_rate=float(sample_rate),
            steps=int(sum(h["steps"] for h in history)),
            epochs=int(cfg.epochs),
            n_train=n,
            expected_batch_size=float(sample_rate * n),
            accountant=dp.accountant,
            secure_mode=False,
        )
        plain = private._module
        # Leave a plain module behind: no Opacus hooks or per-sample buffers in the saved model.
        private.cleanup()
    return DPTrainResult(model=plain, accounting=accounting, history=history, seconds=time.perf_counter() - t0)


@contextmanager
def _opacus_warnings_silenced() -> Iterator[None]:
    """Opacus warnings that are expected here and say nothing about the run."""
    with warnings.catch_warnings():
        # "Secure RNG turned off": deliberate (seeded experiments), recorded as secure_mode=False.
        warnings.filterwarnings("ignore", message=".*[Ss]ecure RNG.*")
        # The PRV accountant bounds its discretization domain with an RDP estimate, which warns when
        # its optimal order is the largest one tried; the ε reported is PRV's, not that bound.
        warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
        # Opacus's per-sample hooks fire on module outputs; inputs never need gradients here.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        yield


def _make_private(model: nn.Module, ds: OutlierDataset, idx: np.ndarray, recipe: TrainConfig, dp: DPConfig,
                  seed: int, delta: float) -> tuple[Any, Any, Any, Any, float]:
    """Opacus's private module, optimizer and Poisson loader for ``(ε, δ)``, with seeded sampling and noise.

    Returns:
        ``(private module, DP optimizer, DP loader, privacy engine, sample rate)``.

    Raises:
        BnmemError: Opacus cannot reach the budget.
    """
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    device = torch.device(recipe.device)
    model = model.to(device)
    sel = torch.as_tensor(idx)
    n = int(idx.size)
    data = TensorDataset(ds.x_train[sel].to(device), ds.y_train[sel].to(device))
    loader = DataLoader(data, batch_size=min(recipe.batch_size, n),
                        generator=torch.Generator().manual_seed(_seed_of(seed, _SAMPLING_STREAM)))
    opt = build_optimizer(model, recipe)
    noise = torch.Generator(device=device).manual_seed(_seed_of(seed, _NOISE_STREAM))
    engine = PrivacyEngine(accountant=dp.accountant, secure_mode=False)
    try:
        private, dp_opt, dp_loader = engine.make_private_with_epsilon(
            module=model, optimizer=opt, data_loader=loader, target_epsilon=dp.target_epsilon,
            target_delta=delta, epochs=recipe.epochs, max_grad_norm=dp.max_grad_norm,
            noise_generator=noise)
    except ValueError as e:  # e.g. "The privacy budget is too low."
        raise BnmemError(f"Opacus cannot reach ε={dp.target_epsilon}, δ={delta:.3g} in {recipe.epochs} "
                         f"epochs: {e}") from e
    return private, dp_opt, dp_loader, engine, 1.0 / len(loader)


def _dp_epochs(private: nn.Module, dp_opt: Any, dp_loader: Any, recipe: TrainConfig,
               progress: bool | str) -> list[dict[str, Any]]:
    """The DP-SGD epochs (learning-rate schedule of ``recipe``); one loss record per epoch.

    Raises:
        FloatingPointError: the loss is not finite (diverged).
    """
    from tqdm.auto import tqdm

    history: list[dict[str, Any]] = []
    desc = progress if isinstance(progress, str) else "dp-sgd"
    private.train()
    for epoch in tqdm(range(recipe.epochs), desc=desc, disable=not progress, leave=False):
        set_lr(dp_opt, lr_at(recipe, epoch))
        loss_sum, steps = 0.0, 0
        for xb, yb in dp_loader:
            dp_opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(private(xb), yb)
            loss.backward()
            dp_opt.step()
            if xb.shape[0]:
                loss_sum += float(loss.detach())
            steps += 1
        record = {"epoch": epoch + 1, "train_loss": loss_sum / max(steps, 1), "steps": steps}
        if not np.isfinite(record["train_loss"]):
            raise FloatingPointError(f"DP training diverged at epoch {epoch + 1}; lower dp.lr")
        history.append(record)
    return history
