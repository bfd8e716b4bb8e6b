"""``bnmem audit``: normalization layers, γ/σ, gradient-norm outliers and membership risk of a user's model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

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
    Momentum,
    Ood,
    OodSource,
    Optimizer,
    Quiet,
    Schedule,
    Set,
    Threads,
    TrainSize,
    WeightDecay,
    app,
    apply_overrides,
)

ModelFile = Annotated[Path, typer.Option("--model", help="a pickled nn.Module (torch.save(model)) or a TorchScript "
                                                          "file; unpickling runs code: trusted files only",
                                         show_default=False)]
AuditOut = Annotated[Path, typer.Option(help="output folder (audit.json, audit.md)")]
TopK = Annotated[int, typer.Option(help="list the K training examples with the largest gradient norms")]
MaxExamples = Annotated[Optional[int], typer.Option(help="measure gradient norms on at most N training examples "
                                                         "(seeded subset)")]
ShadowModels = Annotated[int, typer.Option(help="also estimate membership risk with M shadow copies of the "
                                                "architecture trained with the recipe flags (even, >= 4; 0: off)")]


@app.command()
def audit(
    model: ModelFile,
    dataset: Dataset = "digits",
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
    shadow_models: ShadowModels = 0,
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
) -> None:
    """Audit a trained model on the data it was trained on: norm layers, BN γ/σ, gradient-norm outliers,
    accuracy and (with --shadow-models) membership-inference risk.

    The data flags describe the training set as bnmem builds it (normalized per channel; --label-noise /
    --ood with --data-seed reproduce the corrupted samples, so the audit knows which are outliers). The
    recipe flags (--epochs, --lr, ...) train the shadow copies.
    """
    from bnmem.auditing.run import AuditConfig, audit_file

    config = AuditConfig.model_validate(apply_overrides({
        "data": {"dataset": dataset, "data_root": str(data_root) if data_root else None, "download": download,
                 "label_noise": label_noise, "ood": ood, "ood_source": ood_source, "train_size": train_size,
                 "seed": data_seed},
        "train": {"epochs": epochs, "lr": lr, "batch_size": batch_size, "optimizer": optimizer,
                  "momentum": momentum, "weight_decay": weight_decay, "schedule": schedule, "threads": threads,
                  "device": device},
    }, set))
    result = audit_file(model, config, out=out, top_k=top_k, max_examples=max_examples,
                        shadow_models=shadow_models, progress=not quiet)
    typer.echo(result.markdown)
    typer.echo(f"results in {result.out}/ (audit.json, audit.md, gradient_norms.npy)")
