"""Validated configuration models shared by every experiment.

All models reject unknown keys, so a typo in a YAML study or a ``--set``
override fails with the key's path instead of being silently ignored.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from bnmem.augment_spec import FLIP_DATASETS, spec_of
from bnmem.errors import BnmemError
from bnmem.names import ARCH_ALIASES, ARCHS, DATASETS, NORMS


def check_dataset(v: str) -> str:
    """A dataset name from :data:`bnmem.names.DATASETS` (the one table of datasets)."""
    if v not in DATASETS:
        raise ValueError(f"unknown dataset {v!r}; choose one of {', '.join(DATASETS)}")
    return v


def check_arch(v: str) -> str:
    """An architecture of :data:`bnmem.names.ARCHS` (the one table of architectures), aliases resolved."""
    name = ARCH_ALIASES.get(v, v)
    if name not in ARCHS:
        aliases = ", ".join(f"'{a}'" for a in ARCH_ALIASES)
        raise ValueError(f"unknown architecture {v!r}; choose one of {', '.join(ARCHS)} (or {aliases})")
    return name


def check_norm(v: str) -> str:
    """A normalization name of :data:`bnmem.names.NORMS`."""
    if v not in NORMS:
        raise ValueError(f"unknown norm {v!r}; choose one of {', '.join(NORMS)}")
    return v


def check_norms(v: list[str]) -> list[str]:
    """A non-empty list of distinct norms."""
    if not v:
        raise ValueError("norms must not be empty")
    if len(set(v)) != len(v):
        raise ValueError(f"norms lists a norm twice: {v}")
    return [check_norm(n) for n in v]


def validate_rate(v: float) -> float:
    """An outlier rate must lie in [0, 1) (1 would leave no clean example)."""
    if not 0.0 <= v < 1.0:
        raise ValueError(f"rate {v} is outside [0, 1)")
    return v


# torch device names bnmem trains on; whether the device exists is checked when a run starts,
# so a config written on a GPU machine stays readable (report, export) on one without
# (bnmem.train.device.check_device_here).
DEVICE_PATTERN = re.compile(r"^(cpu|cuda|mps|xpu)(:[0-9]+)?$")


def check_device(v: str) -> str:
    """A torch device name: cpu, cuda, cuda:N, mps or xpu."""
    if not DEVICE_PATTERN.match(v):
        raise ValueError(f"unknown device {v!r}; use cpu, cuda, cuda:N or mps")
    return v


class StrictModel(BaseModel):
    """Base for config models: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(StrictModel):
    """Which data, and which outliers are injected into its training split."""

    dataset: str = "digits"
    data_root: Path | None = None
    download: bool = False
    label_noise: float = Field(0.0, description="fraction of training labels flipped")
    ood: float = Field(0.0, description="fraction of the training set that is OOD")
    ood_source: str = Field("noise", description="'noise', 'heldout-classes' or a dataset name")
    heldout_classes: list[int] | None = Field(
        None, description="classes held out for ood_source='heldout-classes' (default: the last 20%)"
    )
    train_size: int | None = Field(None, description="use only the first N training examples (after a seeded shuffle)")
    seed: int = Field(0, description="seed of the corruption (same across norms and model seeds)")
    val_fraction: float = Field(
        0.0, description="fraction of the in-distribution training pool held out (clean labels) as a validation "
                         "split for recipe and λ selection; it never trains a model and is never a LiRA candidate"
    )

    @field_validator("val_fraction")
    @classmethod
    def _val_fraction(cls, v: float) -> float:
        if not 0.0 <= v <= 0.5:
            raise ValueError(f"val_fraction {v} is outside [0, 0.5]")
        return v

    _dataset = field_validator("dataset")(check_dataset)
    _rate = field_validator("label_noise", "ood")(validate_rate)


class ModelConfig(StrictModel):
    """One architecture with one normalization."""

    arch: str = "lenet"
    norm: str = "batch"

    _arch = field_validator("arch")(check_arch)
    _norm = field_validator("norm")(check_norm)


