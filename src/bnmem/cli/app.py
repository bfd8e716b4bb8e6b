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
    add_completion=False,
    pretty_exceptions_enable=False,
    # -h as well as --help, on every command (click hands the setting down to subcommands).
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from bnmem.version import __version__

        typer.echo(f"bnmem {__version__}")
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="print bnmem's version and exit")] = False,
) -> None:
    """Measure, explain and mitigate how Batch Normalization amplifies memorization and privacy risk."""
    if ctx.invoked_subcommand is None:  # bare `bnmem`: the help, and success (as git and pip do)
        typer.echo(ctx.get_help())
        raise typer.Exit(0)

# --- shared options (Annotated aliases so each command lists only what it uses) ---
# Help texts list the names of bnmem.names (the one table of each).
_ALIASED = {t: a for a, t in ARCH_ALIASES.items()}
Dataset = Annotated[str, typer.Option(help=", ".join(f"{d} (embedded)" if d == "digits" else d for d in DATASETS))]
DataRoot = Annotated[Optional[Path], typer.Option(help="directory holding the dataset files")]
Download = Annotated[bool, typer.Option("--download", help="download the dataset with torchvision if missing")]
Arch = Annotated[str, typer.Option(help=", ".join(f"{a} ({_ALIASED[a]})" if a in _ALIASED else a for a in ARCHS))]
Norms = Annotated[str, typer.Option(help="comma-separated norms: " + ", ".join(NORMS))]
LabelNoise = Annotated[float, typer.Option(help="fraction of training labels flipped to another class (the lens "
                                                "commands default to 0.05, so there are corrupted samples to measure; "
                                                "study files and bnmem audit default to 0)")]
Ood = Annotated[float, typer.Option(help="fraction of the training set that is out-of-distribution")]
OodSource = Annotated[str, typer.Option(help="noise, heldout-classes, or a dataset name of the same shape")]
TrainSize = Annotated[Optional[int], typer.Option(help="use only N training examples (seeded subset)")]
DataSeed = Annotated[int, typer.Option(help="seed of the corruption (same for every norm and model seed)")]
Epochs = Annotated[int, typer.Option(help="training epochs")]
# --seed and --n-seeds default to None (so a clash with --seeds LIST is seen); their help states the
# command's own default (experiment_options fills it in).
Seed = Annotated[Optional[int], typer.Option(help="first model seed; the seeds are --seed, --seed+1, ... "
                                                  "(default: {})", show_default=False)]
NSeeds = Annotated[Optional[int], typer.Option(help="number of model seeds (default: {})", show_default=False)]
Seeds = Annotated[Optional[str], typer.Option(help="an explicit comma list of model seeds (0,5,7), instead of --seed "
                                                   "and --n-seeds", show_default=False)]
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
Out = Annotated[Optional[Path], typer.Option(
    help="run directory (default: runs/<command>-<hash of the configuration>, so a changed flag never meets the "
         "run of another configuration); rerun the same command to resume", show_default=False)]
Set = Annotated[Optional[list[str]], typer.Option("--set", help="override any config field: --set train.lr=0.1")]
Quiet = Annotated[bool, typer.Option("--quiet", help="no progress bars")]
Workers = Annotated[int, typer.Option(help="local executor: jobs run at once in worker processes (1 thread each)")]
RunWorkers = Annotated[Optional[int], typer.Option(
    help="local executor: jobs run at once in worker processes (1 thread each); default: the cores this process "
         "may use (os.sched_getaffinity), 1 with --executor ray", show_default=False)]


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; os.cpu_count where there is none)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def parse_flag_list(value: str, kind: type, flag: str, what: str) -> list:
    """Parse a comma-list flag value; a bad item is a one-line error naming the flag."""
    try:
        return parse_list(value, kind)
    except ValueError as e:
        raise BnmemError(f"{flag} must be a comma list of {what}, got {value!r}") from e


# The most model seeds one command takes (a count beyond it is a typo; its list alone would take gigabytes).
MAX_SEEDS = 10_000


def seed_list(seed: int | None, n_seeds: int | None, seeds: str | None, default_first: int = 0,
              default_count: int = 3) -> list[int]:
    """The model seeds of ``--seed``/``--n-seeds`` or ``--seeds LIST`` (one convention for every command).

    ``--seeds 3`` (a bare count, the old spelling) still means three seeds from --seed, with a
    deprecation line on stderr.

    Raises:
        BnmemError: a bad count or list, or a list given together with --seed/--n-seeds.
    """
    if seeds is not None and "," not in seeds:
        try:
            count = int(seeds)
        except ValueError:
            raise BnmemError(f"--seeds must be a comma list of integers (or use --n-seeds), got {seeds!r}") from None
        typer.echo(f"bnmem: warning: --seeds {count} (a count) is deprecated; use --n-seeds {count}", err=True)
        if n_seeds is not None:
            raise BnmemError("give --n-seeds or the old --seeds COUNT, not both")
        seeds, n_seeds = None, count
    if seeds is not None:
        if seed is not None or n_seeds is not None:
            raise BnmemError("give either --seeds LIST or --seed/--n-seeds, not both")
        return parse_flag_list(seeds, int, "--seeds", "integers")
    n = default_count if n_seeds is None else n_seeds
    if n < 1:
        raise BnmemError(f"--n-seeds must be at least 1, got {n}")
    if n > MAX_SEEDS:  # the list itself would fill the memory before any check of the config
        raise BnmemError(f"--n-seeds {n} is more than the {MAX_SEEDS} model seeds bnmem trains in one run")
    first = default_first if seed is None else seed
    return list(range(first, first + n))


