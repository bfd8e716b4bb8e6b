"""Confirmatory runs: every seed derived from the SHA-256 of the analysis plan and of the deciding source.

A verdict is confirmatory only if the data it rests on could not have been seen
when the plan was written. ``bnmem run STUDY --confirmatory`` therefore replaces
the study's seeds by numbers derived from the plan's hash
(:func:`bnmem.analysis_plan.plan_sha256`) and the hash of the source that decides
(:func:`bnmem.provenance.source_sha256`: the claim modules, the statistics, the
measurement modules): the corruption draw, every model seed, LiRA's keep matrix and
query permutation of every replicate, and the seed of a once-per-study lens (the toy
model). Nobody could have run those seeds before the plan's text and that code
existed, and one changed character of either changes all of them. A change is
therefore a re-roll, and it cannot be quiet: a confirmatory start is refused on a
modified checkout and logged (:mod:`bnmem.provenance`), so each re-roll is a
commit and an entry of the attempts log.

The seeds of replicate k depend only on (hash, k), so the cells of one replicate
(flip, OOD, clean; shared and per-norm recipes) share them, as the replicate
offsets of an exploratory run do. study.json records them under
:data:`bnmem.analysis_plan.CONFIRMATORY_KEY`; a rerun under a different plan is
refused (its seeds would differ), and the report calls a run confirmatory only
while the plan that decides is the one its seeds came from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

# Model seeds stay below 2**22: shadow models multiply a base seed by 10**6 and the batch order by ~10**6
# again, and torch seeds must fit in 64 bits.
MODEL_SEED_BOUND = 2**22
# Data, keep-matrix and query seeds: numpy's legacy RandomState (the keep matrix) takes < 2**32.
SEED_BOUND = 2**31
RULE = ("every seed is the SHA-256 of 'bnmem-confirmatory:<plan sha256>:<source sha256>:<role>:<replicate>[:<index>]' "
        "(its first 8 bytes read as a big-endian integer), reduced modulo 2**31 (model seeds 2**22, a collision "
        "rehashed with an attempt counter); the source sha256 is bnmem.provenance.source_sha256")


def seed_key(plan_sha: str, source_sha: str) -> str:
    """The key every confirmatory seed is derived from: ``<plan sha256>:<source sha256>``."""
    return f"{plan_sha}:{source_sha}"


def current_key() -> str:
    """:func:`seed_key` of the current plan and deciding source."""
    from bnmem.analysis_plan import plan_sha256
    from bnmem.provenance import source_sha256

    return seed_key(plan_sha256(), source_sha256())


def derive(sha: str, *parts: object, bound: int = SEED_BOUND) -> int:
    """A seed in [0, bound) from the seed key (:func:`seed_key`) and the seed's role (``parts``)."""
    text = ":".join(["bnmem-confirmatory", sha, *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % bound


@dataclass(frozen=True)
class ReplicateSeeds:
    """Every seed of one replicate of a confirmatory run.

    Attributes:
        data: the corruption draw (``data.seed``).
        models: the model seeds (one per grid seed; BN and its baseline share each, as always).
        keep: LiRA's (and the regularizer's LiRA's) keep-matrix seed.
        query: LiRA's batch-mode query permutation seed.
    """

    data: int
    models: tuple[int, ...]
    keep: int
    query: int

    def lens_seeds(self) -> dict[str, int]:
        """The lens config fields these seeds replace (:data:`bnmem.study.run.REPLICATE_SEED_FIELDS`)."""
        return {"keep_seed": self.keep, "query_seed": self.query}

    def record(self) -> dict[str, Any]:
        """Plain data for study.json."""
        return {"data_seed": self.data, "model_seeds": list(self.models), "keep_seed": self.keep,
                "query_seed": self.query}


def replicate_seeds(sha: str, replicates: int, n_models: int) -> list[ReplicateSeeds]:
    """The seeds of replicates 0..replicates−1; model seeds are distinct across the whole study.

    Adding replicates leaves the earlier ones' seeds unchanged (each is derived in order).
    """
    used: set[int] = set()
    out = []
    for k in range(replicates):
        models = []
        for j in range(n_models):
            attempt = 0
            seed = derive(sha, "model", k, j, bound=MODEL_SEED_BOUND)
            while seed in used:  # a collision would pair a model with itself: rehash
                attempt += 1
                seed = derive(sha, "model", k, j, attempt, bound=MODEL_SEED_BOUND)
            used.add(seed)
            models.append(seed)
        out.append(ReplicateSeeds(derive(sha, "data", k), tuple(models), derive(sha, "keep", k),
                                  derive(sha, "query", k)))
    return out


def study_seed(sha: str, lens: str) -> int:
    """The seed of a once-per-study lens (the toy model's ``seed``)."""
    return derive(sha, "study-lens", lens)


def require_clean_checkout() -> Any:
    """The checkout's :class:`bnmem.provenance.CheckoutState` when a confirmatory run may start from it.

    Raises:
        BnmemError: not a git checkout, or a modified one (one line naming what is modified).
    """
    from bnmem.errors import BnmemError
    from bnmem.provenance import checkout_state

    state = checkout_state()
    why = state.refusal()
    if why:
        raise BnmemError(why)
    return state


def log_attempt(state: Any, record: dict[str, Any], resumed: bool, study: str, out: Any,
                study_file: Any = None, executor: Any = None) -> Any:
    """Append this confirmatory start (or resume) to the attempts log of ``state``'s checkout, before the first job.

    ``record``: study.json's confirmatory record (its plan, source, commit and start time). Returns the log's path.
    """
    from bnmem.provenance import RESUME, START, append_attempt, file_sha256, utc_now

    entry = {
        "kind": RESUME if resumed else START,
        "time": record.get("started") if not resumed else utc_now(),
        "started": record.get("started"),
        "study": study,
        "study_file": None if study_file is None else str(study_file),
        "study_sha256": None if study_file is None else file_sha256(study_file),
        "plan_version": record.get("plan_version"),
        "plan_sha256": record.get("plan_sha256"),
        "source_sha256": record.get("source_sha256"),
        "commit": state.commit,
        "started_at_commit": record.get("commit"),
        "out": str(out),
        "executor": "local" if executor is None else getattr(executor, "name", None),
        "workers": 1 if executor is None else getattr(executor, "workers", None),
    }
    return append_attempt(state.root, entry)
