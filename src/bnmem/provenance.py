"""Provenance of a confirmatory run: the source's hash, the seeds' derivation, the git checkout, the attempts log.

A confirmatory run (``bnmem run --confirmatory``) derives its seeds (:func:`replicate_seeds`, :func:`study_seed`)
from a key (:func:`seed_key`) of the analysis plan's hash, :func:`source_sha256` (the hash of the whole installed
package and the versions of the libraries it computes with), the study's name and the SHA-256 of its study file
and of the resolved study (so two studies never share a data draw). Changing any of them re-rolls every seed; to
make that visible rather than quiet, a confirmatory start

* is refused outside a git checkout and on a modified one (:func:`checkout_state`: tracked files modified, staged
  or not, or untracked files under ``src/``, ``studies/`` or ``docs/analysis-plan.md``), so every seed a
  confirmatory run uses comes from a commit (study.json records it);
* is written to the attempts log (:data:`ATTEMPTS_LOG`, beside the analysis plan, committed with the project)
  before its first job, a resume of the same run directory as a resume, and its end (finished, interrupted,
  failed) when it stops, each with the tree's hash and the host's CPU count and load.

It cannot see an attempt made on another checkout and never committed, nor one run on a fork, nor a preview of the
seeds (they are a public function of file bytes): the log is as complete as the commits it travels with
(docs/verify.md, "What the protocol cannot prevent").

The source hash (:func:`source_sha256`, derivation :data:`SOURCE_DERIVATION`) is SHA-256 over every file under
the ``bnmem`` package but compiled bytecode (``__pycache__``, ``*.pyc``), sorted by their relative POSIX path; each
file contributes ``path``, a NUL byte, its length as 8 big-endian bytes and its bytes, so no two file lists hash
alike; then, for torch, numpy and scipy in that order, ``NUL name=version`` (``name=-`` when not installed). Plan
5.0's runs recorded derivation 1 (:func:`source_sha256_v1`: the files :data:`LEGACY_DECIDING_SOURCES` names).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent
# The source hash's derivation (study.json records it as "source_derivation"; a record without it is 1).
SOURCE_DERIVATION = 2
# The libraries whose resolved versions the source hash covers (what the numbers are computed with).
VERSIONED = ("torch", "numpy", "scipy")
# Derivation 1 (plan 5.0's runs): the hand-kept list of the files that decided a verdict (globs relative to the
# package). Kept so that those runs' recorded hashes stay checkable; derivation 2 hashes every file instead.
LEGACY_DECIDING_SOURCES = (
    "analysis_plan.py",
    "claim_spec.py",
    "plan_history.py",
    "stats.py",
    "report/claims/*.py",
    "measure/*.py",
    "lenses/*.py",
    "lenses/lira/*.py",
    "theory/*.py",
    "attacks/*.py",
)
# Plan 5.0's text (its general section and changelog) names the list by this name.
DECIDING_SOURCES = LEGACY_DECIDING_SOURCES
# The attempts log, relative to the checkout's root: one JSON object per line, appended by every confirmatory
# start (and resume) before its first job and by its end, committed with the project.
ATTEMPTS_LOG = "docs/confirmatory-attempts.jsonl"
# Untracked files under these paths make a checkout modified (a new module or study, or a plan not committed).
WATCHED_UNTRACKED = ("src/", "studies/", "docs/analysis-plan.md")
START, RESUME, END = "start", "resume", "end"
FINISHED, INTERRUPTED, FAILED = "finished", "interrupted", "failed"


def _hash_files(h: Any, package: Path, files: list[Path]) -> None:
    for p in files:
        data = p.read_bytes()
        h.update(p.relative_to(package).as_posix().encode("utf-8") + b"\0" + len(data).to_bytes(8, "big"))
        h.update(data)


def _bytecode(rel: Path) -> bool:
    return "__pycache__" in rel.parts or rel.suffix in (".pyc", ".pyo")


def package_files(package: Path | None = None) -> list[Path]:
    """Every file under ``package`` (default: this bnmem package) but compiled bytecode, sorted by relative path."""
    package = package if package is not None else PACKAGE
    files = [p for p in package.rglob("*") if p.is_file() and not _bytecode(p.relative_to(package))]
    return sorted(files, key=lambda p: p.relative_to(package).as_posix())


def package_versions() -> dict[str, str | None]:
    """The installed versions of :data:`VERSIONED` (None: not installed), read from their metadata (no import)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def files_sha256(package: Path | None = None) -> str:
    """SHA-256 (hex) of the package's files alone (the first part of :func:`source_sha256`)."""
    package = package if package is not None else PACKAGE
    h = hashlib.sha256()
    _hash_files(h, package, package_files(package))
    return h.hexdigest()


