"""``bnmem verify DIR``: recompute every verdict of a run or published folder, and check what it rests on.

From the folder alone (its deciding table, summary.csv, study.json, attempts.jsonl) and the installed plan:

* **claims**: the deciding table (:mod:`bnmem.report.deciding`) rebuilt into a run and decided by the same rule
  modules the report uses (:func:`bnmem.report.claims.evaluate_claims`); each claim's row (:data:`COMPARED`
  columns of summary.csv, as the report writes them) against the published one;
* **plan**: the installed plan's hash against study.json's, and the plan text at the recorded commit
  (``git show COMMIT:docs/analysis-plan.md``) against it, where the repository is there;
* **source**: the package's files at the recorded commit against the recorded files' hash (a mismatch), and
  the installed source's hash (by the derivation the run recorded) against study.json's: when they differ, later
  code is recomputing the run, which verify says (not checked) rather than fails on;
* **seeds**: every replicate's seeds (and the study-wide lens seeds) against their derivation from the recorded
  key (:func:`bnmem.provenance.record_key`), the resolved study against its recorded hash, and each cell's model
  seeds in the table against its replicate's;
* **attempts**: the attempts log holds the run's start and an end record.

Each check says ``ok``, ``MISMATCH`` (naming what differs) or ``not checked`` (and why: no git, not a
confirmatory run). Reading a folder imports no torch (the report's contract). The exit status is
:data:`EXIT_OK`, :data:`EXIT_MISMATCH` or :data:`EXIT_NO_TABLE` (a folder written before the deciding table
existed: its verdicts cannot be recomputed from it, and verify says so instead of passing it).
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnmem.errors import BnmemError
from bnmem.names import SELECTED_RECIPES_KEY, STUDY_FILE, SUMMARY_CSV

EXIT_OK, EXIT_MISMATCH, EXIT_NO_TABLE = 0, 1, 3
OK, MISMATCH, NOT_CHECKED = "ok", "MISMATCH", "not checked"
# The summary.csv columns a recomputed claim must reproduce: everything its verdict is (the status, the number
# and interval it shows, the level, the robustness agreement, the co-verdicts, the previous plan's verdict).
COMPARED = ("status", "value", "ci_low", "ci_high", "ci_level", "vs_paper", "agreement", "agreement_magnitude",
            "coverdicts", "previous_status", "where", "held_fixed", "power_check")
# The columns of a robustness-panel row (plan 6.0) a recomputation must reproduce.
PANEL_COMPARED = ("status", "value", "ci_low", "ci_high", "where")
VERDICT_ROLE, ROBUSTNESS_ROLE = "verdict", "robustness"  # summary.csv's role column (bnmem.report.summary)
PLAN_FILE = "docs/analysis-plan.md"
PACKAGE_DIR = "src/bnmem"


@dataclass
class Check:
    """One line of the verification: what, its outcome (:data:`OK`, :data:`MISMATCH`, :data:`NOT_CHECKED`), why."""

    name: str
    outcome: str
    text: str

    def line(self, width: int = 8) -> str:
        return f"  {self.name:<{width}}  {self.outcome}: {self.text}"


@dataclass
class Verification:
    """Everything :func:`verify` found."""

    root: Path
    header: str
    claims: list[Check] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    table: Path | None = None

    @property
    def mismatches(self) -> list[Check]:
        return [c for c in (*self.claims, *self.checks) if c.outcome == MISMATCH]

    @property
    def exit_code(self) -> int:
        if self.mismatches:
            return EXIT_MISMATCH
        return EXIT_OK if self.table is not None else EXIT_NO_TABLE

    def text(self) -> str:
        from bnmem.report.deciding import DECIDING_CSV

        lines = [self.header]
        if self.table is None:
            lines.append(f"claims: NOT RECOMPUTED: {self.root} holds no deciding table ({DECIDING_CSV}); it was "
                         "written before bnmem wrote one (or its report was never built), so its verdicts cannot be "
                         "recomputed from the folder and are taken on trust")
        else:
            lines.append(f"claims (recomputed from {self.table.name} by the installed rules, vs {SUMMARY_CSV}):")
            width = max((len(c.name) for c in self.claims), default=2)
            lines += [c.line(width) for c in self.claims]
        lines.append("checks:")
        lines += [c.line() for c in self.checks]
        bad = self.mismatches
        if bad:
            lines.append(f"verify: {len(bad)} mismatch(es): " + "; ".join(f"{c.name}: {c.text}" for c in bad))
        elif self.table is None:
            lines.append("verify: no deciding table: the verdicts were not recomputed (exit 3)")
        else:
            lines.append("verify: every verdict recomputed equals the published one; no check failed")
        return "\n".join(lines) + "\n"


# ----------------------------------------------------------------- the claims


def _published(root: Path) -> tuple[dict[str, dict[str, str]], dict[tuple[str, str], dict[str, str]]] | None:
    """summary.csv's verdict rows by claim id, and its robustness-panel rows (plan 6.0) by (claim id, estimand);
    a summary.csv from before the panel has verdict rows only."""
    path = root / SUMMARY_CSV
    if not path.is_file():
        return None
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        verdicts = {r["id"]: r for r in rows if r.get("role") in (None, "", VERDICT_ROLE)}
        panel = {(r["id"], r["estimand"]): r for r in rows if r.get("role") == ROBUSTNESS_ROLE}
    except (OSError, csv.Error, KeyError) as e:
        raise BnmemError(f"{path}: unreadable ({e.__class__.__name__}: {e})") from e
    return verdicts, panel


def _short(v: str, n: int = 60) -> str:
    return v if len(v) <= n else v[:n - 1] + "…"


def _differences(mine: dict[str, str], theirs: dict[str, str], columns: tuple[str, ...] = COMPARED) -> list[str]:
    out = []
    for col in columns:
        a, b = mine.get(col, ""), theirs.get(col, "")
        if col not in theirs or a == b:
            continue
        out.append(f"{col}: recomputed {_short(a)!r}, published {_short(b)!r}")
    return out


def _claim_checks(root: Path, run: Any) -> list[Check]:
    from bnmem.report.claims import evaluate_claims
    from bnmem.report.summary import claim_rows, panel_rows

    read = _published(root)
    published, panel = read if read is not None else (None, {})
    try:
        claims = evaluate_claims(run)
        rows, mine_panel = claim_rows(claims), panel_rows(claims)
    except Exception as e:  # a damaged table (a string where a number was): no verdict, and say where it failed
        return [Check("claims", MISMATCH, f"the rules cannot decide from this table ({e.__class__.__name__}: "
                                          f"{_short(str(e), 200)})")]
    out = []
    for row in rows:
        shown = row["status"] + ("" if not row["value"] else f"  {row['value']}" + (
            f" [{row['ci_low']}, {row['ci_high']}]" if row["ci_low"] else ""))
        theirs = None if published is None else published.get(row["id"])
        if theirs is None:
            why = f"no {SUMMARY_CSV}" if published is None else f"no row {row['id']} in {SUMMARY_CSV}"
            out.append(Check(row["id"], MISMATCH if published is not None and row["status"] != "not run"
                             else NOT_CHECKED, f"recomputed {shown}; {why}"))
            continue
        diffs = _differences(row, theirs)
        mine = [r for r in mine_panel if r["id"] == row["id"]]
        if panel:  # plan 6.0's robustness panel: every row of this claim's, recomputed
            for r in mine:
                other = panel.get((r["id"], r["estimand"]))
                diffs += ([f"panel {r['estimand']!r}: not published"] if other is None else
                          [f"panel {r['estimand']!r}: {d}" for d in _differences(r, other, PANEL_COMPARED)])
            keys = {r["estimand"] for r in mine}
            diffs += [f"panel {e!r}: published, not recomputed" for (cid, e) in panel if cid == row["id"]
                      and e not in keys]
        out.append(Check(row["id"], MISMATCH if diffs else OK,
                         "; ".join(diffs) if diffs else f"{shown} (= published)" +
                         (f"; its {len(mine)} robustness-panel rows equal too" if panel else "")))
    for cid in (published or {}):
        if cid not in {r["id"] for r in rows}:
            out.append(Check(cid, MISMATCH, f"published {published[cid]['status']}, not recomputed (no such claim in "
                                            "the installed plan)"))
    return out


# ----------------------------------------------------------------- git


def _git_bytes(repo: Path, *args: str) -> bytes | None:
    import subprocess

    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _has_commit(repo: Path | None, commit: str | None) -> str | None:
    """Why ``commit`` cannot be read in ``repo`` (None: it can)."""
    if repo is None:
        return "no git repository (run verify inside a checkout of bnmem, or pass --repo)"
    if _git_bytes(repo, "rev-parse", "--git-dir") is None:
        return f"no git ({repo} is not a git checkout, or git is not installed)"
    if not commit:
        return "no commit recorded"
    if _git_bytes(repo, "cat-file", "-e", f"{commit}^{{commit}}") is None:
        return f"commit {commit[:12]} is not in {repo}'s history (a shallow clone?)"
    return None


def files_sha256_at(repo: Path, commit: str, package: str = PACKAGE_DIR) -> str | None:
    """:func:`bnmem.provenance.files_sha256` of the package as committed at ``commit`` (None: not readable)."""
    listing = _git_bytes(repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", package)
    if listing is None:
        return None
    entries = []
    for item in listing.split(b"\0"):
        if not item:
            continue
        meta, path = item.split(b"\t", 1)
        mode, kind, blob = meta.split(b" ")
        rel = path.decode("utf-8")[len(package) + 1:]
        parts = rel.split("/")
        if kind != b"blob" or "__pycache__" in parts or rel.endswith((".pyc", ".pyo")):
            continue
        entries.append((rel, blob.decode()))
    h = hashlib.sha256()
    for rel, blob in sorted(entries):
        data = _git_bytes(repo, "cat-file", "blob", blob)
        if data is None:
            return None
        h.update(rel.encode("utf-8") + b"\0" + len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


# ----------------------------------------------------------------- the checks


def _plan_checks(doc: dict[str, Any], conf: dict[str, Any] | None, repo: Path | None) -> list[Check]:
    from bnmem.analysis_plan import PLAN_VERSION, RECORD_KEY, plan_sha256

    rec = doc.get(RECORD_KEY) if isinstance(doc.get(RECORD_KEY), dict) else {}
    recorded = rec.get("sha256")
    out = []
    now = plan_sha256()
    if not recorded:
        out.append(Check("plan", MISMATCH, f"{STUDY_FILE} records no plan: nothing says which plan decides"))
        return out
    if conf is not None and conf.get("plan_sha256") != recorded:
        out.append(Check("plan", MISMATCH, f"{STUDY_FILE}'s confirmatory record names plan {conf.get('plan_sha256')}, "
                                           f"its plan record {recorded}"))
    if now == recorded:
        out.append(Check("plan", OK, f"the installed plan {PLAN_VERSION} is the run's (sha256 {now[:12]}…)"))
    else:
        out.append(Check("plan", MISMATCH, f"the installed plan {PLAN_VERSION} (sha256 {now[:12]}…) is not the run's "
                                           f"{rec.get('version')} ({str(recorded)[:12]}…): the verdicts recomputed "
                                           "here are decided by another plan; install the run's commit"))
    commit = (conf or {}).get("commit")
    why = "exploratory run: no commit recorded" if conf is None else _has_commit(repo, commit)
    if why:
        out.append(Check("plan", NOT_CHECKED, f"the plan text at the run's commit: {why}"))
        return out
    assert repo is not None and commit
    text = _git_bytes(repo, "show", f"{commit}:{PLAN_FILE}")
    if text is None:
        out.append(Check("plan", MISMATCH, f"commit {commit[:12]} has no {PLAN_FILE}"))
        return out
    at = hashlib.sha256(text).hexdigest()
    if at == recorded:
        out.append(Check("plan", OK, f"{PLAN_FILE} at commit {commit[:12]} hashes to the recorded sha256"))
    else:
        out.append(Check("plan", MISMATCH, f"{PLAN_FILE} at commit {commit[:12]} hashes to {at[:12]}…, "
                                           f"{STUDY_FILE} records {str(recorded)[:12]}…"))
    return out


def _source_checks(conf: dict[str, Any] | None, repo: Path | None) -> list[Check]:
    from bnmem.provenance import recorded_source_now

    if conf is None:
        return [Check("source", NOT_CHECKED, "exploratory run: no source hash recorded")]
    recorded = conf.get("source_sha256")
    if not recorded:
        return [Check("source", NOT_CHECKED, "recorded before source hashes existed (plan 4.0 or earlier)")]
    derivation = int(conf.get("source_derivation") or 1)
    now = recorded_source_now(conf)
    # Later code recomputing a published run is expected (CI verifies docs/decisive on every commit): it is not a
    # mismatch, but the reader is told that today's rules, not the run's, reproduced the verdicts. Whether the
    # run's own files are what it recorded is checked at its commit below.
    out = [Check("source", OK, f"the installed source (derivation {derivation}) hashes to the recorded "
                               f"{recorded[:12]}…") if now == recorded else
           Check("source", NOT_CHECKED, f"whether the run's own code recomputes these verdicts: the installed source "
                                        f"(derivation {derivation}) hashes to {now[:12]}…, the run recorded "
                                        f"{recorded[:12]}…, so the rules recomputing here are later code's")]
    files = conf.get("source_files_sha256")
    if not files:
        return out
    commit = conf.get("commit")
    why = _has_commit(repo, commit)
    if why:
        out.append(Check("source", NOT_CHECKED, f"the package's files at the run's commit: {why}"))
        return out
    assert repo is not None and commit
    at = files_sha256_at(repo, commit)
    out.append(Check("source", OK, f"{PACKAGE_DIR} at commit {commit[:12]} hashes to the recorded files' hash")
               if at == files else
               Check("source", MISMATCH, f"{PACKAGE_DIR} at commit {commit[:12]} hashes to {str(at)[:12]}…, the run "
                                         f"recorded {files[:12]}… for its files"))
    return out


def _seed_checks(doc: dict[str, Any], conf: dict[str, Any] | None, cells: list[Any]) -> list[Check]:
    from bnmem.analysis_plan import CONFIRMATORY_KEY, RECORD_KEY
    from bnmem.provenance import record_key, replicate_seeds, resolved_sha256, study_seed
    from bnmem.report.results import replicate_of

    if conf is None:
        return [Check("seeds", NOT_CHECKED, "exploratory run: its seeds are the study's, not derived")]
    reps = conf.get("replicates") or {}
    if not isinstance(reps, dict) or not reps:
        return [Check("seeds", MISMATCH, f"{STUDY_FILE}'s confirmatory record lists no replicate seeds")]
    key = record_key(conf)
    derivation = int(conf.get("seed_derivation") or 1)
    n_models = len((reps.get("r0") or next(iter(reps.values()))).get("model_seeds") or [])
    want = replicate_seeds(key, len(reps), n_models)
    bad = []
    for k, derived in enumerate(want):
        got = reps.get(f"r{k}")
        if got is None:
            bad.append(f"r{k} missing")
            continue
        for name, value in derived.record().items():
            if got.get(name) != value:
                bad.append(f"r{k} {name} {got.get(name)} is not its derivation {value}")
    for lens, seed in (conf.get("study_lenses") or {}).items():
        if seed != study_seed(key, lens):
            bad.append(f"study lens {lens} seed {seed} is not its derivation {study_seed(key, lens)}")
    if derivation >= 2:
        # what the run adds to study.json after the seeds were derived (the selected recipes) is not the study
        added = (RECORD_KEY, CONFIRMATORY_KEY, SELECTED_RECIPES_KEY)
        resolved = resolved_sha256({k: v for k, v in doc.items() if k not in added})
        if resolved != conf.get("resolved_study_sha256"):
            bad.append(f"the study in {STUDY_FILE} hashes to {resolved[:12]}…, its record says "
                       f"{str(conf.get('resolved_study_sha256'))[:12]}…")
    by_rep = {k: list(d.models) for k, d in enumerate(want)}
    for cell in cells:
        seeds = cell.conditions.get("seeds")
        r = replicate_of(cell)
        if isinstance(seeds, list) and r in by_rep and seeds != by_rep[r]:
            bad.append(f"cell {cell.id}: model seeds {seeds} in the deciding table, r{r}'s derivation {by_rep[r]}")
    if bad:
        return [Check("seeds", MISMATCH, "; ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""))]
    extra = f", {len(conf.get('study_lenses') or {})} study-wide seed(s)" if conf.get("study_lenses") else ""
    return [Check("seeds", OK, f"{len(want)} replicates' seeds{extra} equal their derivation {derivation} from the "
                               "recorded key" + (", as do the cells' model seeds in the table" if cells else ""))]


def _attempt_checks(root: Path, doc: dict[str, Any], conf: dict[str, Any] | None, repo: Path | None) -> list[Check]:
    from bnmem.provenance import ATTEMPTS_LOG, END, RUN_ATTEMPTS, START, read_jsonl

    if conf is None:
        return [Check("attempts", NOT_CHECKED, "exploratory run: not logged")]
    log_path = repo / ATTEMPTS_LOG if repo is not None and (repo / ATTEMPTS_LOG).is_file() else root / RUN_ATTEMPTS
    if not log_path.is_file():
        return [Check("attempts", MISMATCH, f"no attempts log ({ATTEMPTS_LOG} in the repository, {RUN_ATTEMPTS} in the "
                                            "folder)")]
    entries = read_jsonl(log_path)
    name, started = doc.get("name"), conf.get("started")
    starts = [e for e in entries if e.get("kind") == START and e.get("study") == name and e.get("time") == started]
    ends = [e for e in entries if e.get("kind") == END and e.get("study") == name and e.get("started") == started]
    where = log_path.relative_to(repo).as_posix() if repo is not None and log_path.is_relative_to(repo) else \
        str(log_path)
    out = []
    if not starts:
        out.append(Check("attempts", MISMATCH, f"{where} holds no start of study {name} at {started}"))
    if not ends:
        out.append(Check("attempts", MISMATCH, f"{where} holds no end record of study {name}'s run started {started} "
                                               "(end records are written from seed derivation 2 on)"))
    elif ends[-1].get("reason") != "finished":
        out.append(Check("attempts", MISMATCH, f"the run's last end record says {ends[-1].get('reason')}"))
    own = root / RUN_ATTEMPTS
    if own.is_file() and log_path != own:
        missing = [e for e in read_jsonl(own) if e not in entries]
        if missing:
            out.append(Check("attempts", MISMATCH, f"{len(missing)} line(s) of the folder's {RUN_ATTEMPTS} are not "
                                                   f"in {where}"))
    if out:
        return out
    last = ends[-1]
    load = last.get("load")
    return [Check("attempts", OK, f"{where} holds the start ({started}) and the end ({last.get('reason')} after "
                                  f"{last.get('seconds')} s, {last.get('cpus')} CPUs, load {load})")]


# ----------------------------------------------------------------- the whole


def find_table(root: Path) -> Path | None:
    """The folder's deciding table (compressed or not), None when it has none."""
    from bnmem.report.deciding import DECIDING_CSV, DECIDING_TABLE

    for name in (DECIDING_CSV, DECIDING_TABLE):
        if (root / name).is_file():
            return root / name
    return None


