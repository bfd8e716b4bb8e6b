"""Whether the analysis plan that decides a report is the one recorded before the run's first job.

``bnmem run`` records ``{"version", "sha256"}`` of :mod:`bnmem.analysis_plan`
under ``analysis_plan`` in study.json before any job starts. The report decides
under the current plan and states in its headline whether that is the plan
recorded (fixed before the results), a different one (the plan changed after
the run started: the recorded version is shown), or unknown (no record).

A run is *confirmatory* only when ``bnmem run --confirmatory`` derived its seeds
from the hash of the plan that decides now (study.json's ``confirmatory``
record, :mod:`bnmem.study.confirmatory`); every other run is *exploratory*,
including a confirmatory run read under a later plan (relabelled, with both
plans named).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bnmem.analysis_plan import CONFIRMATORY_KEY, PLAN_VERSION, RECORD_KEY as PLAN_KEY, plan_sha256

STUDY_FILE = "study.json"
FIXED, CHANGED, UNRECORDED = "fixed before the results", "changed after the run started", "not recorded"
CONFIRMATORY, EXPLORATORY = "confirmatory", "exploratory"


@dataclass(frozen=True)
class PlanCheck:
    """The current plan against the one a run recorded.

    Attributes:
        version, sha256: the plan that decides (the code's).
        recorded_version, recorded_sha256: what study.json recorded (None without a record).
        state: :data:`FIXED`, :data:`CHANGED` or :data:`UNRECORDED`.
        seeds_version, seeds_sha256: the plan a confirmatory run derived its seeds from (None: not confirmatory).
    """

    version: str
    sha256: str
    recorded_version: str | None
    recorded_sha256: str | None
    state: str
    seeds_version: str | None = None
    seeds_sha256: str | None = None

    @property
    def confirmatory(self) -> bool:
        """Seeds derived from the hash of the plan that decides (and recorded before the first job)."""
        return self.seeds_sha256 is not None and self.seeds_sha256 == self.sha256 == self.recorded_sha256

    @property
    def label(self) -> str:
        """:data:`CONFIRMATORY` or :data:`EXPLORATORY`."""
        return CONFIRMATORY if self.confirmatory else EXPLORATORY

    def label_text(self) -> str:
        """The run's label in one sentence (headline, summary.md, summary.csv)."""
        if self.confirmatory:
            return f"confirmatory under plan {self.version} (seeds derived from its hash, sha256 {self.sha256})"
        if self.seeds_sha256 is not None:
            return (f"exploratory: its seeds were derived from plan {self.seeds_version} (sha256 {self.seeds_sha256}), "
                    f"but plan {self.version} decides, so the data could have been seen when it was written")
        return ("exploratory: its seeds were not derived from the plan's hash (a run without --confirmatory), so "
                "its data could have been seen when the plan was written")

    def headline(self) -> str:
        """The report's plan line: the plan sentence, then the run's label (confirmatory or exploratory)."""
        return f"{self.plan_sentence()} This run is {self.label_text()}."

    def plan_sentence(self) -> str:
        """Whether the plan that decides is the one recorded before the first job."""
        now = f"analysis plan {self.version} (sha256 {self.sha256})"
        if self.state == FIXED:
            return f"Decided under {now}, fixed before the results: study.json recorded it before the first job."
        if self.state == CHANGED:
            return (f"The analysis plan changed after the run started: study.json recorded plan "
                    f"{self.recorded_version} (sha256 {self.recorded_sha256}) before the first job; these verdicts "
                    f"are decided under the current {now}.")
        return (f"Decided under {now}; this run recorded no plan before its first job, so nothing shows the plan "
                "was fixed before the results.")


def check_plan(run_root: str | Path) -> PlanCheck:
    """Compare the current plan with the one recorded in ``run_root/study.json`` (if any)."""
    sha = plan_sha256()
    try:
        doc = json.loads((Path(run_root) / STUDY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    doc = doc if isinstance(doc, dict) else {}
    rec, conf = doc.get(PLAN_KEY), doc.get(CONFIRMATORY_KEY)
    seeds = ((str(conf.get("plan_version")), str(conf.get("plan_sha256")))
             if isinstance(conf, dict) and conf.get("plan_sha256") else (None, None))
    if not isinstance(rec, dict) or not rec.get("sha256"):
        return PlanCheck(PLAN_VERSION, sha, None, None, UNRECORDED, *seeds)
    version, recorded = str(rec.get("version")), str(rec.get("sha256"))
    state = FIXED if recorded == sha else CHANGED
    return PlanCheck(PLAN_VERSION, sha, version, recorded, state, *seeds)
