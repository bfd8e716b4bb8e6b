"""One declaration per attack: :class:`AttackSpec`, and the registry every reader of attack names uses.

An attack is declared once, here for the built-ins or in its own module for any
other (:func:`register`): its name, the label tables and the audit print, which
reference models it needs (IN / OUT, and which spread of them), its two scorers
(the in-memory oracle's per-target one and the streaming evaluator's per-block
one) and where it is shown. The evaluators (:mod:`bnmem.attacks.evaluate`,
:mod:`bnmem.attacks.streaming`), the request checks (:mod:`bnmem.attacks.result`),
the lira lens's printed table, the report's tables and claims' labels, and the
audit's membership section read this registry; none keeps a list of its own.
Each spec also names the roles it plays (:data:`ROLES`: the audit's headline, the
defenses and mitigate lenses' attacks, the ε table, the jackknife, claim 3's
verdicts, the paper's primary attack, exposure.csv's likelihood ratio), and every
reader of such a subset asks :func:`playing` / :func:`the`.
So adding an attack, a headline one included, is one module (a function over φ,
its spec with its roles and ``register(spec)``) plus its test.

RMIA reads the models' log p_y and a population, not φ's reference fits: its two
entries have ``family="rmia"`` and the evaluators' RMIA path scores them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numpy as np
from scipy.special import log_ndtr

from bnmem.attacks.lira import STD_EPS, global_threshold, lira_offline, lira_online, loss_attack, standard_logpdf
from bnmem.attacks.scores import loss_from_phi
from bnmem.errors import BnmemError

# Where an attack is shown (AttackSpec.shown).
LENS_TABLE = "lens-table"  # the lira lens's printed table (its command, the study log)
REPORT_TABLE = "report-table"  # the report's membership-inference table
AUDIT = "audit"  # bnmem audit's membership section (evaluated and shown)

# The roles an attack plays (AttackSpec.roles): each reader of a subset of attacks asks the registry
# (:func:`playing`, in rank order, or :func:`the` for a role exactly one attack plays) instead of keeping a list.
HEADLINE = "headline"  # the audit's headline: pooled leakage per group, the CI gate, the membership curves
DEFENSES = "defenses"  # evaluated on every variant of the defenses lens (its results, ε audit, one AUC column each)
MITIGATION = "mitigation"  # carried into the mitigate lens's results, one AUC column each (``short_label``)
FIGURE = "figure"  # drawn on the mitigate lens's privacy–utility figure (``marker``, ``figure_label``)
EPSILON = "epsilon"  # a row of the report's ε_lb table
JACKKNIFE = "jackknife"  # the lira lens's jackknife over shadow models, by default
VERDICT = "verdict"  # claim 3: each gets a verdict (the analysis plan's coverdicts name the same attacks)
PRIMARY = "primary"  # exactly one: the paper's attack (decides claim 3; row 3c's matched-fit operating point;
#                      the mitigate and defenses lenses' reference LiRA)
EXPOSURE = "exposure"  # exactly one: its log Λ is exposure.csv's per-example likelihood ratio
ROLES = (HEADLINE, DEFENSES, MITIGATION, FIGURE, EPSILON, JACKKNIFE, VERDICT, PRIMARY, EXPOSURE)


@dataclass
class TargetRefs:
    """What the oracle's scorer sees for one target: its φ [n, V] and loss [n, V], and its reference models'
    φ with each example's IN / OUT references picked (gathered on first use)."""

    phi_t: np.ndarray
    loss_t: np.ndarray
    phi_refs: np.ndarray
    idx_in: np.ndarray
    idx_out: np.ndarray

    @cached_property
    def phi_in(self) -> np.ndarray:
        """[k_in, n, V]: each example's IN references' φ."""
        return self.phi_refs[self.idx_in, np.arange(self.phi_refs.shape[1])]

    @cached_property
    def phi_out(self) -> np.ndarray:
        """[k_out, n, V]: each example's OUT references' φ."""
        return self.phi_refs[self.idx_out, np.arange(self.phi_refs.shape[1])]


@dataclass
class Block:
    """What the streaming scorer sees for one block of examples: the targets' φ ``x`` [T, B, V] and the
    leave-one-out fits of their references (``fits["med_in"|"sd_in"|"med_out"|"sd_out"]`` [T, B, V], as the
    spec's needs ask) and, for ``spread="global"``, each target's global spreads ``sd_in`` / ``sd_out`` [T]."""

    x: np.ndarray
    fits: dict[str, np.ndarray]
    sd_in: np.ndarray | None
    sd_out: np.ndarray | None
    _cache: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)

    def scale(self, side: str, fixed: bool) -> np.ndarray:
        """The reference Gaussian's scale on ``side`` (``"in"`` / ``"out"``): the spread plus STD_EPS,
        [T, B, V] per example or [T, 1, 1] global (``fixed``); computed once per block and shared."""
        return self._shared(("scale", side, fixed), lambda: (
            getattr(self, f"sd_{side}")[:, None, None] if fixed else self.fits[f"sd_{side}"]) + STD_EPS)

    def standardized(self, side: str, fixed: bool) -> np.ndarray:
        """(x − median) / scale on ``side`` [T, B, V], shared by the online and offline scorers (the offline
        argument −(x − median) / scale is its negation, bit for bit: IEEE division is sign-symmetric)."""
        return self._shared(("z", side, fixed), lambda: np.divide(self.deviation(side), self.scale(side, fixed)))

    def deviation(self, side: str) -> np.ndarray:
        """x − median on ``side`` [T, B, V] (per-example and fixed-variance scorers share it)."""
        return self._shared(("d", side), lambda: self.x - self.fits[f"med_{side}"])

    def _shared(self, key: tuple, make: Callable[[], np.ndarray]) -> np.ndarray:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @cached_property
    def loss(self) -> np.ndarray:
        """[T, B, V] the targets' cross-entropy −log p_y = softplus(−φ), computed once per block (the loss
        attack and RMIA's log p_y both read it)."""
        return loss_from_phi(self.x)


