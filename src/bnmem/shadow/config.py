"""The shadow-model protocol: how many models, their seeds, keep matrix, chunks and query settings.

A :class:`ShadowConfig` is an :class:`ExperimentConfig` (data, architecture,
norms, recipe) plus the shadow-model protocol: how many shadow models, how they
are cut into executor jobs, which membership matrix, and how the trained models
are queried (views, BN mode). Lenses that train shadow models use it as is
(defenses, mitigate) or subclass it (the lira lens's ``LiraConfig``). The
protocol's fields and their rules are declared once, in
:class:`bnmem.config.ShadowProtocol` (torch-free: the CLI builds its flags from
them); a bad value fails pydantic validation naming the field's path as the
user wrote it (``lenses.lira.shadow_models``, ``--shadow-models``).
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator, model_validator

# The protocol's fields and rules are declared once, torch-free, in bnmem.config; the names stay importable here.
from bnmem.config import (  # noqa: F401 - part of this module's interface
    MATCHED,
    SEED_STRIDE,
    VIEW_NAMES,
    ExperimentConfig,
    ShadowProtocol,
    check_shadow_models,
    check_views_fit,
)
from bnmem.data import augment
from bnmem.errors import BnmemError
from bnmem.train.recipe import RecipeOptions

# Shadow models whose seeds and IN halves select a per-norm recipe.
RECIPE_SELECTION_MODELS = 3


class ShadowConfig(ShadowProtocol, ExperimentConfig, RecipeOptions):
    """M shadow models of one recipe per norm, and how they are queried; the resolved copy goes into the run directory.

    Attributes:
        seeds: exactly one base seed; model m's seed is
            ``seeds[0] * SEED_STRIDE + m`` for every norm (paired comparison).
        shadow_models, chunk_size, views, query_bn_mode, query_batch_size, keep_seed, query_seed, save_logits:
            the protocol's fields (:class:`bnmem.config.ShadowProtocol`, where each is declared once).
        recipe: ``shared`` (default) or ``per-norm``: each norm's shadow models
            train with the learning rate selected on the validation split
            (:mod:`bnmem.train.recipe`; candidates train as the first
            ``RECIPE_SELECTION_MODELS`` shadow models would: their seeds and IN halves).
    """

    seeds: list[int] = [0]

    @field_validator("seeds")
    @classmethod
    def _one_seed(cls, v: list[int]) -> list[int]:
        if len(v) != 1:
            raise BnmemError(
                f"shadow models take one base seed (model m's seed derives from it), got {v}; "
                "use --seeds 1 for base seed 0 or --set seeds=[N]"
            )
        if v[0] < 0:
            raise BnmemError(f"the base seed must be >= 0, got {v[0]}")
        return v

    @model_validator(mode="after")
    def _flip_applies(self) -> "ShadowConfig":
        check_views_fit(self.views, self.data.dataset)
        return self

    def query_views(self, input_shape: tuple[int, ...]) -> list[tuple[str, Any]]:
        """The expanded ``[(name, fn)]`` views the models are queried with, identity first.

        Raises:
            BnmemError: the training augmentation does not fit the data.
        """
        if self.views == [MATCHED]:
            return augment.matched_views(augment.spec_of(self.train, input_shape, self.data.dataset))
        from bnmem.data.views import make_views

        return make_views(self.views, input_shape)

    @property
    def base_seed(self) -> int:
        return self.seeds[0]

    def model_seed(self, m: int) -> int:
        """Seed of shadow model ``m`` (initial weights and data order), the same for every norm."""
        return self.base_seed * SEED_STRIDE + int(m)

    def model_seeds(self) -> list[int]:
        return [self.model_seed(m) for m in range(self.shadow_models)]

    def chunks(self) -> list[list[int]]:
        """Model indices of each training job, in order; fixed by (M, chunk_size)."""
        m, c = self.shadow_models, self.chunk_size
        return [list(range(i, min(i + c, m))) for i in range(0, m, c)]

    def query_batch(self) -> int:
        """The BN normalization batch of a ``batch``-mode query."""
        return self.query_batch_size or self.train.batch_size

    def training_identity(self, norm: str) -> dict[str, Any]:
        """What determines the shadow models of ``norm`` (not how they are queried).

        Written next to the models; a rerun with a different identity is refused.
        """
        return {
            "data": self.data.model_dump(mode="json"),
            "arch": self.arch,
            "norm": norm,
            "train": self.train.model_dump(mode="json"),
            "shadow_models": self.shadow_models,
            "chunk_size": self.chunk_size,
            "base_seed": self.base_seed,
            "keep_seed": self.keep_seed,
        }
