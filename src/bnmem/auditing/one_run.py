"""One-run audit of a training recipe (Steinke, Nasr & Jagielski, "Privacy auditing with one (1) training run",
NeurIPS 2023): an ε lower bound from a single training run with inserted canaries.

The procedure (``bnmem audit --canaries K``):

1. K canaries are drawn: images of seeded Gaussian noise in the model's (normalized) input space,
   each with a random label. Noise images with random labels are the examples a network can only
   fit by memorizing them, so they are what the bound is most sensitive to (the multi-run DP audit
   found flipped real digits too weak; tests/test_dp_audit.py).
2. Each canary is IN with probability 1/2, independently (a seeded fair coin).
3. A fresh copy of the architecture trains **once** with the recipe on the whole training set plus
   the IN canaries (every real example is always in: only the canaries are audited).
4. Each canary is scored by the trained model (BN in eval mode): the log-probability of its label.
5. The auditor guesses: IN for the k highest scores, OUT for the k lowest, and abstains on the rest
   (the paper's abstention variant with top-k guesses, k+ = k− = k), for each k of a grid declared
   before the scores are seen (:data:`GUESS_GRID`, those with 2k ≤ K).
6. With v correct out of r = 2k guesses, an (ε, δ)-DP recipe satisfies (the paper's Theorem, with
   its δ term) P[W ≥ v] ≤ P[Binomial(r, q) ≥ v] + 2Kδ·max_{1≤i≤v} P[v − i ≤ Binomial(r, q) < v] / i,
   q = e^ε / (1 + e^ε). The bound at confidence 1 − β is the largest ε whose p-value is below
   β / |grid| (a Bonferroni correction over the k tried); the reported ε is the largest over k.

The result is a **floor**: no (ε, δ)-DP guarantee of the recipe below it holds (with probability
at least 1 − β over the coins and the training run). It is never an estimate of ε: even r guesses
all right certify only the ε at which q^r = β / |grid| (about 2.6 for r = 100 at β = 0.05 over 7 k's),
so one run caps the floor however leaky the recipe, and a small floor says little.

δ is :data:`DELTA` (1e-5) unless given (a DP recipe's own δ when comparing with its accountant).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

import numpy as np
import torch
from scipy.special import expit
from scipy.stats import binom
from torch import nn

from bnmem.config import TrainConfig
from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError
from bnmem.formatting import eps_value

GUESS_GRID = (5, 10, 20, 50, 100, 200, 500, 1000, 2000)
DELTA = 1e-5
BETA = 0.05
METHOD = ("Steinke, Nasr & Jagielski (2023), the abstention variant: guess IN for the k highest canary scores and "
          "OUT for the k lowest, abstain on the rest, k from a grid fixed in advance with a Bonferroni correction; "
          "p-value with the paper's δ term; the reported ε is the largest over k")
_CANARY_STREAM = 0xCA4A


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P-value of ≥ v correct guesses out of r (m canaries) under the hypothesis that training is (ε, δ)-DP.

    P[Binomial(r, q) ≥ v] + 2mδ · max_{1≤i≤v} P[v − i ≤ Binomial(r, q) < v] / i, q = e^ε / (1 + e^ε),
    capped at 1.
    """
    if not 0 <= v <= r <= m:
        raise BnmemError(f"one-run audit: need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = float(expit(eps))
    tail = float(binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    below = np.cumsum(binom.pmf(np.arange(v - 1, -1, -1), r, q))  # i = 1..v: P[v − i ≤ Bin < v]
    alpha = float(np.max(below / np.arange(1, v + 1)))
    return min(tail + 2 * m * delta * alpha, 1.0)


def epsilon_floor(m: int, r: int, v: int, delta: float, beta: float, tol: float = 1e-6) -> float:
    """The largest ε the guesses reject at level ``beta``: p_value(ε) < β for every smaller ε (0 when none).

    p_value increases with ε, so the rejected set is an interval [0, ε*); ε* by bisection.
    """
    if p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            return math.inf
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_value(m, r, v, mid, delta) < beta else (lo, mid)
    return lo


def guesses(scores: np.ndarray, inside: np.ndarray, k: int) -> tuple[int, int]:
    """(r, v): 2k guesses (IN for the k highest scores, OUT for the k lowest) and how many are right."""
    order = np.argsort(scores, kind="stable")
    right = int(inside[order[-k:]].sum() + (~inside[order[:k]]).sum())
    return 2 * k, right


def one_run_bound(scores: np.ndarray, inside: np.ndarray, delta: float = DELTA, beta: float = BETA,
                  grid: tuple[int, ...] = GUESS_GRID) -> dict[str, Any]:
    """The ε floor from the canaries' scores and their coins, over the guess grid (Bonferroni).

    Returns:
        ``{"eps_lb", "k", "guesses", "correct", "per_k": [{"k", "guesses", "correct", "eps_lb"}], "beta",
        "delta", "grid"}``; ``k`` is the guess count that gives the reported floor.
    """
    m = int(scores.size)
    ks = [k for k in grid if 2 * k <= m]
    if not ks:
        raise BnmemError(f"the one-run audit needs at least {2 * grid[0]} canaries, got {m}")
    per_k = []
    for k in ks:
        r, v = guesses(scores, inside, k)
        per_k.append({"k": k, "guesses": r, "correct": v, "eps_lb": epsilon_floor(m, r, v, delta, beta / len(ks))})
    best = max(per_k, key=lambda p: (p["eps_lb"], -p["k"]))
    return {"eps_lb": best["eps_lb"], "k": best["k"], "guesses": best["guesses"], "correct": best["correct"],
            "per_k": per_k, "beta": beta, "delta": delta, "grid": ks}


@dataclasses.dataclass
class Canaries:
    """K inserted canaries: noise images with random labels, and the fair coin that put each IN or OUT."""

    x: torch.Tensor
    y: torch.Tensor
    inside: np.ndarray
    seed: int


def make_canaries(ds: OutlierDataset, k: int, seed: int = 0) -> Canaries:
    """K seeded canaries shaped like the training inputs (N(0, 1) pixels: the normalized scale), random labels."""
    rng = np.random.default_rng([seed, _CANARY_STREAM])
    x = torch.from_numpy(rng.standard_normal((k, *ds.x_train.shape[1:])).astype(np.float32)).to(ds.x_train.dtype)
    y = torch.from_numpy(rng.integers(0, ds.num_classes, k)).to(ds.y_train.dtype)
    return Canaries(x=x, y=y, inside=rng.random(k) < 0.5, seed=seed)


def with_canaries(ds: OutlierDataset, c: Canaries) -> tuple[OutlierDataset, np.ndarray]:
    """The dataset with every canary appended to its training split (marked OOD), and the training indices:
    every real example and the IN canaries."""
    k, n = len(c.inside), ds.n_train
    grown = dataclasses.replace(
        ds, x_train=torch.cat([ds.x_train, c.x]), y_train=torch.cat([ds.y_train, c.y]),
        y_train_orig=np.concatenate([ds.y_train_orig, np.full(k, -1)]),
        is_noisy=np.concatenate([ds.is_noisy, np.zeros(k, bool)]), is_ood=np.concatenate([ds.is_ood, np.ones(k, bool)]),
        source_index=None if ds.source_index is None else np.concatenate([ds.source_index, np.full(k, -1)]))
    return grown, np.concatenate([np.arange(n), n + np.flatnonzero(c.inside)])


@torch.no_grad()
def canary_scores(model: nn.Module, c: Canaries, device: str | torch.device = "cpu") -> np.ndarray:
    """log p(label | canary) under ``model`` in eval mode (BN with its running statistics), float64."""
    model.eval()
    out = []
    for i in range(0, len(c.inside), 512):
        logits = model(c.x[i:i + 512].to(device)).double()
        out.append(torch.log_softmax(logits, 1).gather(1, c.y[i:i + 512].to(device).view(-1, 1)).squeeze(1).cpu())
    return torch.cat(out).numpy()


Trainer = Callable[[nn.Module, OutlierDataset, np.ndarray], tuple[nn.Module, dict[str, Any]]]


def plain_trainer(train: TrainConfig, seed: int, progress: bool = False) -> Trainer:
    """The recipe as bnmem's trainer runs it (the shadow copies' trainer)."""
    from bnmem.train import train_model

    def run(net: nn.Module, ds: OutlierDataset, idx: np.ndarray) -> tuple[nn.Module, dict[str, Any]]:
        res = train_model(net, ds, train, seed=seed, train_idx=idx, measure=False,
                          progress="one-run audit" if progress else False)
        return res.model, {"recipe": train.model_dump(mode="json"), "private": False}

    return run


def fn_trainer(training: Any, seed: int) -> Trainer:
    """The user's own training function (:class:`bnmem.shadow.copies.CopyTraining` with ``fn``), as the shadow
    copies train with ``--train-fn``."""
    from bnmem.shadow.copies import train_one

    def run(net: nn.Module, ds: OutlierDataset, idx: np.ndarray) -> tuple[nn.Module, dict[str, Any]]:
        trained, _ = train_one(net, ds, idx, seed, training, None, None)
        return trained, {"train_fn": {"name": training.fn_name, "source_sha256": training.fn_sha256},
                         "private": False}

    return run


def dp_trainer(train: TrainConfig, dp: Any, seed: int) -> Trainer:
    """The recipe under DP-SGD (:func:`bnmem.train.dp.train_dp_model`); the accountant's ε is recorded."""
    from bnmem.train.dp import train_dp_model

    def run(net: nn.Module, ds: OutlierDataset, idx: np.ndarray) -> tuple[nn.Module, dict[str, Any]]:
        res = train_dp_model(net, ds, train, dp, seed, train_idx=idx)
        return res.model, {"recipe": train.model_dump(mode="json"), "private": True,
                           "dp": res.accounting.to_dict()}

    return run


def audit_recipe_once(model: nn.Module, ds: OutlierDataset, trainer: Trainer, canaries: int, *, seed: int = 0,
                      beta: float = BETA, delta: float = DELTA, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Train the recipe once with ``canaries`` inserted canaries and bound its ε from below.

    Args:
        model: the architecture (a fresh, re-initialized copy trains; the model itself is untouched).
        ds: the training data (every example always in).
        trainer: trains a fresh network on ``(ds, indices)`` (:func:`plain_trainer`, :func:`dp_trainer`).
        canaries: K, each IN by a fair coin.
        seed: the canaries, their coins and the copy's initialization.
        beta: the floor holds with confidence 1 − β.
        delta: the δ of the (ε, δ) hypothesis.

    Returns:
        The bound (:func:`one_run_bound`) with the canaries' counts, the training record, the method and the
        seconds the run took.
    """
    from bnmem.shadow.copies import fresh_copy

    t0 = time.perf_counter()
    c = make_canaries(ds, canaries, seed)
    grown, idx = with_canaries(ds, c)
    net, _, _ = fresh_copy(model, seed=seed)
    trained, record = trainer(net, grown, idx)
    scores = canary_scores(trained.to(device), c, device)
    bound = one_run_bound(scores, c.inside, delta, beta)
    fit = float(np.mean(scores[c.inside] > np.log(0.5)))  # IN canaries whose label the model now prefers
    return {**bound, "canaries": canaries, "canaries_in": int(c.inside.sum()), "seed": seed,
            "canary_kind": "Gaussian-noise images with random labels, appended to the training split",
            "in_canaries_fit": fit, "method": METHOD, "training": record,
            "seconds": time.perf_counter() - t0}


def one_run_text(one: dict[str, Any], multi: dict[str, Any] | None) -> str:
    """The floor in words, beside the multi-run ε lower bound of the same recipe when there is one."""
    eps, conf = one["eps_lb"], 100 * (1 - one["beta"])
    head = (f"One-run audit of the recipe ({one['canaries']} canaries, {one['canaries_in']} IN by a fair coin; "
            f"{one['correct']} of {one['guesses']} guesses right at k = {one['k']}): ")
    if eps > 0:
        head += (f"no (ε, δ = {one['delta']:g}) differential-privacy guarantee below ε = {eps_value(eps)} holds for "
                 f"this recipe ({conf:.0f}% confidence): a floor, not an estimate of ε.")
    else:
        head += (f"ε lower bound 0 at {conf:.0f}% confidence: the guesses are within what chance allows, which does "
                 "not mean the recipe is private.")
    if multi is None:
        return head
    m_eps = multi["eps_lb"]
    same = "agree" if (eps > 0) == (m_eps > 0) else "differ"
    why = ("both are floors on the same recipe's ε, from different evidence (inserted noise canaries in one run, "
           "δ = {d1:g}; the real examples over the shadow copies, δ = 1/N per copy), so the larger one is the "
           "better floor and neither is an estimate").format(d1=one["delta"])
    differ = ""
    if same == "differ":
        weaker = "multi-run" if m_eps < eps else "one-run"
        differ = (f" Here the {weaker} floor is the weaker: " + (
            "the multi-run one is read from the attack and group that set the level, whose few scores per copy "
            "bound little, while the canaries are built to be memorized" if weaker == "multi-run" else
            "the recipe did not fit the canaries well enough for the guesses to beat chance, while the real "
            "examples over the shadow copies did") + ".")
    return (f"{head} Beside it, the multi-run ε lower bound over the shadow copies is {m_eps:.3g} "
            f"({multi.get('where', multi.get('attack', ''))}); they {same} on whether ε > 0: {why}.{differ}")
