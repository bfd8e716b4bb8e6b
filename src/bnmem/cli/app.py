"""The typer app and the options every experiment command shares.

Commands live in ``bnmem.cli.commands.*``; each flag maps onto a field of the
pydantic config models, and ``--set a.b=c`` reaches any field the flags don't.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from bnmem.config import apply_overrides, parse_list
from bnmem.errors import BnmemError
from bnmem.names import ARCH_ALIASES, ARCHS, DATASETS, NORMS

app = typer.Typer(
    name="bnmem",
    help="Measure, explain and mitigate how Batch Normalization amplifies memorization and privacy risk.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Measure, explain and mitigate how Batch Normalization amplifies memorization and privacy risk."""

# --- shared options (Annotated aliases so each command lists only what it uses) ---
# Help texts list the names of bnmem.names (the one table of each).
_ALIASED = {t: a for a, t in ARCH_ALIASES.items()}
Dataset = Annotated[str, typer.Option(help=", ".join(f"{d} (embedded)" if d == "digits" else d for d in DATASETS))]
DataRoot = Annotated[Optional[Path], typer.Option(help="directory holding the dataset files")]
Download = Annotated[bool, typer.Option("--download", help="download the dataset with torchvision if missing")]
Arch = Annotated[str, typer.Option(help=", ".join(f"{a} ({_ALIASED[a]})" if a in _ALIASED else a for a in ARCHS))]
Norms = Annotated[str, typer.Option(help="comma-separated norms: " + ", ".join(NORMS))]
LabelNoise = Annotated[float, typer.Option(help="fraction of training labels flipped to another class")]
Ood = Annotated[float, typer.Option(help="fraction of the training set that is out-of-distribution")]
OodSource = Annotated[str, typer.Option(help="noise, heldout-classes, or a dataset name of the same shape")]
TrainSize = Annotated[Optional[int], typer.Option(help="use only N training examples (seeded subset)")]
DataSeed = Annotated[int, typer.Option(help="seed of the corruption (same for every norm and model seed)")]
Epochs = Annotated[int, typer.Option(help="training epochs")]
Seeds = Annotated[str, typer.Option(help="number of seeds (3 → 0,1,2) or a comma list (0,5,7)")]
Lr = Annotated[float, typer.Option(help="learning rate")]
BatchSize = Annotated[int, typer.Option(help="batch size")]
Optimizer = Annotated[str, typer.Option(help="sgd (momentum) or adam")]
Momentum = Annotated[float, typer.Option(help="SGD momentum")]
WeightDecay = Annotated[float, typer.Option(help="weight decay on weight matrices and kernels")]
NormWeightDecay = Annotated[float, typer.Option(help="weight decay on normalization γ/β (changes γ/σ)")]
Schedule = Annotated[str, typer.Option(help="learning-rate schedule: constant, cosine, step")]
Threads = Annotated[int, typer.Option(help="torch threads per training job (fixes reproducibility)")]
GsReg = Annotated[float, typer.Option(help="λ of the γ/σ regularizer (0: off)")]
GsTau = Annotated[float, typer.Option(help="τ of the γ/σ regularizer")]
Device = Annotated[str, typer.Option(help="torch device: cpu, cuda, cuda:1, ...")]
Out = Annotated[Path, typer.Option(help="run directory (rerun the same command to resume)")]
Set = Annotated[Optional[list[str]], typer.Option("--set", help="override any config field: --set train.lr=0.1")]
Quiet = Annotated[bool, typer.Option("--quiet", help="no progress bars")]
Workers = Annotated[int, typer.Option(help="local executor: jobs run at once in worker processes (1 thread each)")]


def parse_flag_list(value: str, kind: type, flag: str, what: str) -> list:
    """Parse a comma-list flag value; a bad item is a one-line error naming the flag."""
    try:
        return parse_list(value, kind)
    except ValueError as e:
        raise BnmemError(f"{flag} must be a comma list of {what}, got {value!r}") from e


def parse_seeds(value: str) -> list[int]:
    """'3' → [0, 1, 2]; '0,5,7' → [0, 5, 7]."""
    try:
        if "," not in value:
            n = int(value)
            if n < 1:
                raise BnmemError(f"--seeds must be at least 1, got {n}")
            return list(range(n))
        return parse_list(value, int)
    except ValueError as e:
        raise BnmemError(f"--seeds must be a count or a comma list of integers, got {value!r}") from e


