"""``bnmem audit``: normalization layers, γ/σ, gradient-norm outliers and membership risk of a user's model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bnmem.cli.app import (
    BatchSize,
    Device,
    Epochs,
    Lr,
    Momentum,
    Optimizer,
    Quiet,
    Schedule,
    Set,
    Threads,
    WeightDecay,
    app,
    apply_overrides,
)
from bnmem.cli.fields import FieldFlag, field_flags, validated, with_flags
from bnmem.auditing.options import NOT_FLAGS, AuditDataFlags, AuditOptions
from bnmem.config import ShadowCopies

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
    momentum: Momentum = 0.9,
    weight_decay: WeightDecay = 5e-4,
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
    recipe = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "optimizer": optimizer, "momentum": momentum,
              "weight_decay": weight_decay, "schedule": schedule, "threads": threads, "device": device,
              "gs_reg": gs_reg}
    config = audit_config(data, recipe, set)
    # workers > 1: the audit opens (and closes) its own local pool for the shadow copies.
    result = audit_file(model, config, out=out, shadow=copies, options=options)
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


def audit_config(data: AuditDataFlags, recipe: dict[str, Any], overrides: list[str] | None) -> AuditConfig:
    """The audit's config: the data flags (their combination already checked), the recipe, ``--set`` over them."""
    from bnmem.auditing.run import AuditConfig

    return AuditConfig.model_validate(apply_overrides({"data": data.data_config(), "folder": data.folder_config(),
                                                       "train": recipe, "outliers": data.outliers}, overrides))
