"""What a confirmatory run's report discloses from the attempts log: earlier attempts, and each row's chances.

A row's verdict is evidence only with the number of times it could have read "contradicted" (or "reproduced"):
every confirmatory study whose verdict on the same claim may have been read before this run started is one more
chance. From the attempts log (:mod:`bnmem.provenance`) the report names

* every earlier attempt of the same study (any plan): its start, commit and how it ended (finished, interrupted,
  failed, or no end record: logs before end records existed);
* per claim, every earlier study (another name) that started before this run and measures the claim (its lenses,
  logged at its start, else read from its study file at its commit, else unknown: counted as measuring every
  claim), unless it ended interrupted or failed before this run started (no verdict to read). A finished one, or
  one without an end record, may have been read: it counts.

The count of chances is 1 (this run) plus the earlier attempts of the same study and the earlier studies that
count. The log is as complete as the commits it travels with (docs/verify.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem.provenance import END, FINISHED, RESUME, START


def _ends(entries: list[dict[str, Any]]) -> dict[tuple[Any, Any], dict[str, Any]]:
    """(study, started) -> the last end record of that attempt."""
    out: dict[tuple[Any, Any], dict[str, Any]] = {}
    for e in entries:
        if e.get("kind") == END:
            out[(e.get("study"), e.get("started"))] = e
    return out


def _ended(end: dict[str, Any] | None) -> str:
    if end is None:
        return "no end record"
    secs = end.get("seconds")
    return f"ended {end.get('reason')}" + (f" after {secs} s" if secs is not None else "")


def _before(time: Any, started: str | None) -> bool:
    return started is None or (isinstance(time, str) and time < started)


def _lenses_of(entry: dict[str, Any], repo: Path | None) -> set[str] | None:
    """The lenses a logged start ran: logged with it, else its study file at its commit (git), else None."""
    from bnmem.lenses.spec import canonical

    def names(keys: Any) -> set[str]:
        out = set()
        for k in keys:
            try:
                out.add(canonical(str(k)))
            except Exception:  # a lens this installation does not know
                out.add(str(k))
        return out

    if isinstance(entry.get("lenses"), list):
        return names(entry["lenses"])
    commit, path = entry.get("commit"), entry.get("study_file")
    if repo is None or not commit or not path:
        return None
    from bnmem.provenance import _git

    rel = str(path)
    try:
        rel = Path(path).resolve().relative_to(repo.resolve()).as_posix() if Path(path).is_absolute() else rel
    except ValueError:
        return None
    text = _git(repo, "show", f"{commit}:{rel}")
    if text is None:
        return None
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    lenses = doc.get("lenses") if isinstance(doc, dict) else None
    if isinstance(lenses, dict):
        return names(k for k, v in lenses.items() if v is not False)
    return names(lenses) if isinstance(lenses, list) else None


def earlier_attempts(entries: list[dict[str, Any]], study: str | None, started: str | None) -> list[str]:
    """Every other start of ``study`` (any plan), with its commit and how it ended."""
    ends = _ends(entries)
    out = []
    for e in entries:
        if e.get("kind") != START or e.get("study") != study or e.get("time") == started:
            continue
        resumes = sum(x.get("kind") == RESUME and x.get("started") == e.get("time") for x in entries)
        out.append(f"{e.get('time')} (plan {e.get('plan_version')}, commit {str(e.get('commit'))[:7]}"
                   + (f", {resumes} resume(s)" if resumes else "") + f", {_ended(ends.get((study, e.get('time'))))})")
    return out


def chances(claim_ids: list[str], entries: list[dict[str, Any]], study: str | None, started: str | None,
            repo: Path | None = None) -> dict[str, list[str]]:
    """Claim id -> the earlier attempts whose verdict on it may have been read before this run started (this
    study's other finished or unended starts, and other studies that measure the claim)."""
    from bnmem.analysis_plan import PLAN

    ends = _ends(entries)
    out: dict[str, list[str]] = {cid: [] for cid in claim_ids}
    for e in entries:
        if e.get("kind") != START or e.get("time") == started or not _before(e.get("time"), started):
            continue
        end = ends.get((e.get("study"), e.get("time")))
        if end is not None and end.get("reason") != FINISHED and _before(end.get("time"), started):
            continue  # stopped with no verdict before this run began
        same = e.get("study") == study
        lenses = None if same else _lenses_of(e, repo)
        what = f"{e.get('study')} {e.get('time')} ({_ended(end)})"
        for cid in claim_ids:
            plan = PLAN.get(cid)
            if same or lenses is None or plan is None or plan.lens in lenses:
                out[cid].append(what)
    return out


def disclosure(claims: list[Any], doc: dict[str, Any], repo: Path | None = None,
               entries: list[dict[str, Any]] | None = None) -> list[str]:
    """The report's lines on earlier attempts and chances for a confirmatory run (study.json's ``doc``); [] for an
    exploratory one."""
    from bnmem.analysis_plan import CONFIRMATORY_KEY, NOT_RUN
    from bnmem.provenance import checkout_root, read_attempts

    rec = doc.get(CONFIRMATORY_KEY)
    if not isinstance(rec, dict):
        return []
    repo = repo if repo is not None else checkout_root()
    entries = entries if entries is not None else read_attempts(repo)
    study, started = doc.get("name"), rec.get("started")
    earlier = earlier_attempts(entries, study, started)
    lines = ["Earlier attempts of study " + str(study) + ": " + ("; ".join(earlier) if earlier else "none") + "."]
    ids = [c.id for c in claims if c.status != NOT_RUN]
    if ids:
        per = chances(ids, entries, study, started, repo)
        parts = []
        for cid in ids:
            n = 1 + len(per[cid])
            parts.append(f"{cid}: {n}" + (f" ({'; '.join(per[cid])}; this run)" if per[cid] else ""))
        lines.append("Chances each row had to read \"contradicted\" (this run, and every earlier confirmatory attempt "
                     "whose verdict on it may have been read before this run started): " + ", ".join(parts) + ".")
    return lines