def experiment_dict(
    *,
    dataset: str,
    data_root: Path | None,
    download: bool,
    arch: str,
    norms: str,
    label_noise: float,
    ood: float,
    ood_source: str,
    train_size: int | None,
    data_seed: int,
    epochs: int,
    seeds: str | None,
    lr: float,
    batch_size: int,
    optimizer: str,
    momentum: float,
    weight_decay: float,
    norm_weight_decay: float,
    schedule: str,
    threads: int,
    gs_reg: float,
    gs_tau: float,
    device: str,
) -> dict[str, Any]:
    """The nested config dict that the shared flags describe (validated by the caller)."""
    return {
        "data": {
            "dataset": dataset,
            "data_root": str(data_root) if data_root else None,
            "download": download,
            "label_noise": label_noise,
            "ood": ood,
            "ood_source": ood_source,
            "train_size": train_size,
            "seed": data_seed,
        },
        "arch": arch,
        "norms": parse_list(norms),
        # None: the command leaves the seeds to its config's default (a one-seed lens has its own).
        **({} if seeds is None else {"seeds": parse_seeds(seeds)}),
        "train": {
            "optimizer": optimizer,
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "norm_weight_decay": norm_weight_decay,
            "schedule": schedule,
            "epochs": epochs,
            "batch_size": batch_size,
            "threads": threads,
            "gs_reg": gs_reg,
            "gs_tau": gs_tau,
            "device": device,
        },
    }


# Shared experiment flags: name -> (annotated type, default). A command decorated
# with ``experiment_options`` receives them folded into one ``exp`` dict.
EXPERIMENT_OPTIONS: dict[str, tuple[Any, Any]] = {
    "dataset": (Dataset, "digits"),
    "data_root": (DataRoot, None),
    "download": (Download, False),
    "arch": (Arch, "lenet"),
    "norms": (Norms, "batch,none"),
    "label_noise": (LabelNoise, 0.05),
    "ood": (Ood, 0.0),
    "ood_source": (OodSource, "noise"),
    "train_size": (TrainSize, None),
    "data_seed": (DataSeed, 0),
    "epochs": (Epochs, 30),
    "seeds": (Seeds, "3"),
    "lr": (Lr, 0.05),
    "batch_size": (BatchSize, 64),
    "optimizer": (Optimizer, "sgd"),
    "momentum": (Momentum, 0.9),
    "weight_decay": (WeightDecay, 5e-4),
    "norm_weight_decay": (NormWeightDecay, 0.0),
    "schedule": (Schedule, "constant"),
    "threads": (Threads, 1),
    "gs_reg": (GsReg, 0.0),
    "gs_tau": (GsTau, 1.0),
    "device": (Device, "cpu"),
}


def experiment_options(helps: dict[str, str] | None = None, **defaults: Any):
    """Decorator: add the shared experiment flags to a typer command.

    The command's own parameters stay as they are; the shared ones (with
    per-command ``defaults`` and, where a flag means something narrower for
    this command, per-command ``helps``) arrive folded into a nested config
    dict ``exp`` (see :func:`experiment_dict`), with ``--set`` overrides applied.
    """
    import functools
    import inspect
    import typing

    helps = helps or {}
    unknown = (set(defaults) | set(helps)) - set(EXPERIMENT_OPTIONS)
    if unknown:
        raise TypeError(f"unknown shared options {unknown}")

    def deco(fn):
        sig = inspect.signature(fn)
        # Resolve the command's own annotations in its module: with
        # `from __future__ import annotations` they are strings that typer would
        # otherwise evaluate in this module and lose their typer.Option help.
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [p.replace(annotation=hints.get(p.name, p.annotation))
               for p in sig.parameters.values() if p.name != "exp"]
        def annotation(name: str, ann: Any) -> Any:
            if name not in helps:
                return ann
            base = typing.get_args(ann)[0]
            return Annotated[base, typer.Option(help=helps[name])]

        shared = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation(name, ann),
                              default=defaults.get(name, default))
            for name, (ann, default) in EXPERIMENT_OPTIONS.items()
        ]
        overrides = inspect.Parameter("set", inspect.Parameter.KEYWORD_ONLY, annotation=Set, default=None)

        @functools.wraps(fn)
        def wrapper(**kwargs):
            shared_values = {k: kwargs.pop(k) for k in EXPERIMENT_OPTIONS}
            exp = apply_overrides(experiment_dict(**shared_values), kwargs.pop("set"))
            return fn(exp=exp, **kwargs)

        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + shared + [overrides]
        wrapper.__signature__ = sig.replace(parameters=params)
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__  # typer must see the merged signature, not fn's
        return wrapper

    return deco