class TrainConfig(StrictModel):
    """One training recipe, shared by the plain and the ensemble trainer."""

    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(5e-4, ge=0, description="decay on weight matrices/kernels")
    norm_weight_decay: float = Field(
        0.0, ge=0, description="decay on normalization γ/β (changes γ/σ: a deliberate choice)"
    )
    schedule: Literal["constant", "cosine", "step"] = "constant"
    epochs: int = Field(30, ge=1)
    batch_size: int = Field(64, ge=2)
    threads: int = Field(1, ge=1, description="torch intra-op threads per training job (fixes bitwise reproducibility)")
    gs_reg: float = Field(0.0, ge=0, description="λ of the γ/σ regularizer (0: off)")
    gs_tau: float = Field(1.0, gt=0, description="τ of the γ/σ regularizer")
    augment: Literal["none", "shift", "crop-flip"] = Field(
        "none", description="training augmentation: none, random shifts, or random crop + horizontal flip (CIFAR)"
    )
    augment_pad: int | None = Field(
        None, ge=1, description="maximal shift in pixels (None: max(1, H // 8): 1 on digits, 3 on MNIST, 4 on CIFAR)"
    )
    augment_padding: Literal["reflect", "zero"] = Field(
        "reflect", description="how shifted-in pixels are filled: reflected, or 0 (the normalized mean colour)"
    )
    device: str = "cpu"
    precision: Literal["float32", "bf16"] = Field(
        "float32", description="float32, or bf16: the forward pass autocast to bfloat16 (for GPUs; "
        "parameters, optimizer state and BN statistics stay float32)"
    )
    channels_last: Literal["auto", "on", "off"] = Field(
        "auto", description="image batches channels_last: auto (the engine's choice), on, off"
    )
    compile: Literal["off", "default", "reduce-overhead"] = Field(
        "off", description="torch.compile the training forward pass (reduce-overhead: with CUDA graphs); for GPUs"
    )

    _device = field_validator("device")(check_device)


class ExperimentConfig(StrictModel):
    """Data + architecture + norms + seeds + recipe: what every per-cell lens starts from.

    Every field is validated here, so a bad value fails before a run directory is touched.
    """

    data: DataConfig = DataConfig()
    arch: str = "lenet"
    norms: list[str] = ["batch", "none"]
    seeds: list[int] = [0, 1, 2]
    train: TrainConfig = TrainConfig()

    _arch = field_validator("arch")(check_arch)
    _norms = field_validator("norms")(check_norms)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("seeds must not be empty")
        if len(set(v)) != len(v):
            raise ValueError(f"seeds lists a seed twice: {v}")
        return v

    @model_validator(mode="after")
    def _augment_fits_the_data(self) -> ExperimentConfig:
        """A training augmentation the data cannot take (flips on digits, pad too large) fails here, in one line."""
        if self.train.augment != "none":
            spec_of(self.train, DATASETS[self.data.dataset].input_shape, self.data.dataset)
        return self

    def model(self, norm: str) -> ModelConfig:
        return ModelConfig(arch=self.arch, norm=norm)


# --- The shadow-model protocol: every rule of it written once, here (torch-free, so the CLI builds its flags
# from these fields without importing torch). lira (bnmem.shadow.ShadowConfig), defenses, mitigate and the
# audit compose these types and the ShadowProtocol model; a rule raises ValueError, so pydantic names the
# field's path as the user wrote it (lenses.lira.shadow_models in a study; the CLI turns it into the flag).

VIEW_NAMES = ("identity", "flip", "shift")
# The default: query with exactly the views of the training augmentation
# (:func:`bnmem.data.augment.matched_views`; the identity alone without augmentation).
MATCHED = "augment"
# Model m's seed is base_seed * SEED_STRIDE + m, so base seed 0 gives seeds
# 0..M-1 (the initial weights of `bnmem memorize` seed m) and distinct base
# seeds never share a model seed while M < SEED_STRIDE.
SEED_STRIDE = 1_000_000


def shadow_models_problem(m: int, *, off: bool = False) -> str | None:
    """What is wrong with ``m`` shadow models (None: nothing): even, at least 4 and below :data:`SEED_STRIDE`
    (0 too when ``off``: the caller's switch for "no shadow models"). The one place this rule is written."""
    if off and m == 0:
        return None
    if m < 4 or m % 2:
        # Odd M cannot put every example IN for exactly half the models, and
        # leave-one-out LiRA needs IN and OUT references for every example.
        return f"must be {'0 (off) or ' if off else ''}even and at least 4, got {m}"
    if m >= SEED_STRIDE:
        return f"must be below {SEED_STRIDE}, got {m}"
    return None


def check_shadow_models(m: int, name: str, *, off: bool = False, error: type[Exception] = BnmemError) -> int:
    """``m`` if :func:`shadow_models_problem` finds nothing, else ``error("<name> <problem>")``."""
    problem = shadow_models_problem(m, off=off)
    if problem:
        raise error(f"{name} {problem}")
    return m


