"""Streaming leave-one-out evaluation: memory bounded by one block of examples, not M × N × V.

Same protocol and results as :func:`bnmem.attacks.evaluate.evaluate_attacks`
(which stays as the slow, obviously-correct oracle): each model in turn is the
target and the others its references, reference sets truncated as the LiRA
reference code does. What differs is how the work is organised:

- φ is read in blocks of examples from a :class:`~bnmem.attacks.phi.PhiSource`
  (a memory-mapped ``phi.npy``, a legacy ``logits.npy`` converted per block, or
  an array), for all targets at once;
- with a balanced keep matrix (every example IN for the same number of models,
  as bnmem builds it) and numba installed, each block is scored by the compiled
  kernels (:mod:`bnmem.attacks.kernels`: per example and view one summary of
  each side's references, every target's fit a look-up, O(M·N·V) work);
  otherwise by the plain numpy path, which gathers each target's references
  the oracle's way (O(M²·N·V): fine for digits-sized runs, slow at CIFAR scale);
- fixed-variance attacks need each target's global spread first, so they add
  one pass over the blocks;
- what is kept across blocks is small: per attack the scores [T, N] (float64),
  and for RMIA with a selected offline a the view-averaged log p_y [M, N] and
  two [T, N] arrays.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from bnmem.allocator import keep_freed_memory
from bnmem.attacks.keep import first_k_references
from bnmem.attacks import kernels
from bnmem.attacks.phi import ArrayPhi, PhiSource
from bnmem.attacks import spec as attack_spec
from bnmem.attacks.scores import loss_from_phi
from bnmem.attacks.result import (
    POOLED_POINTS,
    check_keep,
    check_references,
    check_request,
    check_targets,
    evaluation_result,
    settings,
)
from bnmem.attacks.rmia import (
    RMIAParams,
    rmia_scores,
    rmia_scores_against,
    select_offline_a,
    view_log_mean,
)
from bnmem.attacks.spec import Block
from bnmem.errors import BnmemError
from scipy.special import logsumexp

# Elements of one [models, block, views] float64 block read from φ (~16 MB).
WORK_ELEMENTS = 1 << 21


def _kinds(wanted: set[str]) -> tuple[set[str], set[str], set[str], set[str]]:
    """Of the requested attacks (their specs): those that fit references on a side (LiRA family), read the
    per-example spread, read the targets' global spread (fixed variance), and go the RMIA path."""
    specs = [attack_spec.get(a) for a in wanted]
    fitted = {s.name for s in specs if s.family == "lira" and (s.needs_in or s.needs_out)}
    return (fitted, {s.name for s in specs if s.spread == "per_example"},
            {s.name for s in specs if s.spread == "global"}, {s.name for s in specs if s.family == "rmia"})