def source_sha256(package: Path | None = None, versions: dict[str, str | None] | None = None) -> str:
    """SHA-256 (hex) of the source that computes and decides a run (derivation :data:`SOURCE_DERIVATION`): every
    file of ``package`` (default: this bnmem package) in path order, as path, NUL, length (8 bytes big-endian),
    bytes; then ``NUL name=version`` for each of :data:`VERSIONED` (``versions``: default the installed ones)."""
    package = package if package is not None else PACKAGE
    versions = versions if versions is not None else package_versions()
    h = hashlib.sha256()
    _hash_files(h, package, package_files(package))
    for name in VERSIONED:
        h.update(f"\0{name}={versions.get(name) or '-'}".encode("utf-8"))
    return h.hexdigest()


def source_record(package: Path | None = None) -> dict[str, Any]:
    """What study.json records of the source: its hash, the derivation, the files' own hash and the versions."""
    versions = package_versions()
    return {"source_sha256": source_sha256(package, versions), "source_derivation": SOURCE_DERIVATION,
            "source_files_sha256": files_sha256(package), "versions": versions}


def deciding_files(package: Path | None = None) -> list[Path]:
    """Derivation 1's files: those :data:`LEGACY_DECIDING_SOURCES` names, sorted by their relative path."""
    package = package if package is not None else PACKAGE
    files = {p for pattern in LEGACY_DECIDING_SOURCES for p in package.glob(pattern) if p.is_file()}
    return sorted(files, key=lambda p: p.relative_to(package).as_posix())


def source_sha256_v1(package: Path | None = None) -> str:
    """Derivation 1 of the source hash (plan 5.0's runs): :func:`deciding_files` only, as :func:`source_sha256`
    hashes files, without the versions."""
    package = package if package is not None else PACKAGE
    h = hashlib.sha256()
    _hash_files(h, package, deciding_files(package))
    return h.hexdigest()


def recorded_source_now(record: dict[str, Any], package: Path | None = None) -> str:
    """The current source's hash by the derivation a study.json record used (1 when it names none)."""
    return source_sha256(package) if int(record.get("source_derivation") or 1) >= 2 else source_sha256_v1(package)


# ----------------------------------------------------------------- the seeds of a confirmatory run

# Model seeds stay below 2**22: shadow models multiply a base seed by 10**6 and the batch order by ~10**6
# again, and torch seeds must fit in 64 bits.
MODEL_SEED_BOUND = 2**22
# Data, keep-matrix and query seeds: numpy's legacy RandomState (the keep matrix) takes < 2**32.
SEED_BOUND = 2**31
# The seeds' derivation (study.json records it as "seed_derivation"; a record without it is 1: plan 5.0's runs,
# whose key was the plan's and the source's hash alone, so two studies run from one commit shared their draws).
SEED_DERIVATION = 2
RULE = ("every seed is the SHA-256 of 'bnmem-confirmatory:<key>:<role>:<replicate>[:<index>]' (its first 8 bytes "
        "read as a big-endian integer), reduced modulo 2**31 (model seeds 2**22, a collision rehashed with an attempt "
        "counter); the key is 'v2:<plan sha256>:<source sha256>:<study file sha256>:<resolved study sha256>:<study "
        "name as JSON>' (bnmem.provenance.seed_key; the source sha256 is bnmem.provenance.source_sha256)")
