"""Whether the analysis plan that decides a report is the one recorded before the run's first job.

``bnmem run`` records ``{"version", "sha256"}`` of :mod:`bnmem.analysis_plan`
under ``analysis_plan`` in study.json before any job starts. The report decides
under the current plan and states in its headline whether that is the plan
recorded (fixed before the results), a different one (the plan changed after
the run started: the recorded version is shown), or unknown (no record).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bnmem.analysis_plan import PLAN_VERSION, RECORD_KEY as PLAN_KEY, plan_sha256
from bnmem.names import STUDY_FILE

FIXED, CHANGED, UNRECORDED = "fixed before the results", "changed after the run started", "not recorded"


@dataclass(frozen=True)
class PlanCheck:
    """The current plan against the one a run recorded.

    Attributes:
        version, sha256: the plan that decides (the code's).
        recorded_version, recorded_sha256: what study.json recorded (None without a record).
        state: :data:`FIXED`, :data:`CHANGED` or :data:`UNRECORDED`.
    """

    version: str
    sha256: str
    recorded_version: str | None
    recorded_sha256: str | None
    state: str

    def headline(self) -> str:
        """One sentence for the report's headline."""
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
    rec = None
    try:
        doc = json.loads((Path(run_root) / STUDY_FILE).read_text(encoding="utf-8"))
        rec = doc.get(PLAN_KEY) if isinstance(doc, dict) else None
    except (OSError, ValueError):
        rec = None
    if not isinstance(rec, dict) or not rec.get("sha256"):
        return PlanCheck(PLAN_VERSION, sha, None, None, UNRECORDED)
    version, recorded = str(rec.get("version")), str(rec.get("sha256"))
    state = FIXED if recorded == sha else CHANGED
    return PlanCheck(PLAN_VERSION, sha, version, recorded, state)
