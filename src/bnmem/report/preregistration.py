"""Whether the analysis plan that decides a report is the one recorded before the run's first job.

``bnmem run`` records ``{"version", "sha256"}`` of :mod:`bnmem.analysis_plan`
under ``analysis_plan`` in study.json before any job starts. The report decides
under the current plan and states in its headline whether that is the plan
recorded (before the run's first job), a different one (the plan changed after
the run started: the recorded version is shown), or unknown (no record).

Recording the hash shows only that the rules did not move during the run; it
adds no fresh evidence when the run repeats data and seeds whose results were
seen while the plan was written. :func:`run_label` therefore calls a run
confirmatory only when study.json's ``confirmatory`` record (``bnmem run
--confirmatory``: every seed derived from the plan's hash) names the plan that
decides, and exploratory otherwise, in the plan's own words for a study whose
results were seen (:data:`bnmem.analysis_plan.EXPLORATORY_SEEN`).

For a confirmatory run, :attr:`PlanCheck.provenance` says which commit and deciding
source (:func:`bnmem.provenance.source_sha256`) the seeds came from, whether the
source that decides now is the same, and how many confirmatory starts of the same
study under the same plan the attempts log of this checkout holds, and which one this
run is (:func:`bnmem.provenance.attempts_line`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bnmem.analysis_plan import (
    CONFIRMATORY_KEY, EXPLORATORY_SEEN, PLAN_VERSION, RECORD_KEY as PLAN_KEY, SEEN_STUDIES, plan_sha256,
)
from bnmem.names import STUDY_FILE
from bnmem.provenance import attempts_line

FIXED, CHANGED, UNRECORDED = "recorded before the first job", "changed after the run started", "not recorded"
# Each state in the report headline's short words ("plan 4.0 <words>").
STATE_WORDS = {FIXED: "recorded before this run", CHANGED: CHANGED, UNRECORDED: "not recorded by this run"}


@dataclass(frozen=True)
class PlanCheck:
    """The current plan against the one a run recorded.

    Attributes:
        version, sha256: the plan that decides (the code's).
        recorded_version, recorded_sha256: what study.json recorded (None without a record).
        state: :data:`FIXED`, :data:`CHANGED` or :data:`UNRECORDED`.
        label: the run's confirmatory / exploratory sentence (:func:`run_label`).
        provenance: for a confirmatory run, its commit, deciding source and attempts (else "").
        study: study.json's contents ({} without one), read once with the rest.
    """

    version: str
    sha256: str
    recorded_version: str | None
    recorded_sha256: str | None
    state: str
    label: str = ""
    provenance: str = ""
    study: dict = field(default_factory=dict, compare=False, repr=False)

    def headline(self, short: bool = False) -> str:
        """One sentence for the report's headline (``short``: the hash by its first 12 digits, as the page's
        first screen prints it; the plan block in Details has it in full)."""
        sha = f"{self.sha256[:12]}…; in full under Analysis plan" if short else self.sha256
        now = f"analysis plan {self.version} (sha256 {sha})"
        if self.state == FIXED:
            return (f"Decided under {now}, {FIXED} in study.json: the rules did not move during the run "
                    "(whether its data were unseen: the label above the table).")
        if self.state == CHANGED:
            return (f"The analysis plan changed after the run started: study.json recorded plan "
                    f"{self.recorded_version} (sha256 {self.recorded_sha256}) before the first job; these verdicts "
                    f"are decided under the current {now}.")
        return (f"Decided under {now}; this run recorded no plan before its first job, so nothing shows the plan "
                "was fixed before the run.")


def _study_doc(run_root: str | Path) -> dict:
    """study.json of a run as a dict ({} when absent or unreadable)."""
    try:
        doc = json.loads((Path(run_root) / STUDY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def run_label(run_root: str | Path, study: str | None = None) -> str:
    """'confirmatory: …' or 'exploratory: …', one sentence, the same words wherever the report prints it.

    Confirmatory only when study.json's confirmatory record names the hash of the plan that decides (its
    seeds were derived from that hash, so nobody could have seen them when the plan was written). ``study``:
    the run's study name (default: study.json's ``name``). A loaded run carries it already
    (``RunData.plan.label``)."""
    return check_plan(run_root, study).label


def _label(doc: dict, study: str | None, sha: str) -> str:
    """:func:`run_label`'s sentence from study.json's contents and the deciding plan's hash."""
    rec = doc.get(CONFIRMATORY_KEY)
    name = study if study is not None else doc.get("name")
    if isinstance(rec, dict) and rec.get("plan_sha256") == sha:
        return (f"confirmatory: every seed of this run was derived from the hash of plan {PLAN_VERSION}, so its "
                "data could not have been seen when the plan was written")
    if name in SEEN_STUDIES:
        return EXPLORATORY_SEEN
    if isinstance(rec, dict):
        return (f"exploratory: this run's seeds were derived from the hash of plan {rec.get('plan_version')}, not "
                f"of plan {PLAN_VERSION}, which decides it")
    return (f"exploratory: this run's seeds were not derived from the hash of plan {PLAN_VERSION} (bnmem run "
            "--confirmatory), so nothing shows its data were unseen when the plan was written")


def provenance_text(doc: dict, study: str | None = None) -> str:
    """For a run with a confirmatory record: the commit and deciding source its seeds came from, whether the
    deciding source is the same now, and its attempts (:func:`bnmem.provenance.attempts_line`); else ""."""
    from bnmem.provenance import read_attempts, recorded_source_now

    rec = doc.get(CONFIRMATORY_KEY)
    if not isinstance(rec, dict):
        return ""
    recorded = rec.get("source_sha256")
    if not recorded:
        return ("Its seeds were derived from the plan's hash alone (before plan 5.0): no commit or deciding "
                "source was recorded.")
    now = recorded_source_now(rec)  # by the derivation the record used
    same = ("the deciding source is the same now" if recorded == now else
            f"the deciding source has changed since (now sha256 {now[:12]}…): these verdicts are decided by "
            "other code than the run started with")
    name = study if study is not None else doc.get("name")
    return (f"Seeds from commit {rec.get('commit')} and deciding source sha256 {str(recorded)[:12]}… "
            f"(started {rec.get('started')}); {same}. "
            + attempts_line(read_attempts(), name, str(rec.get("plan_sha256")), rec.get("started")))


def check_plan(run_root: str | Path, study: str | None = None) -> PlanCheck:
    """Compare the current plan with the one recorded in ``run_root/study.json`` (if any), and label the run
    (:func:`run_label`; ``study``: its name, default study.json's). Reads study.json and hashes the plan once:
    the report calls it once per loaded run (``RunData.plan``)."""
    sha = plan_sha256()
    doc = _study_doc(run_root)
    label = _label(doc, study, sha)
    prov = provenance_text(doc, study)
    rec = doc.get(PLAN_KEY)
    if not isinstance(rec, dict) or not rec.get("sha256"):
        return PlanCheck(PLAN_VERSION, sha, None, None, UNRECORDED, label, prov, doc)
    version, recorded = str(rec.get("version")), str(rec.get("sha256"))
    state = FIXED if recorded == sha else CHANGED
    return PlanCheck(PLAN_VERSION, sha, version, recorded, state, label, prov, doc)