RULE_V1 = ("every seed is the SHA-256 of 'bnmem-confirmatory:<plan sha256>:<source sha256>:<role>:<replicate>"
           "[:<index>]' (its first 8 bytes read as a big-endian integer), reduced modulo 2**31 (model seeds 2**22, a "
           "collision rehashed with an attempt counter); the source sha256 is bnmem.provenance.source_sha256")


def seed_key(plan_sha: str, source_sha: str, study: str | None = None, study_sha: str | None = None,
             resolved_sha: str | None = None) -> str:
    """The key every confirmatory seed is derived from. With a study (derivation 2):
    ``v2:<plan>:<source>:<study file sha256>:<resolved study sha256>:<name as JSON>``; without (derivation 1, plan
    5.0's runs): ``<plan>:<source>``."""
    if study is None:
        return f"{plan_sha}:{source_sha}"
    return f"v2:{plan_sha}:{source_sha}:{study_sha}:{resolved_sha}:{json.dumps(study, ensure_ascii=False)}"


def record_key(record: dict[str, Any]) -> str:
    """The seed key a study.json confirmatory record's seeds were derived from (by its ``seed_derivation``)."""
    if int(record.get("seed_derivation") or 1) < 2:
        return seed_key(str(record.get("plan_sha256")), str(record.get("source_sha256")))
    return seed_key(str(record.get("plan_sha256")), str(record.get("source_sha256")), str(record.get("study")),
                    str(record.get("study_sha256")), str(record.get("resolved_study_sha256")))