@dataclass(frozen=True)
class AttackSpec:
    """The declaration of one attack.

    Attributes:
        name: its key in every results file (``metrics[name][subset]``).
        label: how tables, claims and the audit name it.
        needs_in, needs_out: needs at least one IN (OUT) reference model per example.
        spread: which spread of the references it reads: ``"per_example"`` (each example's
            leave-one-out spread), ``"global"`` (the target's spread over all examples: fixed
            variance) or ``"none"``.
        oracle: ``oracle(TargetRefs) -> scores [n]`` (mean over views; higher = member).
        stream: ``stream(Block) -> scores [T, B, V]`` (the streaming evaluator averages the views).
        family: ``"lira"`` (scored by ``oracle`` / ``stream``) or ``"rmia"`` (the evaluators' RMIA path).
        default: evaluated when no attack list is given (the lira lens's results); False: opt-in.
        shown: where it is shown (:data:`LENS_TABLE`, :data:`REPORT_TABLE`, :data:`AUDIT`).
        rank: its place where it is shown and among the attacks playing a role (lower first;
            registration order breaks ties). Evaluation and results files follow registration order.
        roles: the roles it plays (:data:`ROLES`: :data:`HEADLINE`, :data:`EXPOSURE`, ...).
        short_label: its column head where a table names it briefly (``"LiRA"``; the mitigate and defenses
            tables).
        marker, figure_label: its matplotlib marker and its name in the privacy–utility figure's title
            (:data:`FIGURE`).
    """

    name: str
    label: str
    needs_in: bool = False
    needs_out: bool = False
    spread: str = "none"
    oracle: Callable[[TargetRefs], np.ndarray] | None = None
    stream: Callable[[Block], np.ndarray] | None = None
    family: str = "lira"
    default: bool = True
    shown: frozenset[str] = field(default_factory=frozenset)
    rank: int = 100
    roles: frozenset[str] = field(default_factory=frozenset)
    short_label: str = ""
    marker: str = ""
    figure_label: str = ""


_REGISTRY: dict[str, AttackSpec] = {}


def register(spec: AttackSpec, *, replace: bool = False) -> AttackSpec:
    """Add ``spec`` to the registry (after the ones already there) and return it.

    Raises:
        BnmemError: the name is taken and ``replace`` is False, or the spec is incomplete.
    """
    if spec.name in _REGISTRY and not replace:
        raise BnmemError(f"an attack named {spec.name!r} is already registered; pass replace=True to replace it")
    if spec.family == "lira" and (spec.oracle is None or spec.stream is None):
        raise BnmemError(f"attack {spec.name!r} needs both an oracle and a streaming scorer")
    if spec.spread not in ("none", "per_example", "global"):
        raise BnmemError(f"attack {spec.name!r}: spread must be none, per_example or global, not {spec.spread!r}")
    if unknown := set(spec.roles) - set(ROLES):
        raise BnmemError(f"attack {spec.name!r}: unknown role(s) {', '.join(sorted(unknown))}; "
                         f"roles are {', '.join(ROLES)}")
    if FIGURE in spec.roles and not (spec.marker and spec.figure_label):
        raise BnmemError(f"attack {spec.name!r} plays {FIGURE!r} and needs a marker and a figure_label")
    if (tabled := spec.roles & {MITIGATION, DEFENSES}) and not spec.short_label:
        raise BnmemError(f"attack {spec.name!r} plays {' and '.join(sorted(tabled))!r} and needs a short_label")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove an attack (tests register toy attacks and clean up after themselves)."""
    _REGISTRY.pop(name, None)


def get(name: str) -> AttackSpec:
    """The spec of attack ``name``.

    Raises:
        BnmemError: no attack by that name.
    """
    if name not in _REGISTRY:
        raise BnmemError(f"unknown attack {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


def available() -> tuple[str, ...]:
    """Every registered attack, in registration order."""
    return tuple(_REGISTRY)


def default_attacks() -> tuple[str, ...]:
    """The attacks evaluated when no list is given."""
    return tuple(n for n, s in _REGISTRY.items() if s.default)


def shown_in(where: str) -> tuple[str, ...]:
    """The attacks shown in ``where`` (:data:`LENS_TABLE`, :data:`REPORT_TABLE`, :data:`AUDIT`), in order."""
    return tuple(s.name for s in sorted(_REGISTRY.values(), key=lambda s: s.rank) if where in s.shown)


def playing(role: str) -> tuple[str, ...]:
    """The attacks that play ``role`` (one of :data:`ROLES`), in rank order (registration order breaks ties)."""
    if role not in ROLES:
        raise BnmemError(f"unknown attack role {role!r}; roles are {', '.join(ROLES)}")
    return tuple(s.name for s in sorted(_REGISTRY.values(), key=lambda s: s.rank) if role in s.roles)


def the(role: str) -> str:
    """The one attack that plays ``role`` (:data:`PRIMARY`, :data:`EXPOSURE`).

    Raises:
        BnmemError: none or several attacks play it.
    """
    names = playing(role)
    if len(names) != 1:
        raise BnmemError(f"exactly one attack must play the role {role!r}; "
                         f"{'none does' if not names else 'these do: ' + ', '.join(names)}")
    return names[0]


def needing(side: str) -> frozenset[str]:
    """The attacks that need at least one ``side`` (``"in"`` / ``"out"``) reference per example."""
    return frozenset(n for n, s in _REGISTRY.items() if (s.needs_in if side == "in" else s.needs_out))


def label(name: str) -> str:
    """The attack's label (its name when unknown: an older results file)."""
    spec = _REGISTRY.get(name)
    return spec.label if spec is not None else name


