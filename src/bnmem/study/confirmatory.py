"""Confirmatory runs: every seed derived from the SHA-256 of the analysis plan, of the source and of the study.

A verdict is confirmatory only if the data it rests on could not have been seen
when the plan was written. ``bnmem run STUDY --confirmatory`` therefore replaces
the study's seeds by numbers derived from the plan's hash
(:func:`bnmem.analysis_plan.plan_sha256`), the hash of the source
(:func:`bnmem.provenance.source_sha256`: every file of the installed package and the
versions of torch, numpy and scipy) and the study's name and hashes (its file's and
the resolved study's, so two studies never share a draw): the corruption draw, every model seed, LiRA's keep matrix and
query permutation of every replicate, and the seed of a once-per-study lens (the toy
model). Nobody could have run those seeds before the plan's text and that code
existed, and one changed character of either changes all of them. A change is
therefore a re-roll, and it cannot be quiet: a confirmatory start is refused on a
modified checkout and logged (:mod:`bnmem.provenance`), so each re-roll is a
commit and an entry of the attempts log, as is every end (finished, interrupted,
failed). The derivation itself is torch-free and lives in :mod:`bnmem.provenance`
(``bnmem verify`` recomputes it); this module applies it to a study.

The seeds of replicate k depend only on (key, k), so the cells of one replicate
(flip, OOD, clean; shared and per-norm recipes) share them, as the replicate
offsets of an exploratory run do. study.json records them under
:data:`bnmem.analysis_plan.CONFIRMATORY_KEY`; a rerun under a different plan is
refused (its seeds would differ), and the report calls a run confirmatory only
while the plan that decides is the one its seeds came from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bnmem.provenance import (  # noqa: F401 - the derivation, importable from here as before
    MODEL_SEED_BOUND, RULE, SEED_BOUND, SEED_DERIVATION, ReplicateSeeds, derive, replicate_seeds, resolved_sha256,
    seed_key, study_seed,
)


def study_hashes(study: Any, study_file: str | Path | None = None) -> tuple[str, str]:
    """(study file sha256, resolved study sha256) of a validated study; without a file (a study built in code) the
    first is the resolved study's too."""
    from bnmem.provenance import file_sha256

    resolved = resolved_sha256(study.model_dump(mode="json", by_alias=True))
    return (file_sha256(study_file) if study_file is not None else resolved), resolved


def current_key(study: Any = None, study_file: str | Path | None = None) -> str:
    """:func:`seed_key` of the current plan, source and ``study`` (its name and hashes; ``study_file``: its YAML).
    Without a study, the key of derivation 1 (plan 5.0's, kept for its records)."""
    from bnmem.analysis_plan import plan_sha256
    from bnmem.provenance import source_sha256

    if study is None:
        return seed_key(plan_sha256(), source_sha256())
    file_sha, resolved = study_hashes(study, study_file)
    return seed_key(plan_sha256(), source_sha256(), study.name, file_sha, resolved)


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


def host() -> dict[str, Any]:
    """The host's CPU count and load average (1, 5, 15 minutes; None where the system has none)."""
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return {"cpus": os.cpu_count(), "load": load}


def log_attempt(state: Any, record: dict[str, Any], resumed: bool, study: str, out: Any,
                study_file: Any = None, executor: Any = None, lenses: list[str] | None = None) -> Any:
    """Append this confirmatory start (or resume) to the attempts log of ``state``'s checkout, before the first job,
    and to the run's own copy (``out/attempts.jsonl``).

    ``record``: study.json's confirmatory record (its plan, source, commit and start time). Returns the entry.
    """
    from bnmem.provenance import RESUME, START, append_attempt, file_sha256, tree_sha, utc_now

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
        "seed_derivation": record.get("seed_derivation"),
        "commit": state.commit,
        "tree": tree_sha(state.root),
        "started_at_commit": record.get("commit"),
        "out": str(out),
        "executor": "local" if executor is None else getattr(executor, "name", None),
        "workers": 1 if executor is None else getattr(executor, "workers", None),
        "lenses": lenses,  # which claims its verdicts bear on (a later study's report counts the chances)
        **host(),
    }
    append_attempt(state.root, entry, copy=Path(out))
    return entry


def log_end(state: Any, began: dict[str, Any], reason: str, seconds: float, jobs: int | None = None,
            failed: int | None = None, error: str | None = None) -> dict[str, Any]:
    """Append the end of the attempt ``began`` (:func:`log_attempt`'s entry) to the attempts log and the run's copy:
    ``reason`` finished, interrupted or failed, the wall seconds, the tree's hash and whether the checkout is still
    unmodified, and the host's CPU count and load at the end."""
    from bnmem.provenance import END, append_attempt, checkout_state, tree_sha, utc_now

    now = checkout_state(state.root)
    entry = {
        "kind": END, "reason": reason, "time": utc_now(), "started": began.get("started"),
        "attempt": began.get("time"), "study": began.get("study"), "plan_sha256": began.get("plan_sha256"),
        "source_sha256": began.get("source_sha256"), "commit": now.commit, "tree": tree_sha(state.root),
        "unmodified": now.refusal() is None, "out": began.get("out"), "seconds": round(seconds, 1),
        **({"jobs": jobs} if jobs is not None else {}), **({"failed": failed} if failed is not None else {}),
        **({"error": error} if error else {}), **host(),
    }
    append_attempt(state.root, entry, copy=Path(str(began.get("out"))))
    return entry