def _models_rule(off: bool):
    def check(m: int) -> int:
        problem = shadow_models_problem(m, off=off)
        if problem:
            raise ValueError(problem)
        return m

    return check


def check_views(value: Any) -> list[str]:
    """Query views as a canonical list: ``augment`` alone, or known views including the identity."""
    views = parse_list(value)
    if MATCHED in views:
        if views != [MATCHED]:
            raise ValueError(f"{MATCHED} (the training augmentation's views) stands alone, got {','.join(views)}")
        return views
    unknown = [x for x in views if x not in VIEW_NAMES]
    if unknown:
        raise ValueError(f"unknown view(s) {unknown}; choose from {MATCHED} or {', '.join(VIEW_NAMES)}")
    if "identity" not in views:
        # The identity view anchors train/test accuracy and keeps "views" a
        # superset of the plain query, so the option only ever adds views.
        raise ValueError(f"must include identity, got {','.join(views)}")
    # Canonical order and no duplicates: the same views give the same config.
    return [x for x in VIEW_NAMES if x in views]


def check_views_fit(views: list[str], dataset: str) -> None:
    """The flip view only where a mirrored image is the same input (:data:`FLIP_DATASETS`)."""
    if "flip" in views and dataset not in FLIP_DATASETS:
        raise BnmemError(
            f"the flip view applies only to {', '.join(FLIP_DATASETS)}; a flipped {dataset} "
            "image is a different input. Drop 'flip' from the views"
        )


ShadowModels = Annotated[int, AfterValidator(_models_rule(off=False))]
ShadowModelsOrOff = Annotated[int, AfterValidator(_models_rule(off=True))]
QueryViews = Annotated[list[str], BeforeValidator(check_views)]
Seed32 = Annotated[int, Field(ge=0, lt=2**32)]


class ShadowProtocol(StrictModel):
    """The shadow-model protocol: how many models, how they are cut into jobs, the membership matrix, the query.

    The defaults are the lira lens's; a lens with other defaults takes a field with
    :meth:`field` (its type, rule and constraints unchanged). Each field's description
    is its command-line help (``bnmem lira --help``).

    Attributes:
        shadow_models: M, even and >= 4 (:func:`shadow_models_problem`); every training example is IN for
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
    """

    shadow_models: ShadowModels = Field(32, description="shadow models per norm (even, >= 4); each training "
                                                        "example is IN for exactly half of them")
    chunk_size: int = Field(16, ge=1, description="shadow models per training job (fixes resume granularity)")
    views: QueryViews = Field([MATCHED], description=(
        "query views: augment (the training augmentation's views; identity without augmentation), or a list of "
        "identity, flip (cifar only), shift (±1 px; ±2 from 28 px); identity,shift is the earlier fixed set"))
    query_bn_mode: Literal["eval", "batch"] = Field(
        "eval", description="BN at query time: eval (running stats) or batch (query-batch stats)")
    query_batch_size: int | None = Field(
        None, ge=2, description="batch whose statistics BN uses in batch mode (default: --batch-size)")
    keep_seed: Seed32 = Field(0, description="seed of the membership matrix (same for every norm)")
    query_seed: Seed32 = Field(0, description="seed of the permutation that forms batch-mode query batches")
    save_logits: bool = Field(
        False, description="also store full logits (C times the disk of φ, which is all the attacks read)")

    @classmethod
    def field(cls, name: str, default: Any, description: str | None = None) -> Any:
        """Protocol field ``name`` with a lens's own default (and help); declare it with the field's type."""
        info = FieldInfo.merge_field_infos(cls.model_fields[name], default=default)
        # The rule travels with the field's type (the annotation the lens declares), not twice.
        info.metadata = [m for m in info.metadata if not isinstance(m, (AfterValidator, BeforeValidator))]
        if description is not None:
            info.description = description
        return info


