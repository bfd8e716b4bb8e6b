"""Lens 3, membership inference (LiRA, RMIA and baselines) on shadow models of each norm."""

from bnmem.lenses.lira.config import LiraConfig
from bnmem.lenses.lira.run import (
    LENS, accuracy_summary, attack_norm, paired_differences, run_lira, run_shadow_norm, summary_table,
)

__all__ = ["LENS", "LiraConfig", "accuracy_summary", "attack_norm", "paired_differences", "run_lira",
           "run_shadow_norm", "summary_table"]
