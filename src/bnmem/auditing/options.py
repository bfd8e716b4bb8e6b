"""The audit's options as typed objects: what it measures besides the shadow copies, and what it writes.

:class:`AuditOptions` is the one place the audit's own options are declared: their types, defaults,
rules and help. ``bnmem.audit(..., options=AuditOptions(...))`` (or its fields as keywords) and the
``bnmem audit`` flags (generated from the fields by :mod:`bnmem.cli.fields`) both read it. The shadow
copies' options are :class:`bnmem.config.ShadowCopies`, the recipe :class:`bnmem.config.TrainConfig`,
the data :class:`AuditData` (Python) or the data flags (command line).

Imports no torch: the package's ``bnmem.audit`` reads it at call time only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pydantic import ConfigDict, Field, SkipValidation, ValidationError, field_validator, model_validator

from bnmem.config import StrictModel, validation_line
from bnmem.errors import BnmemError
from bnmem.names import DATASETS


class AuditOptions(StrictModel):
    """What the audit measures on the model itself, and what it writes besides audit.json and audit.md.

    Attributes:
        top_k: list the K training examples with the largest gradient norms (also an attack group of their own).
        max_examples: gradient norms on at most this many training examples (seeded subset; None: all).
        max_memory: gradient-norm memory budget, bytes or text such as ``8GB`` (None: half the free memory).
        seed: seed of the probe batch and the gradient-norm subset.
        progress: progress output on stderr.
        defenses: a finished defenses run whose privacy–utility frontier the recommendations cite.
        workers: N > 1 trains the shadow copies in N local worker processes.
        fail_at: the CI gate's budget (:mod:`bnmem.auditing.gate`).
        model_card: also write a "Privacy evaluation" section for a model card here (:mod:`bnmem.auditing.model_card`).
        mlflow: also log the audit as one run to the active MLflow tracking URI (:mod:`bnmem.auditing.tracking`).
        canaries: K > 0 also runs the one-run audit of the recipe with K canaries (:mod:`bnmem.auditing.one_run`).
        one_run_beta: the one-run audit's ε lower bound holds with confidence 1 − β.
        train_fn: your own training function trains the shadow copies (:mod:`bnmem.auditing.train_fn`):
            'module:function', or (Python) the function itself.
        source: where the model and data came from (written into the result; set by ``bnmem audit``).
        executor: train the shadow copies through it (local worker processes, Ray); not a flag.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    top_k: int = Field(20, ge=0, description="list the K training examples with the largest gradient norms")
    max_examples: int | None = Field(10_000, ge=1, description="measure gradient norms on at most N training "
                                                               "examples (seeded subset)")
    max_memory: str | None = Field(None, description=(
        "memory budget of the gradient-norm measurement, e.g. 8GB (default: half the free RAM, or GPU memory with "
        "--device cuda)"))
    seed: int = 0
    progress: bool = False
    defenses: str | None = Field(None, description=(
        "a finished defenses run (bnmem run studies/defenses.yaml): cite its privacy-utility frontier in the "
        "recommendations"))
    workers: int = Field(1, ge=1, description="train the shadow copies in N local worker processes (1: in this "
                                              "process)")
    fail_at: str | None = Field(None, description=(
        "fail the audit (exit 3) when the leakage the data rule out (lower ends of the 95% intervals) reaches this "
        "budget: a level (low, moderate, elevated), auc=0.6, tpr@1%=0.05 or tpr@0.1%=0.02 (the shadow copies; needs "
        "--shadow-models); target:auc=0.6 gates on your model itself (needs --non-members); a slice before the "
        "budget (class=7:auc=0.6, correct:, incorrect:) gates on that slice; exit 4 when the audit could not assess "
        "the model (never 0)"))
    model_card: str | None = Field(None, description=(
        "also write a 'Privacy evaluation' section in the Hugging Face model-card convention to this file "
        "(markdown; appended to an existing card, replacing an earlier such section)"))
    mlflow: bool = Field(False, description=(
        "also log the audit (parameters, each group's AUC with both ends, the level, the report files) as one run "
        "to the active MLflow tracking URI (./mlruns by default; pip install 'bnmem[mlflow]')"))
    canaries: int = Field(0, ge=0, description=(
        "also audit the recipe in one training run (Steinke, Nasr, Jagielski 2023): K canaries, each in or out by "
        "a fair coin, give an ε lower bound (0: off)"))
    one_run_beta: float = Field(0.05, gt=0, lt=1, description="--canaries: the ε lower bound holds with "
                                                              "confidence 1 − β")
    # A text on the command line; the function itself from Python (hence no validation of the type).
    train_fn: SkipValidation[Optional[str]] = Field(None, description=(
        "train the shadow copies with your own function, 'module:function' called as train(model, train_dataset, "
        "seed) -> model (bnmem's member split and seeds; the module is found beside the model file or in the "
        "working directory); the recipe flags then only set --device and --threads, and train.augment (--set) the query views"))
    source: dict[str, Any] | None = None
    executor: Any = None

    @field_validator("train_fn")
    @classmethod
    def _train_fn(cls, v: Any) -> Any:
        if isinstance(v, str):
            from bnmem.auditing.train_fn import check_spec

            check_spec(v)
        elif v is not None and not callable(v):
            raise ValueError(f"must be 'module:function' or a function, got {type(v).__name__}")
        return v

    @field_validator("max_memory", mode="before")
    @classmethod
    def _size_text(cls, v: Any) -> Any:
        """A byte count is accepted as a number too (it is kept as text, as the flag gives it)."""
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("defenses", "model_card", mode="before")
    @classmethod
    def _path_text(cls, v: Any) -> Any:
        return None if v is None else str(v)

    @field_validator("fail_at")
    @classmethod
    def _budget(cls, v: str | None) -> str | None:
        if v is not None:
            from bnmem.auditing.gate import parse_budget

            parse_budget(v)
        return v

    @field_validator("canaries")
    @classmethod
    def _canaries(cls, v: int) -> int:
        if 0 < v < 20:
            raise ValueError(f"must be 0 (off) or at least 20, got {v} (even all guesses right on fewer canaries "
                             "certify almost nothing)")
        return v


