"""Configuration of the membership-inference lens (``bnmem lira``).

The lens runs the shadow-model protocol of :class:`bnmem.shadow.ShadowConfig`
(data, architecture, norms, recipe, M shadow models, chunks, keep matrix, query
views and BN mode) and adds nothing to it: a :class:`LiraConfig` is that
protocol under the lens's name, so a lira ``config.json`` is exactly a
``ShadowConfig`` dump.
"""

from __future__ import annotations

from bnmem.shadow.config import MATCHED, RECIPE_SELECTION_MODELS, SEED_STRIDE, VIEW_NAMES, ShadowConfig

__all__ = ["LiraConfig", "MATCHED", "RECIPE_SELECTION_MODELS", "SEED_STRIDE", "VIEW_NAMES"]


class LiraConfig(ShadowConfig):
    """Everything ``bnmem lira`` runs from; the resolved copy goes into the run directory.

    See :class:`~bnmem.shadow.config.ShadowConfig` for the fields.
    """
