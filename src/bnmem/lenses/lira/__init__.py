"""Lens 3, membership inference (LiRA, RMIA and baselines) on shadow models of each norm."""

from bnmem.lenses.lira.config import LiraConfig
from bnmem.lenses.lira.run import (
    LENS_STAMP, accuracy_summary, attack_norm, paired_differences, run_lira, run_shadow_norm, summary_table,
)
from bnmem.lenses.lira.phases import PHASES, estimate, phase_jobs
from bnmem.lenses.registry import Lens, register

__all__ = ["LENS", "LiraConfig", "accuracy_summary", "attack_norm", "paired_differences", "run_lira",
           "run_shadow_norm", "summary_table"]

LENS = register(Lens(
    name="lira", config=LiraConfig, run=run_lira, figure="roc.png", title="Membership inference (LiRA, RMIA)",
    summary=summary_table, schema_version=LENS_STAMP["schema_version"], one_seed=True, stage=2, uses_executor=True,
    phases=PHASES, phase_jobs=phase_jobs, estimate=estimate,
    # `rmia` in a study means "run the lira lens": its attack evaluation reports RMIA too.
    aliases=("rmia",),
))
