"""``bnmem audit``: normalization layers, γ/σ, gradient-norm outliers and membership risk of a user's model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from bnmem.cli.app import (
    BatchSize,
    DataRoot,
    DataSeed,
    Dataset,
    Device,
    Download,
    Epochs,
    LabelNoise,
    Lr,
    Ood,
    OodSource,
    Optimizer,
    Quiet,
    Schedule,
    Set,
    Threads,
    TrainSize,
    Workers,
    app,
    apply_overrides,
    parse_flag_list,
)
from bnmem.cli.fields import field_flags, validated, with_flags
from bnmem.config import ShadowCopies, TrainConfig
from bnmem.errors import BnmemError

if TYPE_CHECKING:
    from bnmem.auditing.run import AuditConfig

ModelFile = Annotated[Path, typer.Option("--model", help="a pickled nn.Module (torch.save(model)) or a TorchScript "
                                                          "file; unpickling runs code: trusted files only",
                                         show_default=False)]
AuditOut = Annotated[Path, typer.Option(help="output folder (audit.json, audit.md)")]
TopK = Annotated[int, typer.Option(help="list the K training examples with the largest gradient norms")]
MaxExamples = Annotated[Optional[int], typer.Option(help="measure gradient norms on at most N training examples "
                                                         "(seeded subset)")]
MaxMemory = Annotated[Optional[str], typer.Option(help="memory budget of the gradient-norm measurement, e.g. 8GB "
                                                       "(default: half the free RAM, or GPU memory with --device cuda)",
                                                  show_default=False)]
DataFolder = Annotated[Optional[Path], typer.Option(help="your own images instead of --dataset: class folders under "
                                                         "train/ and test/, or under one folder (seeded split)",
                                                    show_default=False)]
ImageSize = Annotated[Optional[int], typer.Option(help="--data-folder: resize images to this square size")]
Channels = Annotated[Optional[int], typer.Option(help="--data-folder: 1 (grayscale) or 3 (RGB); default 3, as "
                                                      "torchvision's ImageFolder loads images", show_default=False)]
Mean = Annotated[Optional[str], typer.Option(help="--data-folder: per-channel mean, e.g. 0.485,0.456,0.406 "
                                                  "(default: computed on the training split)")]
Std = Annotated[Optional[str], typer.Option(help="--data-folder: per-channel std (with --mean)")]
Normalize = Annotated[bool, typer.Option("--normalize/--no-normalize",
                                         help="--data-folder: normalize each channel (given or computed mean/std)")]
TestFraction = Annotated[float, typer.Option(help="--data-folder without train/ and test/: test share of each "
                                                  "class (seeded by --data-seed)")]
TransformHook = Annotated[Optional[str], typer.Option("--transform", help="--data-folder: 'module:function' or "
                                                      "'file.py:function' mapping a PIL image to a (C, H, W) tensor",
                                                      show_default=False)]
GsReg = Annotated[float, typer.Option(help="train the shadow copies with the γ/σ regularizer of this λ (what "
                                            "bnmem.GammaSigmaPenalty adds to your own loop; 0: off)")]
Mislabeled = Annotated[Optional[Path], typer.Option(help="--data-folder: CSV of training file names known to be "
                                                         "mislabeled (marks the corrupted samples)",
                                                    show_default=False)]
Outliers = Annotated[Optional[Path], typer.Option(help="--data-folder: CSV of training file names that are rare or "
                                                       "atypical but correctly labelled (a group of their own; no "
                                                       "mislabeling language)", show_default=False)]
SameEpochs = Annotated[bool, typer.Option(
    "--same-epochs", help="with --shadow-models: train the copies for --epochs as given (default: as many optimizer "
                          "steps as your model took with --epochs on the whole training set; each copy has half)")]


# The shadow copies' flags, generated from their fields (defaults, help and rules live there); match_steps is
# --same-epochs (its negation) below.
COPY_FLAGS = field_flags(ShadowCopies, skip={"match_steps"})


# Recipe flags whose bnmem default differs from torch.optim.SGD's: a user who leaves one out trains the shadow
# copies with another recipe than their model's, silently; the audit says so (recipe_warning).
TORCH_SGD_DEFAULTS = {"momentum": 0.0, "weight_decay": 0.0}
BNMEM_DEFAULTS = {k: TrainConfig.model_fields[k].default for k in TORCH_SGD_DEFAULTS}
AuditMomentum = Annotated[Optional[float], typer.Option(
    help=f"SGD momentum (default {BNMEM_DEFAULTS['momentum']:g}; torch.optim.SGD's is 0: give your training's)",
    show_default=False)]
AuditWeightDecay = Annotated[Optional[float], typer.Option(
    help=f"weight decay on weight matrices and kernels (default {BNMEM_DEFAULTS['weight_decay']:g}; "
         "torch.optim.SGD's is 0: give your training's)", show_default=False)]


@app.command()
@with_flags(COPY_FLAGS)
def audit(
    model: ModelFile,
    dataset: Dataset = "digits",
    data_folder: DataFolder = None,
    image_size: ImageSize = None,
    channels: Channels = None,
    mean: Mean = None,
    std: Std = None,
    normalize: Normalize = True,
    test_fraction: TestFraction = 0.2,
    transform: TransformHook = None,
    mislabeled: Mislabeled = None,
    outliers: Outliers = None,
    data_root: DataRoot = None,
    download: Download = False,
    label_noise: LabelNoise = 0.0,
    ood: Ood = 0.0,
    ood_source: OodSource = "noise",
    train_size: TrainSize = None,
    data_seed: DataSeed = 0,
    out: AuditOut = Path("runs/audit"),
    top_k: TopK = 20,
    max_examples: MaxExamples = 10_000,
    gs_reg: GsReg = 0.0,
    same_epochs: SameEpochs = False,
    max_memory: MaxMemory = None,
    workers: Workers = 1,
    defenses: Annotated[Optional[Path], typer.Option(
        help="a finished defenses run (bnmem run studies/defenses.yaml): cite its privacy-utility frontier in "
             "the recommendations")] = None,
    epochs: Epochs = 30,
    lr: Lr = 0.05,
    batch_size: BatchSize = 64,
    optimizer: Optimizer = "sgd",
    momentum: AuditMomentum = None,
    weight_decay: AuditWeightDecay = None,
    schedule: Schedule = "constant",
    threads: Threads = 1,
    device: Device = "cpu",
    set: Set = None,  # noqa: A002 - the flag is --set
    quiet: Quiet = False,
    **shadow: Any,
) -> None:
    """Audit a trained model on the data it was trained on: norm layers, BN γ/σ, gradient-norm outliers,
    accuracy and (with --shadow-models) membership-inference risk.

    The data flags describe the training set as bnmem builds it (normalized per channel; --label-noise /
    --ood with --data-seed reproduce the corrupted samples, so the audit knows which are outliers). The
    recipe flags (--epochs, --lr, ...) are your model's; the shadow copies train with them for as many
    optimizer steps as your model took. With --data-folder the data are your own images (ImageFolder
    layout); --mislabeled names the files you know are mislabeled, --outliers rare but correct ones.
    """
    from bnmem.auditing.run import audit_file

    copies = validated(ShadowCopies, {**shadow, "match_steps": not same_epochs}, COPY_FLAGS)
    # None: not given (the recipe default applies, and the warning below names the flag)
    left_at_default = {k for k, v in (("momentum", momentum), ("weight_decay", weight_decay)) if v is None}
    momentum = BNMEM_DEFAULTS["momentum"] if momentum is None else momentum
    weight_decay = BNMEM_DEFAULTS["weight_decay"] if weight_decay is None else weight_decay
    config = audit_config(locals())
    if copies.shadow_models:
        warning = recipe_warning(config.train.model_dump(), left_at_default, set or [])
        if warning:
            print(f"bnmem: warning: {warning}", file=sys.stderr, flush=True)
    # workers > 1: the audit opens (and closes) its own local pool for the shadow copies.
    result = audit_file(model, config, out=out, top_k=top_k, max_examples=max_examples, shadow=copies,
                        progress=not quiet, max_memory=max_memory, defenses=defenses, workers=workers)
    sys.stderr.flush()  # progress output (stderr) ends before the report (stdout) begins
    typer.echo(result.markdown)
    typer.echo(f"results in {result.out}/ (audit.json, audit.md, gradient_norms.npy)")


def recipe_warning(train: dict[str, Any], left: set[str], overrides: list[str]) -> str:
    """The recipe the shadow copies use and the flags left at bnmem's default that differ from PyTorch's
    (``left``: the recipe flags not given; a ``--set train.KEY=...`` counts as given); '' when none is left."""
    left = {k for k in left if not any(o.split("=", 1)[0].strip() == f"train.{k}" for o in overrides)}
    differ = [k for k in TORCH_SGD_DEFAULTS if k in left and train.get(k) != TORCH_SGD_DEFAULTS[k]]
    if not differ or train.get("optimizer") != "sgd":
        return ""
    flags = ", ".join(f"--{k.replace('_', '-')} {train[k]:g} (torch.optim.SGD: {TORCH_SGD_DEFAULTS[k]:g})"
                      for k in differ)
    return (f"the shadow copies train with SGD lr {train['lr']:g}, momentum {train['momentum']:g}, weight decay "
            f"{train['weight_decay']:g}, batch size {train['batch_size']}, {train['schedule']} schedule; left at "
            f"bnmem's defaults, which differ from PyTorch's: {flags}. Give your training's values (e.g. --momentum "
            f"0 --weight-decay 0 for a plain torch.optim.SGD) or the copies do not use your recipe")


def audit_config(a: dict[str, Any]) -> AuditConfig:
    """The audit's config from the command's arguments (``locals()`` of :func:`audit`), flag combinations checked.

    Raises:
        BnmemError: data-folder flags without --data-folder, or bnmem-dataset flags with it.
    """
    from bnmem.auditing.run import AuditConfig

    if a["data_folder"] is not None and (a["label_noise"] or a["ood"] or a["train_size"] is not None):
        raise BnmemError("--label-noise, --ood and --train-size build a bnmem dataset; with --data-folder, "
                         "name the known mislabeled files with --mislabeled instead")
    folder_only = {"--image-size": "image_size", "--channels": "channels", "--mean": "mean", "--std": "std",
                   "--transform": "transform", "--mislabeled": "mislabeled", "--outliers": "outliers"}
    stray = [flag for flag, key in folder_only.items() if a[key] is not None]
    if a["data_folder"] is None and stray:
        raise BnmemError(f"{', '.join(stray)} only apply with --data-folder")
    folder = None if a["data_folder"] is None else {
        "path": str(a["data_folder"]), "image_size": a["image_size"],
        **({"channels": a["channels"]} if a["channels"] is not None else {}),
        "mean": parse_flag_list(a["mean"], float, "--mean", "numbers") if a["mean"] else None,
        "std": parse_flag_list(a["std"], float, "--std", "numbers") if a["std"] else None,
        "normalize": a["normalize"], "test_fraction": a["test_fraction"], "seed": a["data_seed"],
        "transform": a["transform"], "mislabeled": str(a["mislabeled"]) if a["mislabeled"] else None}
    data = {"dataset": a["dataset"], "data_root": str(a["data_root"]) if a["data_root"] else None,
            "download": a["download"], "label_noise": a["label_noise"], "ood": a["ood"],
            "ood_source": a["ood_source"], "train_size": a["train_size"], "seed": a["data_seed"]}
    recipe = {k: a[k] for k in ("epochs", "lr", "batch_size", "optimizer", "momentum", "weight_decay", "schedule",
                                 "threads", "device", "gs_reg")}
    return AuditConfig.model_validate(apply_overrides({"data": data, "folder": folder, "train": recipe,
                                                       "outliers": str(a["outliers"]) if a["outliers"] else None},
                                                      a["set"]))