# Shared flag -> the config field it sets (a dotted path of ExperimentConfig).
FLAG_FIELDS = {
    "dataset": "data.dataset", "data_root": "data.data_root", "download": "data.download",
    "label_noise": "data.label_noise", "ood": "data.ood", "ood_source": "data.ood_source",
    "train_size": "data.train_size", "data_seed": "data.seed", "arch": "arch", "norms": "norms",
    "epochs": "train.epochs", "lr": "train.lr", "batch_size": "train.batch_size", "optimizer": "train.optimizer",
    "momentum": "train.momentum", "weight_decay": "train.weight_decay",
    "norm_weight_decay": "train.norm_weight_decay", "schedule": "train.schedule", "threads": "train.threads",
    "gs_reg": "train.gs_reg", "gs_tau": "train.gs_tau", "device": "train.device",
}


def experiment_dict(seeds: list[int] | None = None, **flags: Any) -> dict[str, Any]:
    """The nested config dict that the shared flags describe (validated by the caller).

    ``seeds`` None leaves the seeds to the command's config default.
    """
    out: dict[str, Any] = {} if seeds is None else {"seeds": seeds}
    for flag, value in flags.items():
        if flag == "data_root":
            value = str(value) if value else None
        elif flag == "norms":
            value = parse_list(value)
        *parents, leaf = FLAG_FIELDS[flag].split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def config_defaults(config: type) -> dict[str, Any]:
    """The shared flags' defaults that a config class declares (a lens's own defaults win over the flags').

    ``norms`` as a comma list; ``seed``/``n_seeds`` from its seed list (an explicit ``seeds`` list when
    it is not consecutive). ``label_noise`` is left to the lens commands' 0.05 (its --help says so).
    """
    try:
        dumped = config().model_dump(mode="json")
    except (ValueError, TypeError, BnmemError):  # a config without a default for everything: the shared ones stay
        return {}
    out: dict[str, Any] = {}
    for flag, path in FLAG_FIELDS.items():
        node: Any = dumped
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if flag != "label_noise" and node is not None:
            out[flag] = ",".join(node) if flag == "norms" else node
    seeds = dumped.get("seeds")
    if isinstance(seeds, list) and seeds:
        if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
            out.update(seed=seeds[0], n_seeds=len(seeds))
        else:
            out["seeds"] = ",".join(map(str, seeds))
    return out


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
    "seed": (Seed, 0),
    "n_seeds": (NSeeds, 3),
    "seeds": (Seeds, None),
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


def experiment_options(helps: dict[str, str] | None = None, omit: tuple[str, ...] = (), **defaults: Any):
    """Decorator: add the shared experiment flags to a typer command.

    The command's own parameters stay as they are; the shared ones (with
    per-command ``defaults`` and, where a flag means something narrower for
    this command, per-command ``helps``) arrive folded into a nested config
    dict ``exp`` (see :func:`experiment_dict`), with ``--set`` overrides applied.
    ``omit=("n_seeds",)`` leaves out --n-seeds (a one-seed command: one base seed).
    """
    import functools
    import inspect
    import typing

    helps = helps or {}
    unknown = (set(defaults) | set(helps) | set(omit)) - set(EXPERIMENT_OPTIONS)
    if unknown or set(omit) - {"n_seeds"}:
        raise TypeError(f"unknown or required shared options {unknown or set(omit)}")
    first = defaults.get("seed", EXPERIMENT_OPTIONS["seed"][1])
    count = 1 if "n_seeds" in omit else defaults.get("n_seeds", EXPERIMENT_OPTIONS["n_seeds"][1])

    def annotation(name: str, ann: Any) -> Any:
        base, option = typing.get_args(ann)[:2]
        text = helps.get(name, option.help)
        if name in ("seed", "n_seeds"):
            text = text.format(first if name == "seed" else count)
        return ann if text == option.help else Annotated[base, typer.Option(help=text, show_default=False)]

    def deco(fn):
        sig = inspect.signature(fn)
        # Resolve the command's own annotations in its module: with
        # `from __future__ import annotations` they are strings that typer would
        # otherwise evaluate in this module and lose their typer.Option help.
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [p.replace(annotation=hints.get(p.name, p.annotation))
               for p in sig.parameters.values() if p.name != "exp"]
        shared = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation(name, ann),
                              # the seed flags' defaults live in their help (None: not given)
                              default=None if name in ("seed", "n_seeds") else defaults.get(name, default))
            for name, (ann, default) in EXPERIMENT_OPTIONS.items() if name not in omit
        ]
        overrides = inspect.Parameter("set", inspect.Parameter.KEYWORD_ONLY, annotation=Set, default=None)

        @functools.wraps(fn)
        def wrapper(**kwargs):
            shared_values = {k: kwargs.pop(k, None) for k in EXPERIMENT_OPTIONS}
            seeds = seed_list(*(shared_values.pop(k) for k in ("seed", "n_seeds", "seeds")), first, count)
            exp = apply_overrides(experiment_dict(**shared_values, seeds=seeds), kwargs.pop("set"))
            return fn(exp=exp, **kwargs)

        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + shared + [overrides]
        wrapper.__signature__ = sig.replace(parameters=params)
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__  # typer must see the merged signature, not fn's
        return wrapper

    return deco
