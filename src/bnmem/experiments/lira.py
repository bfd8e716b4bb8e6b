"""Kept for ``from bnmem.experiments.lira import run_lira, run_shadow_norm`` (the README's older path).

The lens lives in :mod:`bnmem.lenses.lira`.
"""

from bnmem.lenses.lira import *  # noqa: F401,F403
from bnmem.lenses.lira import __all__  # noqa: F401
