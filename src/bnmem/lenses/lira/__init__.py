"""Lens 3, membership inference (LiRA, RMIA and baselines) on shadow models of each norm.

The shadow models themselves (training, querying, attacking one norm) are the
engine's: :mod:`bnmem.shadow`.
"""

from bnmem.lenses.lira.config import LiraConfig
from bnmem.lenses.lira.run import LENS, paired_differences, run_lira, summary_table

__all__ = ["LENS", "LiraConfig", "paired_differences", "run_lira", "summary_table"]