class AuditDataFlags(StrictModel):
    """The data a model file was trained on, as ``bnmem audit`` takes it: a bnmem dataset (with the outliers it
    injects) or the user's own image folder. Each field is a flag (``--data-folder``, ``--mean``, ...); the
    checked combination becomes ``AuditConfig.data`` / ``AuditConfig.folder`` (:meth:`data_config`,
    :meth:`folder_config`).
    """

    dataset: str = Field("digits", description="a bnmem dataset: " + ", ".join(
        f"{d} (embedded)" if d == "digits" else d for d in DATASETS))
    data_folder: str | None = Field(None, description=(
        "your own images instead of --dataset: class folders under train/ and test/, or under one folder (seeded "
        "split)"))
    image_size: int | None = Field(None, description="--data-folder: resize images to this square size")
    channels: int | None = Field(None, description=(
        "--data-folder: 1 (grayscale) or 3 (RGB); default 3, as torchvision's ImageFolder loads images"))
    mean: list[float] | None = Field(None, description=(
        "--data-folder: per-channel mean, e.g. 0.485,0.456,0.406 (default: computed on the training split)"))
    std: list[float] | None = Field(None, description="--data-folder: per-channel std (with --mean)")
    normalize: bool = Field(True, description="--data-folder: normalize each channel (given or computed mean/std)")
    test_fraction: float = Field(0.2, description=(
        "--data-folder without train/ and test/: test share of each class (seeded by --data-seed)"))
    transform: str | None = Field(None, description=(
        "--data-folder: 'module:function' or 'file.py:function' mapping a PIL image to a (C, H, W) tensor"))
    mislabeled: str | None = Field(None, description=(
        "--data-folder: CSV of training file names known to be mislabeled (marks the corrupted samples)"))
    outliers: str | None = Field(None, description=(
        "--data-folder: CSV of training file names that are rare or atypical but correctly labelled (a group of "
        "their own; no mislabeling language)"))
    non_members: str | None = Field(None, description=(
        "--data-folder: held-out images your model never trained on (class folders named as the training classes, "
        "or a text file listing image paths): attack the model itself on its members against them"))
    data_root: str | None = Field(None, description="directory holding the dataset files")
    download: bool = Field(False, description="download the dataset with torchvision if missing")
    label_noise: float = Field(0.0, description=(
        "fraction of training labels flipped to another class (reproduces the corrupted samples of a bnmem "
        "dataset; with --data-seed)"))
    ood: float = Field(0.0, description="fraction of the training set that is out-of-distribution")
    ood_source: str = Field("noise", description="noise, heldout-classes, or a dataset name of the same shape")
    train_size: int | None = Field(None, description="use only N training examples (seeded subset)")
    data_seed: int = Field(0, description="seed of the corruption, or of the single-folder split")

    @model_validator(mode="after")
    def _combination(self) -> "AuditDataFlags":
        if self.data_folder is not None and (self.label_noise or self.ood or self.train_size is not None):
            raise BnmemError("--label-noise, --ood and --train-size build a bnmem dataset; with --data-folder, "
                             "name the known mislabeled files with --mislabeled instead")
        folder_only = ("image_size", "channels", "mean", "std", "transform", "mislabeled", "outliers", "non_members")
        stray = ["--" + k.replace("_", "-") for k in folder_only if getattr(self, k) is not None]
        if self.data_folder is None and stray:
            raise BnmemError(f"{', '.join(stray)} only apply with --data-folder")
        return self

    def folder_config(self) -> dict[str, Any] | None:
        """``AuditConfig.folder`` (an ImageFolderConfig's fields), or None for a bnmem dataset."""
        if self.data_folder is None:
            return None
        return {"path": self.data_folder, "image_size": self.image_size,
                **({"channels": self.channels} if self.channels is not None else {}), "mean": self.mean,
                "std": self.std, "normalize": self.normalize, "test_fraction": self.test_fraction,
                "seed": self.data_seed, "transform": self.transform, "mislabeled": self.mislabeled}

    def data_config(self) -> dict[str, Any]:
        """``AuditConfig.data`` (a DataConfig's fields)."""
        return {"dataset": self.dataset, "data_root": self.data_root, "download": self.download,
                "label_noise": self.label_noise, "ood": self.ood, "ood_source": self.ood_source,
                "train_size": self.train_size, "seed": self.data_seed}