def verify(root: str | Path, repo: str | Path | None = None) -> Verification:
    """Recompute and check a run or published folder (module docstring). ``repo``: the git checkout to read the
    recorded commit in (default: the one holding this bnmem, if any).

    Raises:
        BnmemError: ``root`` is not a directory, or holds neither a deciding table nor a study.json.
    """
    from bnmem.analysis_plan import CONFIRMATORY_KEY
    from bnmem.provenance import checkout_root

    root = Path(root)
    if not root.is_dir():
        raise BnmemError(f"{root} is not a directory")
    table = find_table(root)
    doc: dict[str, Any] = {}
    if (root / STUDY_FILE).is_file():
        try:
            doc = json.loads((root / STUDY_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise BnmemError(f"{root / STUDY_FILE}: unreadable ({e.__class__.__name__}: {e})") from e
    if table is None and not doc:
        raise BnmemError(f"{root} holds neither a deciding table nor a {STUDY_FILE}: not a bnmem run folder")
    conf = doc.get(CONFIRMATORY_KEY) if isinstance(doc.get(CONFIRMATORY_KEY), dict) else None
    repo_path = Path(repo) if repo is not None else checkout_root()
    kind = "confirmatory" if conf else "exploratory"
    commit = f", commit {str(conf.get('commit'))[:12]}" if conf and conf.get("commit") else ""
    plan = doc.get("analysis_plan") or {}
    header = (f"bnmem verify {root}: study {doc.get('name', '?')}, {kind}, plan {plan.get('version', '?')} "
              f"(sha256 {str(plan.get('sha256', '?'))[:12]}…){commit}")
    result = Verification(root, header, table=table)
    cells: list[Any] = []
    if table is not None:
        from bnmem.report.deciding import read_table, rebuild

        rebuilt = rebuild(read_table(table), root)
        result.claims = _claim_checks(root, rebuilt)
        cells = rebuilt.cells
    if doc:
        result.checks += _plan_checks(doc, conf, repo_path)
        result.checks += _source_checks(conf, repo_path)
        result.checks += _seed_checks(doc, conf, cells)
        result.checks += _attempt_checks(root, doc, conf, repo_path)
    else:
        result.checks.append(Check("study", NOT_CHECKED, f"no {STUDY_FILE}: a single lens's run; plan, source, seeds "
                                                         "and attempts are a study's"))
    return result


__all__ = ["COMPARED", "Check", "EXIT_MISMATCH", "EXIT_NO_TABLE", "EXIT_OK", "Verification", "verify"]
