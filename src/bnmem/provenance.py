"""Provenance of a confirmatory run: the deciding source's hash, the git checkout, the attempts log.

A confirmatory run (``bnmem run --confirmatory``) derives its seeds from the analysis plan's hash and
:func:`source_sha256`, the hash of the source that decides its verdicts: the claim modules, the
statistics and the measurement modules the claims read (:data:`DECIDING_SOURCES`). Changing either
re-rolls every seed; to make that visible rather than quiet, a confirmatory start

* is refused outside a git checkout and on a modified one (:func:`checkout_state`: tracked files
  modified, or untracked files under ``src/`` or ``studies/``), so every seed a confirmatory run uses comes
  from a commit (study.json records it);
* is appended to the attempts log (:data:`ATTEMPTS_LOG`, beside the analysis plan, committed with the
  project) before its first job, a resume of the same run directory as a resume.

It cannot see an attempt made on another checkout and never committed, nor one run on a fork: the log is
as complete as the commits it travels with.

The source hash (:func:`source_sha256`) is SHA-256 over the files :data:`DECIDING_SOURCES` names (globs
relative to the ``bnmem`` package), sorted by their relative POSIX path; each file contributes
``path``, a NUL byte, its length as 8 big-endian bytes and its bytes, so no two file lists hash alike.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent
# The source that decides a verdict (globs relative to the bnmem package): the claim rules, the statistics and
# the plan, and the measurement modules the claims read (measurements, lenses, the toy model of claim 5,
# attacks). One place: the seeds, study.json, the attempts log and the report all use this list.
DECIDING_SOURCES = (
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
# The attempts log, relative to the checkout's root: one JSON object per line, appended by every confirmatory
# start (and resume) before its first job, committed with the project.
ATTEMPTS_LOG = "docs/confirmatory-attempts.jsonl"
# Untracked files under these folders make a checkout modified (a new module or study would run uncommitted).
WATCHED_UNTRACKED = ("src/", "studies/")
START, RESUME = "start", "resume"


def deciding_files(package: Path | None = None) -> list[Path]:
    """The files :data:`DECIDING_SOURCES` names, sorted by their path relative to ``package`` (default: this
    bnmem package)."""
    package = package if package is not None else PACKAGE
    files = {p for pattern in DECIDING_SOURCES for p in package.glob(pattern) if p.is_file()}
    return sorted(files, key=lambda p: p.relative_to(package).as_posix())


def source_sha256(package: Path | None = None) -> str:
    """SHA-256 (hex) of the deciding source: per file, in path order, its relative path, NUL, its length (8 bytes
    big-endian) and its bytes (``package``: default this bnmem package)."""
    package = package if package is not None else PACKAGE
    h = hashlib.sha256()
    for p in deciding_files(package):
        data = p.read_bytes()
        h.update(p.relative_to(package).as_posix().encode("utf-8") + b"\0" + len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


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


def append_attempt(root: Path, entry: dict[str, Any]) -> Path:
    """Append one attempt (a JSON object, one line) to ``root``'s attempts log; returns the log's path."""
    path = root / ATTEMPTS_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(entry, sort_keys=True, ensure_ascii=False) + "\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
    return path


def read_attempts(root: Path | None = None) -> list[dict[str, Any]]:
    """Every entry of the attempts log (default: this checkout's; [] when there is none). Unreadable lines are
    skipped."""
    root = root if root is not None else checkout_root()
    if root is None:
        return []
    try:
        text = (root / ATTEMPTS_LOG).read_text(encoding="utf-8")
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