class _Labels(Mapping[str, str]):
    """Attack name -> label, read from the registry at each lookup (so a later registration is seen)."""

    def __getitem__(self, name: str) -> str:
        if name not in _REGISTRY:
            raise KeyError(name)
        return _REGISTRY[name].label

    def __iter__(self) -> Iterator[str]:
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)


# Every attack's label, for code that names attacks through a mapping (claims, the audit).
LABELS: Mapping[str, str] = _Labels()


def _online(fixed: bool) -> Callable[[Block], np.ndarray]:
    # gaussian_logpdf(x, med_in, scale_in) − gaussian_logpdf(x, med_out, scale_out), from the block's shared
    # standardized values (the same operations, bit for bit).
    def score(b: Block) -> np.ndarray:
        out = standard_logpdf(b.standardized("in", fixed), np.log(b.scale("in", fixed)))
        out -= standard_logpdf(b.standardized("out", fixed), np.log(b.scale("out", fixed)))
        return out
    return score


def _offline(fixed: bool) -> Callable[[Block], np.ndarray]:
    # −log_ndtr(−(x − med_out) / scale_out), with (x − med_out) / scale_out shared with the online scorer.
    def score(b: Block) -> np.ndarray:
        out = log_ndtr(np.negative(b.standardized("out", fixed)))
        return np.negative(out, out=out)
    return score


_BOTH = frozenset({LENS_TABLE, REPORT_TABLE, AUDIT})
for _spec in (
    AttackSpec("online", "online LiRA", True, True, "per_example",
               lambda r: lira_online(r.phi_t, r.phi_in, r.phi_out), _online(False), shown=_BOTH, rank=0,
               roles=frozenset({HEADLINE, DEFENSES, MITIGATION, FIGURE, EPSILON, JACKKNIFE, VERDICT, PRIMARY}),
               short_label="LiRA", marker="o", figure_label="LiRA online"),
    AttackSpec("online_fixed_variance", "online LiRA, fixed variance", True, True, "global",
               lambda r: lira_online(r.phi_t, r.phi_in, r.phi_out, fix_variance=True), _online(True),
               shown=frozenset({LENS_TABLE, REPORT_TABLE}), rank=1, roles=frozenset({EXPOSURE})),
    AttackSpec("offline", "offline LiRA", False, True, "per_example",
               lambda r: lira_offline(r.phi_t, r.phi_out), _offline(False), shown=_BOTH, rank=2,
               roles=frozenset({JACKKNIFE, VERDICT})),
    AttackSpec("offline_fixed_variance", "offline LiRA, fixed variance", False, True, "global",
               lambda r: lira_offline(r.phi_t, r.phi_out, fix_variance=True), _offline(True),
               shown=frozenset({REPORT_TABLE}), rank=3),
    AttackSpec("global_threshold", "global threshold on φ", oracle=lambda r: global_threshold(r.phi_t),
               stream=lambda b: b.x, shown=frozenset({REPORT_TABLE}), rank=6),
    AttackSpec("loss", "loss threshold", oracle=lambda r: loss_attack(r.loss_t),
               stream=lambda b: -b.loss, shown=_BOTH, rank=5, roles=frozenset({EPSILON})),
    AttackSpec("rmia", "RMIA", True, True, family="rmia", shown=_BOTH, rank=4,
               roles=frozenset({HEADLINE, DEFENSES, MITIGATION, FIGURE, EPSILON, JACKKNIFE, VERDICT}),
               short_label="RMIA", marker="s", figure_label="RMIA"),
    # Opt-in: RMIA with the offline setting, next to "rmia" (which uses rmia_params).
    AttackSpec("rmia_offline", "RMIA, offline", False, True, family="rmia", default=False, rank=7),
):
    register(_spec)