class _Moments:
    """Running (count, mean, M2) per target, merged block by block (Chan et al.)."""

    def __init__(self, n_targets: int):
        self.n = np.zeros(n_targets)
        self.mean = np.zeros(n_targets)
        self.m2 = np.zeros(n_targets)

    def add(self, n: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> None:
        """Merge a block: n [T] counts, mean [T], m2 [T]."""
        total = self.n + n
        delta = mean - self.mean
        with np.errstate(invalid="ignore", divide="ignore"):
            self.mean = np.where(total > 0, self.mean + delta * n / total, 0.0)
            self.m2 = self.m2 + m2 + np.where(total > 0, delta * delta * self.n * n / total, 0.0)
        self.n = total

    def std(self) -> np.ndarray:
        return np.sqrt(self.m2 / self.n)


def _block_moments(k: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Collapse per-(example, view) leave-one-out moments [T, B, V] (k [T] values each) to per-target ones."""
    _, b, v = mean.shape
    bmean = mean.mean(axis=(1, 2))
    dev = mean - bmean[:, None, None]
    bm2 = m2.sum(axis=(1, 2)) + k * (dev * dev).sum(axis=(1, 2))
    return k * b * v, bmean, bm2


class _LeaveOneOutIndex:
    """The leave-one-out index tables of one evaluation: the targets and the keep matrix, and per target its
    smallest reference counts once it is removed (``k_in``, ``k_out``, over examples); for a balanced keep
    (every example IN for the same number of models) the column counts ``c_in``, ``c_out``."""

    def __init__(self, keep: np.ndarray, targets: np.ndarray):
        self.keep = keep
        self.targets = targets
        col_in = keep.sum(axis=0)
        self.balanced = bool(keep.shape[1] == 0 or (col_in == col_in[0]).all())
        kt = keep[targets]
        # Smallest IN (OUT) count over examples once the target is removed.
        self.k_in = (col_in[None, :] - kt).min(axis=1) if keep.shape[1] else np.zeros(len(targets), int)
        col_out = keep.shape[0] - col_in
        self.k_out = (col_out[None, :] - ~kt).min(axis=1) if keep.shape[1] else np.zeros(len(targets), int)
        self.c_in = int(col_in[0]) if keep.shape[1] else 0
        self.c_out = keep.shape[0] - self.c_in
        # Every model a target, in model order: the targets' φ is the block itself (no gather).
        self.all_targets = bool(np.array_equal(targets, np.arange(keep.shape[0])))

    def targets_of(self, arr: np.ndarray) -> np.ndarray:
        """The targets' rows of a per-model array."""
        return arr if self.all_targets else arr[self.targets]


def evaluate_stream(
    phi: PhiSource | np.ndarray,
    keep: np.ndarray,
    subsets: Mapping[str, np.ndarray] | None = None,
    attacks: Sequence[str] | None = None,
    rmia_params: RMIAParams | Mapping[str, Any] | None = None,
    targets: Sequence[int] | None = None,
    population_phi: PhiSource | np.ndarray | None = None,
    population_ids: np.ndarray | None = None,
    block: int | None = None,
    population_name: str = "separate population",
    metrics: bool = True,
) -> dict[str, Any]:
    """Leave-one-out evaluation of every attack, streaming over blocks of examples.

    Args:
        phi: φ [M, N, V] as a source (:mod:`bnmem.attacks.phi`) or an array.
        keep: bool [M, N] membership.
        subsets: name -> bool mask [N]; ``all`` is added.
        attacks: registered attack names (:mod:`bnmem.attacks.spec`; None: the default ones).
        rmia_params: :class:`RMIAParams` or dict (γ, a, online); a = None
            selects offline a per target on reference models.
        targets: model indices to attack (default: all).
        population_phi: φ [M, P, V] of RMIA population points no model trained
            on (e.g. the test split). None: the legacy population, the target's
            non-members (ground truth, not available to a real attacker).
        population_ids: identities of the population points, asserted disjoint
            from the candidates' 0..N−1 (give e.g. N + test index).
        block: examples per block (default: about :data:`WORK_ELEMENTS` per
            [targets, block, views] array).
        population_name: how the population is described in ``settings``.
        metrics: False: return only ``scores``, ``members`` and ``targets`` (callers that need the scores
            alone, e.g. a threshold fitted on reference models, skip the curves and ε bounds).

    Returns:
        As :func:`~bnmem.attacks.evaluate.evaluate_attacks`, except that
        ``curves`` holds only the pooled curve per attack and subset (thinned to
        about :data:`POOLED_POINTS` points), and ``settings`` adds the offline a
        chosen per target when one was selected.

    Raises:
        BnmemError: malformed inputs, unknown attack, too few models.
    """
    # The evaluation allocates and frees MB-sized arrays thousands of times: keep freed blocks in the process
    # rather than page-faulting them in afresh each time (as every study job does; results do not change).
    keep_freed_memory()
    source = phi if hasattr(phi, "read") else ArrayPhi(phi)
    m, n, v = source.shape
    keep = check_keep(keep, (m, n))
    params, attacks, masks = check_request(rmia_params, attacks, subsets, n)
    targets = check_targets(targets, m)
    tgt = np.asarray(targets, dtype=np.intp)
    loo = _LeaveOneOutIndex(keep, tgt)
    check_references(attacks, loo.k_in, loo.k_out, m - 1)
    pop_source = _population_source(population_phi, population_ids, m, n, v)
    if block is None:
        block = max(1, WORK_ELEMENTS // max(1, len(tgt) * v))
    # RMIA's online setting, or a fixed offline a: each candidate's log(p(x|θ)/p(x)) is known block by block,
    # and kept in the attack's own score array until the population turns it into a score. Selecting the
    # offline a reads every model's log p_y over all candidates: that keeps them ([M, N] and 2 × [T, N]).
    onlines = {name: params.online if name == "rmia" else False for name in attacks
               if attack_spec.get(name).family == "rmia"}
    ratios = None if any(not o and params.a is None for o in onlines.values()) else onlines
    scores, rmia_refs = _block_scores(source, loo, attacks, block, ratios, params.a)

    chosen = _rmia_into(scores, rmia_refs, onlines, ratios is not None, keep, tgt, pop_source, params)
    del rmia_refs  # [M, N] and 2 × [T, N]: not held while the metrics are computed
    if not metrics:
        return {"scores": {a: scores[a] for a in attacks}, "members": keep[tgt], "targets": targets}

    population = (population_name if pop_source is not None
                  else "legacy: the target's non-members (ground truth; not available to an attacker)")
    run_settings = settings(
        params, population, (m, n, v),
        rmia_a="selected per target on a stand-in reference model" if params.a is None else "fixed",
        evaluator="streaming leave-one-out" + (", compiled kernels" if loo.balanced and kernels.available()
                                               else " (unbalanced keep: per-target gather)" if not loo.balanced
                                               else ", numpy (per-target gather)"),
        **chosen)
    return evaluation_result({a: scores[a] for a in attacks}, keep[tgt], targets, masks, run_settings,
                             per_target_curves=False, pooled_points=POOLED_POINTS)


def _rmia_into(scores: dict[str, np.ndarray], rmia_refs: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
               onlines: dict[str, bool], from_ratios: bool, keep: np.ndarray, tgt: np.ndarray,
               pop_source: PhiSource | None, params: RMIAParams) -> dict[str, Any]:
    """Each RMIA attack's scores [T, N] into ``scores``: from its block-wise ratios (``from_ratios``) or from
    the reference arrays ``rmia_refs``. Returns the offline a chosen per target, where one was selected."""
    chosen: dict[str, Any] = {}
    if not onlines:
        return chosen
    pop = None if pop_source is None else _population(_population_log_p(pop_source))
    for name, online in onlines.items():
        if from_ratios:
            _rmia_from_ratios(scores[name], keep, tgt, pop, online, params.a, params.gamma)
            continue
        scores[name], picked = _rmia(*rmia_refs, keep, tgt, pop, online, params)
        if picked is not None:
            chosen[f"{name}_a_per_target"] = picked
    return chosen


def _population_source(population_phi: PhiSource | np.ndarray | None, population_ids: np.ndarray | None,
                       m: int, n: int, v: int) -> PhiSource | None:
    """The RMIA population's φ source [m, P, v], its identities checked disjoint from the n candidates."""
    if population_phi is None:
        return None
    pop_source = population_phi if hasattr(population_phi, "read") else ArrayPhi(population_phi)
    if pop_source.shape[0] != m or pop_source.shape[2] != v:
        raise BnmemError(f"population phi must be [{m}, P, {v}], got {pop_source.shape}")
    ids = np.arange(pop_source.shape[1]) + n if population_ids is None else np.asarray(population_ids)
    overlap = np.intersect1d(ids, np.arange(n))
    assert overlap.size == 0, f"RMIA population contains scored examples {overlap[:5].tolist()}"
    return pop_source


def _block_scores(source: PhiSource, loo: _LeaveOneOutIndex, attacks: list[str], block: int,
                  ratios: dict[str, bool] | None = None, rmia_a: float | None = None
                  ) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """One pass over the blocks of examples (after the fixed-variance pass, when needed).

    Returns the LiRA-family and baseline scores [T, N] per attack, and for RMIA (None when not
    requested, or given ``ratios``) the view-averaged log p_y of every model [M, N] and each target's
    log mean p_y over its IN and OUT references [T, N]. With ``ratios`` (RMIA attack -> online; offline
    ones with the fixed ``rmia_a``) each RMIA attack's entry holds the candidates' log(p(x|θ)/p(x)) [T, N]
    instead (:func:`_rmia_from_ratios` makes scores of them).

    A balanced keep is scored by the compiled kernel (:func:`bnmem.attacks.kernels.score_block`) where numba
    is installed; otherwise, and for attacks the kernel does not know, by the plain numpy path.
    """
    m, n, _ = source.shape
    wanted = set(attacks)
    _, _, fixed, rmia = _kinds(wanted)
    starts = list(range(0, n, block))
    kern = kernels.compiled() if loo.balanced else None
    t_count = len(loo.targets)
    sd_in = sd_out = None
    if fixed and n:
        sd_in, sd_out = _global_spreads(source, loo, starts, block, n, kern)
    fused = [a for a in attacks if a in kernels.KERNEL_ATTACKS] if kern is not None else []
    packed = np.empty((len(fused), t_count, n))
    scores = {a: packed[i] for i, a in enumerate(fused)}
    scores.update({a: np.empty((t_count, n)) for a in attacks
                   if a not in scores and (a not in rmia or ratios is not None)})
    slots = np.array([fused.index(a) if a in fused else -1 for a in kernels.KERNEL_ATTACKS], dtype=np.int64)
    # The loss attack reads the loss RMIA reads too (computed once per block); the rest go the numpy path.
    shared_loss = kern is not None and "loss" in scores
    others = [a for a in scores if a not in rmia and a not in fused and not (shared_loss and a == "loss")]
    rmia_refs = None
    if rmia and ratios is None:
        rmia_refs = np.empty((m, n)), np.empty((t_count, n)), np.empty((t_count, n))
    zeros = np.zeros(t_count)
    for a0 in starts:
        chunk = source.read(a0, min(n, a0 + block))
        b = a0 + chunk.shape[1]
        keep_blk = np.ascontiguousarray(loo.keep[:, a0:b])  # contiguous: one compiled signature
        lp_blk = means = None
        if kern is not None:
            loss = loss_from_phi(chunk) if rmia or shared_loss else None
            lp_blk = np.empty((m, b - a0) if rmia else (0, 0))
            if rmia:
                p = np.negative(loss)
                kern["view_log_p"](loss, np.exp(p, out=p), lp_blk)
                del p
            means = np.empty((t_count, b - a0)), np.empty((t_count, b - a0))
            kern["score_block"](chunk, keep_blk, loo.targets.astype(np.int64), loo.k_in.astype(np.int64),
                                loo.k_out.astype(np.int64), zeros if sd_in is None else sd_in,
                                zeros if sd_out is None else sd_out, slots, packed, a0, lp_blk, *means)
            if shared_loss:
                np.negative(loo.targets_of(loss).mean(axis=2), out=scores["loss"][:, a0:b])  # −mean: exactly
        if others or (rmia and kern is None):
            lp_np, means_np = _numpy_block(chunk, keep_blk, loo, others, sd_in, sd_out, scores, a0, b,
                                           bool(rmia) and kern is None)
            if kern is None:
                lp_blk, means = lp_np, means_np
        if not rmia:
            continue
        if ratios is not None:
            for name, online in ratios.items():
                np.subtract(loo.targets_of(lp_blk), _rmia_marginal(*means, online, rmia_a), out=scores[name][:, a0:b])
        else:
            lp_all, lmean_in, lmean_out = rmia_refs
            lp_all[:, a0:b], lmean_in[:, a0:b], lmean_out[:, a0:b] = lp_blk, means[0], means[1]
    return scores, rmia_refs


def _numpy_block(phi_blk: np.ndarray, keep_blk: np.ndarray, loo: _LeaveOneOutIndex, names: list[str],
                 sd_in: np.ndarray | None, sd_out: np.ndarray | None, scores: dict[str, np.ndarray], a: int, b: int,
                 rmia: bool) -> tuple[np.ndarray | None, tuple[np.ndarray, np.ndarray] | None]:
    """The plain numpy path on one block: the ``names`` attacks' scores into columns a..b of ``scores``, and
    (``rmia``) the block's view-averaged log p_y [M, B] and the targets' reference means ([T, B] each)."""
    if names:
        view = Block(loo.targets_of(phi_blk), _fits(phi_blk, keep_blk, loo, set(names)), sd_in, sd_out)
        for name in names:
            scores[name][:, a:b] = attack_spec.get(name).stream(view).mean(axis=2)
    if not rmia:
        return None, None
    lp_blk = view_log_mean(-loss_from_phi(phi_blk))
    return lp_blk, (_gathered(lp_blk, keep_blk, loo, True, _log_mean), _gathered(lp_blk, keep_blk, loo, False,
                                                                                  _log_mean))


def _population_log_p(pop_source: PhiSource) -> np.ndarray:
    """View-averaged log p_y [M, P] of the RMIA population points, read in blocks."""
    m, p, v = pop_source.shape
    pop_lp = np.empty((m, p))
    pblock = max(1, WORK_ELEMENTS // max(1, m * v))
    for a in range(0, p, pblock):
        loss = loss_from_phi(pop_source.read(a, min(p, a + pblock)))
        if kernels.available():
            out = np.empty(loss.shape[:2])
            kernels.compiled()["view_log_p"](loss, np.exp(-loss), out)
            pop_lp[:, a : a + pblock] = out
        else:
            pop_lp[:, a : a + pblock] = view_log_mean(-loss)
    return pop_lp


def _population(pop_lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The population's log p_y [M, P] and, row t, its log mean over every model but t [M, P] (every model is
    OUT for a population point, so a target's references are all the others): once per evaluation."""
    means = np.empty(pop_lp.shape)
    if kernels.available():
        kernels.compiled()["population_means"](np.ascontiguousarray(pop_lp), means)
    else:
        for t in range(pop_lp.shape[0]):
            means[t] = _log_mean(np.delete(pop_lp, t, axis=0))
    return pop_lp, means


def _log_mean(log_vals: np.ndarray) -> np.ndarray:
    """log of the mean over axis 0 of exp(log_vals)."""
    return logsumexp(log_vals, axis=0) - np.log(log_vals.shape[0])


def _fits(phi_blk: np.ndarray, keep_blk: np.ndarray, loo: _LeaveOneOutIndex, wanted: set[str]) -> dict[str, np.ndarray]:
    """Each target's leave-one-out medians and spreads [T, B, V] per side, as the wanted attacks need them."""
    fitted, per_example, _, _ = _kinds(wanted)
    out = {}
    for member, tag in ((True, "in"), (False, "out")):
        needs = wanted & attack_spec.needing(tag) & fitted
        if needs:
            out[f"med_{tag}"] = _gathered(phi_blk, keep_blk, loo, member, lambda vals: np.median(vals, axis=0))
        if needs & per_example:  # fixed-variance attacks use the global spread
            out[f"sd_{tag}"] = _gathered(phi_blk, keep_blk, loo, member, lambda vals: np.std(vals, axis=0))
    return out


def _gathered(blk: np.ndarray, keep_blk: np.ndarray, loo: _LeaveOneOutIndex, member: bool, reduce) -> np.ndarray:
    """``reduce`` over each target's references on a side, gathered the oracle's way (every model but the
    target, each example's first k on the side in model order): [T, B, ...] (−inf where it has none, for
    RMIA's log means; never read by a LiRA attack, which needs at least one)."""
    cols = np.arange(blk.shape[1])
    ks = loo.k_in if member else loo.k_out
    out = np.full((len(loo.targets),) + blk.shape[1:], -np.inf)
    for i, target in enumerate(loo.targets):
        if ks[i] < 1:
            continue
        refs = np.array([r for r in range(blk.shape[0]) if r != target], dtype=np.intp)
        side = keep_blk[refs] if member else ~keep_blk[refs]
        out[i] = reduce(blk[refs][first_k_references(side, int(ks[i])), cols])
    return out


def _global_spreads(source: PhiSource, loo: _LeaveOneOutIndex, starts: list[int], block: int, n: int,
                    kern: dict[str, Any] | None) -> tuple[np.ndarray, np.ndarray]:
    """Each target's std over all its IN (OUT) reference values, examples and views (first pass): from sums
    of the values shifted by one constant (the first block's mean, so the variance does not cancel) in the
    kernel, or merged block by block from the gathered references' moments (Chan et al.)."""
    t = len(loo.targets)
    sums = np.zeros((2, 2, t))  # [IN / OUT, Σ / Σ², target]
    acc = {True: _Moments(t), False: _Moments(t)}
    shift = None
    for a in starts:
        b = min(n, a + block)
        phi_blk, keep_blk = source.read(a, b), np.ascontiguousarray(loo.keep[:, a:b])
        if kern is None:
            for member in (True, False):
                mean = _gathered(phi_blk, keep_blk, loo, member, lambda vals: vals.mean(axis=0))
                m2 = _gathered(phi_blk, keep_blk, loo, member, lambda vals: ((vals - vals.mean(axis=0)) ** 2).sum(0))
                acc[member].add(*_block_moments(np.asarray(loo.k_in if member else loo.k_out, float), mean, m2))
            continue
        shift = float(phi_blk.mean()) if shift is None else shift
        kern["global_sums"](phi_blk, keep_blk, loo.targets.astype(np.int64), loo.k_in.astype(np.int64),
                            loo.k_out.astype(np.int64), shift, sums)
    if kern is None:
        return acc[True].std(), acc[False].std()
    spreads = []
    for side, k in ((0, loo.k_in), (1, loo.k_out)):
        count = n * source.shape[2] * k.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            m2 = sums[side, 1] - sums[side, 0] * sums[side, 0] / count
            spreads.append(np.sqrt(np.maximum(m2, 0.0) / count))
    return spreads[0], spreads[1]


def _rmia_marginal(lmean_in: np.ndarray, lmean_out: np.ndarray, online: bool, a: float | None) -> np.ndarray:
    """log p(x) from the reference means: ½(IN + OUT) online, ½((1 + a)·OUT + 1 − a) offline (elementwise)."""
    if online:
        out = np.logaddexp(lmean_in, lmean_out)
        out -= np.log(2.0)
        return out
    with np.errstate(divide="ignore"):
        return np.logaddexp(np.log1p(a) + lmean_out, np.log1p(-a)) - np.log(2.0)


def _rmia_from_ratios(ratios: np.ndarray, keep: np.ndarray, tgt: np.ndarray,
                      pop: tuple[np.ndarray, np.ndarray] | None, online: bool, a: float | None, gamma: float) -> None:
    """Each target's row of log(p(x|θ)/p(x)) [T, N] replaced by its RMIA scores, in place (as :func:`_rmia`)."""
    for i, t in enumerate(tgt):
        ratios[i] = _rmia_row(ratios[i], int(t), keep, pop, online, a, gamma)


def _rmia_row(log_r: np.ndarray, t: int, keep: np.ndarray, pop: tuple[np.ndarray, np.ndarray] | None,
              online: bool, a: float | None, gamma: float) -> np.ndarray:
    """Target t's RMIA scores from its candidates' log(p(x|θ)/p(x)): against the population ``pop``
    (:func:`_population`), or the legacy one (t's non-members)."""
    if pop is None:
        return rmia_scores(log_r, ~keep[t], gamma)
    pop_lp, pop_means = pop
    ref_mean = pop_means[t]  # p(z): the leave-one-out mean over the other models
    pop_marg = ref_mean if online else _rmia_marginal(None, ref_mean, False, a)
    return rmia_scores_against(log_r, pop_lp[t] - pop_marg, gamma)


def _rmia(lp_all: np.ndarray, lmean_in: np.ndarray, lmean_out: np.ndarray, keep: np.ndarray, tgt: np.ndarray,
          pop: tuple[np.ndarray, np.ndarray] | None, online: bool, params: RMIAParams
          ) -> tuple[np.ndarray, list[float] | None]:
    """RMIA scores [T, N] from the reference means; offline a per target (selected when params.a is None)."""
    out = np.empty((len(tgt), lp_all.shape[1]))
    pop_lp = None if pop is None else pop[0]
    chosen: list[float] | None = [] if (not online and params.a is None) else None
    for i, t in enumerate(tgt):
        a = None if online else params.a
        if not online and a is None:
            a, _ = select_offline_a(lp_all, keep, int(t), params.gamma, pop_lp)
            chosen.append(a)
        log_r = lp_all[t] - _rmia_marginal(lmean_in[i], lmean_out[i], online, a)
        out[i] = _rmia_row(log_r, int(t), keep, pop, online, a, params.gamma)
    return out, chosen


__all__ = ["evaluate_stream", "WORK_ELEMENTS"]