# Fields of AuditOptions that are not command-line flags (set by the command itself, or Python only).
NOT_FLAGS = {"seed", "progress", "source", "executor"}


@dataclass
class AuditData:
    """The data a model was trained on, for ``bnmem.audit`` (``(x, y)`` tensors and what is known about them).

    Attributes:
        train: ``(x, y)`` training tensors in the model's input format (or an ``OutlierDataset``).
        test: held-out ``(x, y)`` (an OutlierDataset has its own).
        noisy_mask, ood_mask: known mislabeled / OOD training examples (bool).
        rare_mask: training examples known to be rare or atypical but correctly labelled (bool).
        non_members: held-out ``(x, y)`` the model never trained on, in its input format (the target-model audit,
            :mod:`bnmem.auditing.target`); keep them out of ``test`` (RMIA's population).
    """

    train: Any
    test: Any = None
    noisy_mask: Any = None
    ood_mask: Any = None
    rare_mask: Any = None
    non_members: Any = None


DATA_FIELDS = ("noisy_mask", "ood_mask", "rare_mask", "non_members")


def resolve(shadow: Any, train: Any, options: Any, fields: dict[str, Any]) -> tuple[Any, Any, AuditOptions,
                                                                                    dict[str, Any]]:
    """``bnmem.audit``'s keywords sorted into their objects: the shadow copies, the recipe, the options, the masks.

    ``fields`` (the call's extra keywords) may hold any field of :class:`AuditOptions`, of
    :class:`bnmem.config.ShadowCopies`, ``gs_reg`` (the recipe's λ) and the masks of :class:`AuditData`.

    Raises:
        BnmemError: an unknown keyword, or a bad value (one line naming it).
    """
    from bnmem.auditing.membership import shadow_copies
    from bnmem.config import ShadowCopies, TrainConfig

    fields = dict(fields)
    masks = {k: fields.pop(k) for k in DATA_FIELDS if k in fields}
    copy_opts = {k: fields.pop(k) for k in list(fields) if k in ShadowCopies.model_fields}
    gs_reg = fields.pop("gs_reg", None)
    unknown = [k for k in fields if k not in AuditOptions.model_fields]
    if unknown:
        raise BnmemError(f"bnmem.audit got unknown keyword(s) {', '.join(unknown)}; the options are the fields of "
                         "AuditOptions, ShadowCopies and AuditData, and gs_reg")
    try:
        base = options.model_dump() if isinstance(options, AuditOptions) else dict(options or {})
        opts = AuditOptions.model_validate({**base, **fields}) if fields or not isinstance(options, AuditOptions) \
            else options
        cfg = train if isinstance(train, TrainConfig) else TrainConfig.model_validate(train or {})
        if gs_reg is not None:
            cfg = cfg.model_copy(update={"gs_reg": TrainConfig(gs_reg=gs_reg).gs_reg})
    except ValidationError as e:
        raise BnmemError(validation_line(e)) from None
    return shadow_copies(shadow, **copy_opts), cfg, opts, masks
