"""``bnmem audit``: normalization layers, γ/σ, gradient-norm outliers and membership risk of a user's model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from bnmem.cli.app import (
    BatchSize,
    Device,
    Epochs,
    Lr,
    Optimizer,
    Quiet,
    Schedule,
    Set,
    Threads,
    app,
    apply_overrides,
)
from bnmem.cli.fields import FieldFlag, field_flags, validated, with_flags
from bnmem.auditing.options import NOT_FLAGS, AuditDataFlags, AuditOptions
from bnmem.config import ShadowCopies, TrainConfig

if TYPE_CHECKING:
    from bnmem.auditing.run import AuditConfig

ModelFile = Annotated[Path, typer.Option("--model", help="a pickled nn.Module (torch.save(model)) or a TorchScript "
                                                          "file; unpickling runs code: trusted files only",
                                         show_default=False)]
AuditOut = Annotated[Path, typer.Option(help="output folder (audit.json, audit.md; exposure.csv with --shadow-models)")]
GsReg = Annotated[float, typer.Option(help="train the shadow copies with the γ/σ regularizer of this λ (what "
                                            "bnmem.GammaSigmaPenalty adds to your own loop; 0: off)")]
SameEpochs = Annotated[bool, typer.Option(
    "--same-epochs", help="with --shadow-models: train the copies for --epochs as given (default: as many optimizer "
                          "steps as your model took with --epochs on the whole training set; each copy has half)")]


# The shadow copies' and the audit's own flags, generated from their fields (defaults, help and rules live
# there: bnmem.config.ShadowCopies, bnmem.auditing.options.AuditOptions and AuditDataFlags); match_steps is
# --same-epochs (its negation) below.
COPY_FLAGS = field_flags(ShadowCopies, skip={"match_steps"})
OPTION_FLAGS = field_flags(AuditOptions, skip=NOT_FLAGS)
DATA_FLAGS = field_flags(AuditDataFlags, skip=set())


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
@with_flags(DATA_FLAGS + COPY_FLAGS + OPTION_FLAGS)
def audit(
    model: ModelFile,
    out: AuditOut = Path("runs/audit"),
    gs_reg: GsReg = 0.0,
    same_epochs: SameEpochs = False,
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
    **flags: Any,
) -> int:
    """Audit a trained model on the data it was trained on: norm layers, BN γ/σ, gradient-norm outliers,
    accuracy and (with --shadow-models) membership-inference risk.

    The data flags describe the training set as bnmem builds it (normalized per channel; --label-noise /
    --ood with --data-seed reproduce the corrupted samples, so the audit knows which are outliers). The
    recipe flags (--epochs, --lr, ...) are your model's; the shadow copies train with them for as many
    optimizer steps as your model took. With --data-folder the data are your own images (ImageFolder
    layout); --mislabeled names the files you know are mislabeled, --outliers rare but correct ones.
    """
    from bnmem.auditing.run import audit_file

    def of(flags_of: list[FieldFlag]) -> dict[str, Any]:
        return {f.name: flags[f.name] for f in flags_of}

    data = validated(AuditDataFlags, of(DATA_FLAGS), DATA_FLAGS)
    copies = validated(ShadowCopies, {**of(COPY_FLAGS), "match_steps": not same_epochs}, COPY_FLAGS)
    options = validated(AuditOptions, {**of(OPTION_FLAGS), "progress": not quiet}, OPTION_FLAGS)
    # None: not given (the recipe default applies, and the warning below names the flag)
    left_at_default = {k for k, v in (("momentum", momentum), ("weight_decay", weight_decay)) if v is None}
    momentum = BNMEM_DEFAULTS["momentum"] if momentum is None else momentum
    weight_decay = BNMEM_DEFAULTS["weight_decay"] if weight_decay is None else weight_decay
    recipe = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "optimizer": optimizer, "momentum": momentum,
              "weight_decay": weight_decay, "schedule": schedule, "threads": threads, "device": device,
              "gs_reg": gs_reg}
    config = audit_config(data, recipe, set)
    bnmem_trains = copies.shadow_models and options.train_fn is None  # else the recipe flags do not train the copies
    warning = recipe_warning(config.train.model_dump(), left_at_default, set or []) if bnmem_trains else ""
    # workers > 1: the audit opens (and closes) its own local pool for the shadow copies. The warning is printed
    # (and recorded in the report) once every input has passed its checks, before any copy trains.
    result = audit_file(model, config, out=out, shadow=copies, options=options,
                        notices=[{"kind": "recipe", "text": warning}] if warning else [])
    sys.stderr.flush()  # progress output (stderr) ends before the report (stdout) begins
    typer.echo(result.markdown)
    typer.echo(f"results in {result.out}/ ({', '.join(result.files)})")
    if result.mlflow is not None:
        typer.echo(f"mlflow: run {result.mlflow['run_id']} in {result.mlflow['tracking_uri']}")
    if options.model_card is not None:
        typer.echo(f"model card: the Privacy evaluation section is in {options.model_card}")
    if result.gate is None:
        return 0
    print(f"bnmem: {result.gate['text']}", file=sys.stderr, flush=True)
    return result.gate["exit_code"]  # the gate's documented code (bnmem.auditing.gate.EXIT_CODES)


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


def audit_config(data: AuditDataFlags, recipe: dict[str, Any], overrides: list[str] | None) -> AuditConfig:
    """The audit's config: the data flags (their combination already checked), the recipe, ``--set`` over them."""
    from bnmem.auditing.run import AuditConfig

    return AuditConfig.model_validate(apply_overrides({"data": data.data_config(), "folder": data.folder_config(),
                                                       "train": recipe, "outliers": data.outliers,
                                                       "non_members": data.non_members}, overrides))