class ShadowCopies(StrictModel):
    """The audit's shadow copies of a user's model: the protocol's M and how the copies' length is calibrated.

    Attributes:
        shadow_models: M > 0 measures membership leakage with M shadow copies (0: off).
        compare_gs_reg: also train the copies with the γ/σ regularizer of this λ, side by side.
        match_accuracy: double the copies' epochs (up to ``max_epochs``) until a probe copy reaches the
            model's training accuracy.
        max_epochs: the most epochs ``match_accuracy`` tries (default 4x the copies' epochs: step-matched unless
            ``match_steps`` is off).
        match_steps: the copies train for as many optimizer steps as the model took (False: ``train.epochs``).
    """

    shadow_models: ShadowModelsOrOff = Field(0, description=(
        "also estimate membership risk with M shadow copies of the architecture trained with the recipe flags "
        "(even, >= 4; 0: off)"))
    compare_gs_reg: float | None = Field(None, gt=0, description=(
        "with --shadow-models: also train the shadow copies with the γ/σ regularizer of this λ and show the "
        "privacy gain (AUCs) and accuracy cost side by side"))
    match_accuracy: bool = Field(False, description=(
        "with --shadow-models: extend the shadow copies' epochs (doubling, up to --max-epochs) until a probe "
        "copy reaches your model's training accuracy"))
    max_epochs: int | None = Field(None, ge=1, description=(
        "--match-accuracy: the most epochs to try (default: 4x the copies' epochs, which by default match your "
        "model's optimizer steps; 4x --epochs with --same-epochs)"))
    match_steps: bool = True

    @model_validator(mode="after")
    def _needs_copies(self) -> "ShadowCopies":
        if self.match_accuracy and not self.shadow_models:
            raise BnmemError("--match-accuracy calibrates shadow copies: give --shadow-models too (e.g. 8)")
        if self.compare_gs_reg is not None and not self.shadow_models:
            raise BnmemError("--compare-gs-reg compares shadow copies: give --shadow-models too (e.g. 8)")
        return self

    @property
    def wanted(self) -> bool:
        """Whether any shadow copy is asked for (or an option that needs them)."""
        return bool(self.shadow_models or self.compare_gs_reg is not None or self.match_accuracy)


def parse_list(value: str | list, kind=str) -> list:
    """Parse '1,2,3' (CLI) or a list (YAML) into a list of ``kind``."""
    if isinstance(value, (list, tuple)):
        return [kind(v) for v in value]
    return [kind(v.strip()) for v in str(value).split(",") if v.strip()]


def apply_overrides(config: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``a.b=c`` overrides (values parsed as YAML) to a nested config dict."""
    for item in overrides or []:
        if "=" not in item:
            raise BnmemError(f"--set expects KEY=VALUE (e.g. train.lr=0.1), got {item!r}")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise BnmemError(f"--set {key}: cannot parse value {raw!r}") from e
        node = config
        parts = key.strip().split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                if p in node:
                    raise BnmemError(f"--set {key}: {p!r} is not a section")
                node[p] = {}
            node = node[p]
        node[parts[-1]] = value
    return config


def _model_named(title: str) -> type[BaseModel] | None:
    """The one config model class called ``title`` (a ValidationError's title), or None."""
    found, todo = [], [BaseModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__name__ == title and sub.__module__.startswith("bnmem."):
                found.append(sub)
    return found[0] if len(set(found)) == 1 else None


def _keys_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The keys a config model accepts at ``loc`` (following nested models; [] where it cannot tell)."""
    import typing

    def models_in(ann: Any) -> set[type[BaseModel]]:  # through Optional, Union, list[...], Annotated
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return {ann}
        return set().union(*(models_in(a) for a in typing.get_args(ann)))

    for part in loc:
        if isinstance(part, int):  # an item of a list of models: the model found at the list's key
            continue
        if model is None or part not in model.model_fields:
            return []
        inner = models_in(model.model_fields[part].annotation)
        model = inner.pop() if len(inner) == 1 else None
    return list(model.model_fields) if model is not None else []


def did_you_mean(key: str, choices: list[str]) -> str:
    """' (did you mean X?)' for the closest of ``choices`` to a mistyped ``key``; '' when none is close."""
    import difflib

    close = difflib.get_close_matches(key, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def validation_line(err: ValidationError, prefix: str = "", names: dict[str, str] | None = None,
                    model: type[BaseModel] | None = None) -> str:
    """'prefix.path: message; ...' for every error of a pydantic ValidationError.

    ``names`` maps a field's dotted path to what the user wrote instead (a flag: ``--shadow-models``). An
    unknown key gets '(did you mean X?)' from the keys ``model`` (default: the bnmem model the error names)
    accepts there: ``lenses.lira.shadow_modelz: Extra inputs are not permitted (did you mean shadow_models?)``.
    """
    model = model or _model_named(err.title)
    parts = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"])
        loc = (names or {}).get(path) or ".".join([*([prefix] if prefix else []), *([path] if path else [])])
        hint = ""
        if e["type"] == "extra_forbidden" and e["loc"]:
            hint = did_you_mean(str(e["loc"][-1]), _keys_at(model, tuple(e["loc"][:-1])))
        parts.append(f"{loc or 'config'}: {e['msg'].removeprefix('Value error, ')}{hint}")
    return "; ".join(parts)
