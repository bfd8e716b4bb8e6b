"""Configuration of the membership-inference lens (``bnmem lira``).

The lens runs the shadow-model protocol of :class:`bnmem.shadow.ShadowConfig`
(data, architecture, norms, recipe, M shadow models, chunks, keep matrix, query
views and BN mode); a lira ``config.json`` is that ``ShadowConfig`` dump, plus
the lens's one option of its own when it is on: ``matched_fit`` (row 3c of the
analysis plan, :mod:`bnmem.lenses.lira.matched_fit`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from bnmem.analysis_plan import MATCHED_FIT_OPTION
from bnmem.shadow.config import MATCHED, RECIPE_SELECTION_MODELS, SEED_STRIDE, VIEW_NAMES, ShadowConfig

__all__ = ["LiraConfig", "MATCHED", "MATCHED_FIT_MIN_MODELS", "RECIPE_SELECTION_MODELS", "SEED_STRIDE", "VIEW_NAMES"]

# The matched-fit threshold is fitted on each target's references scored leave-one-out among themselves
# (M − 2 models each): with fewer than 6 some example has no IN reference left (balanced keep, M / 2 IN).
MATCHED_FIT_MIN_MODELS = 6


class LiraConfig(ShadowConfig):
    """Everything ``bnmem lira`` runs from; the resolved copy goes into the run directory.

    See :class:`~bnmem.shadow.config.ShadowConfig` for the protocol's fields.

    Attributes:
        matched_fit: also query every shadow model at the end of every epoch (while it trains) and write
            the ``matched_fit`` block of ``metrics.json`` (row 3c: the attack with the two norms at matched
            test accuracy, with a threshold fitted on shadow models only).
    """

    matched_fit: bool = Field(False, description=(
        "also query every shadow model after every epoch and attack them there (analysis-plan row 3c: BN vs "
        "no-norm at matched test accuracy); each queried epoch costs about as much as a training epoch"))

    @model_validator(mode="after")
    def _enough_models_to_match(self) -> "LiraConfig":
        if self.matched_fit and self.shadow_models < MATCHED_FIT_MIN_MODELS:
            raise ValueError(f"{MATCHED_FIT_OPTION} needs at least {MATCHED_FIT_MIN_MODELS} shadow models (its "
                             f"threshold is fitted on each target's references alone), got {self.shadow_models}")
        return self

    @model_serializer(mode="wrap")
    def _off_is_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # With the option off the dump is the protocol's alone, as before the option existed: config.json,
        # its hash (the default run directory) and a resumed run's identity check stay what they were.
        data = handler(self)
        if not self.matched_fit:
            data.pop(MATCHED_FIT_OPTION, None)
        return data
