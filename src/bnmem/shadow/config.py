"""The shadow-model protocol: how many models, their seeds, keep matrix, chunks and query settings.

A :class:`ShadowConfig` is an :class:`ExperimentConfig` (data, architecture,
norms, recipe) plus the shadow-model protocol: how many shadow models, how they
are cut into executor jobs, which membership matrix, and how the trained models
are queried (views, BN mode). Lenses that train shadow models use it as is
(defenses, mitigate) or subclass it (the lira lens's ``LiraConfig``). Its
checks raise :class:`BnmemError` directly, so a bad value ends in one line
whether it came from the CLI or from Python.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from bnmem.config import ExperimentConfig, parse_list
from bnmem.data import augment
from bnmem.data.augment import FLIP_DATASETS
from bnmem.errors import BnmemError
from bnmem.train.recipe import RecipeOptions

VIEW_NAMES = ("identity", "flip", "shift")
# The default: query with exactly the views of the training augmentation
# (:func:`bnmem.data.augment.matched_views`; the identity alone without augmentation).
MATCHED = "augment"
# Model m's seed is base_seed * SEED_STRIDE + m, so base seed 0 gives seeds
# 0..M-1 (the initial weights of `bnmem memorize` seed m) and distinct base
# seeds never share a model seed while M < SEED_STRIDE.
SEED_STRIDE = 1_000_000


# Shadow models whose seeds and IN halves select a per-norm recipe.
RECIPE_SELECTION_MODELS = 3


def check_shadow_models(m: int, name: str, *, off: bool = False, error: type[Exception] = BnmemError) -> int:
    """``m`` if it is a valid number of shadow models: even, at least 4 and below :data:`SEED_STRIDE`
    (0 too when ``off``: the caller's switch for "no shadow models"). The one place this rule is written.

    Raises:
        BnmemError: one line naming the setting as the caller's user wrote it (``name``); ``error=ValueError``
            inside a pydantic validator, which then prefixes the field's path (``lenses.mitigate.lira_models``).
    """
    if off and m == 0:
        return m
    if m < 4 or m % 2:
        # Odd M cannot put every example IN for exactly half the models, and
        # leave-one-out LiRA needs IN and OUT references for every example.
        raise error(f"{name} must be {'0 (off) or ' if off else ''}even and at least 4, got {m}")
    if m >= SEED_STRIDE:
        raise error(f"{name} must be below {SEED_STRIDE}, got {m}")
    return m


class ShadowConfig(ExperimentConfig, RecipeOptions):
    """M shadow models of one recipe per norm, and how they are queried; the resolved copy goes into the run directory.

    Attributes:
        seeds: exactly one base seed; model m's seed is
            ``seeds[0] * SEED_STRIDE + m`` for every norm (paired comparison).
        shadow_models: M, even and >= 4; every training example is IN for
            exactly M / 2 models.
        chunk_size: models per training job. Chunk boundaries depend only on
            (M, chunk_size), which is what lets a rerun redo only unfinished chunks.
        views: query views. ``augment`` (default, alone): the views of the
            training augmentation ``train.augment`` (the identity only when
            training has none; shifts by {-p, 0, p}² with its padding, mirrored
            too with flips). Or a list of ``identity``, ``flip``
            (cifar10/cifar100 only), ``shift`` (4 axis shifts by ±1 pixel, ±2 for
            images >= 28 px, of every other view): ``identity,shift`` is the
            fixed set earlier versions always used. LiRA scores are averaged over views.
        query_bn_mode: ``eval`` (running statistics, default) or ``batch``
            (statistics of the query batch; running statistics untouched).
        query_batch_size: the batch BN statistics come from in ``batch`` mode
            (default: the training batch size); ignored in ``eval`` mode.
        keep_seed: seed of the membership (keep) matrix; the same for every norm.
        query_seed: seed of the random permutation that forms ``batch``-mode
            query batches (recorded in query.json); unused in ``eval`` mode.
        save_logits: also keep the full logits (``logits.npy``, C times larger
            than φ); the attacks read only φ.
        recipe: ``shared`` (default) or ``per-norm``: each norm's shadow models
            train with the learning rate selected on the validation split
            (:mod:`bnmem.train.recipe`; candidates train as the first
            ``RECIPE_SELECTION_MODELS`` shadow models would: their seeds and IN halves).
    """

    seeds: list[int] = [0]
    shadow_models: int = 32
    chunk_size: int = Field(16, ge=1)
    views: list[str] = [MATCHED]
    query_bn_mode: Literal["eval", "batch"] = "eval"
    query_batch_size: int | None = Field(None, ge=2)
    keep_seed: int = Field(0, ge=0, lt=2**32)
    query_seed: int = Field(0, ge=0, lt=2**32)
    save_logits: bool = False

    @field_validator("shadow_models")
    @classmethod
    def _even_models(cls, v: int) -> int:
        return check_shadow_models(v, "--shadow-models")

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

    @field_validator("views", mode="before")
    @classmethod
    def _parse_views(cls, v: Any) -> list[str]:
        views = parse_list(v)
        if MATCHED in views:
            if views != [MATCHED]:
                raise BnmemError(f"--views {MATCHED} (the training augmentation's views) stands alone, got {','.join(views)}")
            return views
        unknown = [x for x in views if x not in VIEW_NAMES]
        if unknown:
            raise BnmemError(f"unknown view(s) {unknown}; choose from {', '.join(VIEW_NAMES)}")
        if "identity" not in views:
            # The identity view anchors train/test accuracy and keeps "views" a
            # superset of the plain query, so the flag only ever adds views.
            raise BnmemError(f"--views must include identity, got {','.join(views)}")
        # Canonical order and no duplicates: the same views give the same config.
        return [x for x in VIEW_NAMES if x in views]

    @model_validator(mode="after")
    def _flip_applies(self) -> "ShadowConfig":
        if "flip" in self.views and self.data.dataset not in FLIP_DATASETS:
            raise BnmemError(
                f"the flip view applies only to {', '.join(FLIP_DATASETS)}; a flipped {self.data.dataset} "
                "image is a different input. Drop 'flip' from --views"
            )
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