def resolved_sha256(resolved: dict[str, Any]) -> str:
    """SHA-256 of a resolved study (study.json without its plan and confirmatory records) as canonical JSON."""
    text = json.dumps(resolved, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


def _git(root: Path, *args: str) -> str | None:
    """``git -C root ARGS`` stdout, or None when git is missing or fails."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def checkout_root() -> Path | None:
    """The root of the git checkout holding the bnmem source (None: not in a git checkout)."""
    out = _git(PACKAGE, "rev-parse", "--show-toplevel")
    return Path(out.strip()) if out and out.strip() else None


@dataclass(frozen=True)
class CheckoutState:
    """A git checkout's commit and what makes it modified.

    Attributes:
        root: the checkout's root (None: not a git checkout).
        commit: ``git rev-parse HEAD`` (None without a commit).
        modified: tracked files with changes, staged or not (paths relative to the root).
        untracked: untracked, not ignored files under :data:`WATCHED_UNTRACKED`.
        log_rewritten: the attempts log lost or changed committed lines (only appending is allowed).
    """

    root: Path | None
    commit: str | None
    modified: tuple[str, ...] = ()
    untracked: tuple[str, ...] = ()
    log_rewritten: bool = False

    def refusal(self) -> str | None:
        """One line saying why a confirmatory run may not start here, or None when it may."""
        if self.root is None:
            return "--confirmatory needs a git checkout of bnmem (its commit is recorded); this source is not in one"
        if self.commit is None:
            return f"--confirmatory needs a commit: {self.root} has none"
        parts = []
        if self.modified:
            parts.append(f"{len(self.modified)} tracked file(s) modified ({_few(self.modified)})")
        if self.untracked:
            parts.append(f"{len(self.untracked)} untracked file(s) under {' or '.join(WATCHED_UNTRACKED)} "
                         f"({_few(self.untracked)})")
        if self.log_rewritten:
            parts.append(f"{ATTEMPTS_LOG} differs from its committed lines (it may only be appended to)")
        if not parts:
            return None
        return ("--confirmatory needs an unmodified checkout, so its seeds come from a commit: "
                + "; ".join(parts) + ": commit or remove them first")


def _few(paths: tuple[str, ...], n: int = 3) -> str:
    return ", ".join(paths[:n]) + (f" and {len(paths) - n} more" if len(paths) > n else "")


def _log_only_appended(root: Path) -> bool:
    """Whether the working copy of the attempts log starts with its committed text (nothing removed)."""
    committed = _git(root, "show", f"HEAD:{ATTEMPTS_LOG}")
    if committed is None:
        return True  # not committed yet: nothing to lose
    try:
        now = (root / ATTEMPTS_LOG).read_text(encoding="utf-8")
    except OSError:
        return False
    return now.startswith(committed)


def checkout_state(root: Path | None = None) -> CheckoutState:
    """The git state of ``root`` (default: :func:`checkout_root`). The attempts log itself may carry appended,
    uncommitted lines (the starts since the last commit); any other change makes the checkout modified."""
    root = root if root is not None else checkout_root()
    if root is None:
        return CheckoutState(None, None)
    head = _git(root, "rev-parse", "--verify", "HEAD")
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    if head is None or status is None:
        return CheckoutState(root, None)
    modified, untracked = [], []
    entries = status.split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            i += 1  # a rename's or copy's source path follows
        if code == "??":
            if path.startswith(WATCHED_UNTRACKED):
                untracked.append(path)
        elif path != ATTEMPTS_LOG:
            modified.append(path)
    return CheckoutState(root, head.strip(), tuple(sorted(modified)), tuple(sorted(untracked)),
                         log_rewritten=not _log_only_appended(root))


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the microsecond (``2026-12-04T10:00:00.123456Z``): a start's time is
    what names it in the attempts log, and two starts can fall in one second (records before 2026-12-04 12:00
    are to the second)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# The run directory's own copy of its attempts-log entries (what a published folder carries).
RUN_ATTEMPTS = "attempts.jsonl"


def append_attempt(root: Path, entry: dict[str, Any], copy: Path | None = None) -> Path:
    """Append one attempt's entry (a JSON object, one line) to ``root``'s attempts log, and to ``copy``'s
    :data:`RUN_ATTEMPTS` when given (a run directory); returns the log's path."""
    path = root / ATTEMPTS_LOG
    line = json.dumps(entry, sort_keys=True, ensure_ascii=False) + "\n"
    for target in (path, *([copy / RUN_ATTEMPTS] if copy is not None else [])):
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    return path


def tree_sha(root: Path | None) -> str | None:
    """The git tree of ``root``'s HEAD (``HEAD^{tree}``: the committed files), None outside a checkout."""
    out = _git(root, "rev-parse", "HEAD^{tree}") if root is not None else None
    return out.strip() if out else None


def read_attempts(root: Path | None = None) -> list[dict[str, Any]]:
    """Every entry of the attempts log (default: this checkout's; [] when there is none). Unreadable lines are
    skipped."""
    root = root if root is not None else checkout_root()
    if root is None:
        return []
    return read_jsonl(root / ATTEMPTS_LOG)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, one a line ([] when it cannot be read; other lines skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def attempts_line(attempts: list[dict[str, Any]], study: str | None, plan_sha: str, started: str | None,
                  log: str = ATTEMPTS_LOG) -> str:
    """One sentence naming the confirmatory attempts of ``study`` under the plan ``plan_sha``: how many starts,
    and which of them this run is (the start whose time is ``started``, study.json's record)."""
    same = [a for a in attempts if a.get("study") == study and a.get("plan_sha256") == plan_sha]
    starts = [a for a in same if a.get("kind") == START]
    resumes = sum(a.get("kind") == RESUME for a in same)
    n = len(starts)
    if not n:
        return (f"Confirmatory attempts ({log}): none recorded for study {study} under this plan in this checkout; "
                "this run's start is not in its log.")
    which = next((i + 1 for i, a in enumerate(starts) if started and a.get("time") == started), None)
    this = (f"this run is start {which} of {n}" if which else "this run's start is not among them")
    more = f", {resumes} resume(s)" if resumes else ""
    return (f"Confirmatory attempts ({log}): {n} start(s) of study {study} under this plan{more}; {this}"
            + (" (every start counts: report them all)." if n > 1 else "."))
