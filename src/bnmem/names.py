"""The one table of each kind of name bnmem accepts: datasets, architectures, norms, built-in lenses.

A leaf module (standard library only): the config models validate against these
tables, and data, models, the lens registry, the report and the CLI read them,
so a name is added in exactly one place. The objects a name stands for (loaders,
constructors, norm layers, lens modules) live in their own packages, which check
that they cover these tables (tests/test_models.py, tests/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetInfo:
    """Static facts about a dataset, known without loading it."""

    input_shape: tuple[int, int, int]
    num_classes: int
    description: str
    n_train: int = 0  # sizes of the standard training and test splits (for cost estimates before loading)
    n_test: int = 0


# Every dataset bnmem can load (loaders: bnmem.data.sources).
DATASETS: dict[str, DatasetInfo] = {
    "digits": DatasetInfo((1, 8, 8), 10, "scikit-learn's bundled 8x8 digits (1,797 images)", 898, 899),
    "mnist": DatasetInfo((1, 28, 28), 10, "MNIST handwritten digits", 60_000, 10_000),
    "fashion-mnist": DatasetInfo((1, 28, 28), 10, "Fashion-MNIST clothing images", 60_000, 10_000),
    "cifar10": DatasetInfo((3, 32, 32), 10, "CIFAR-10 natural images", 50_000, 10_000),
    "cifar100": DatasetInfo((3, 32, 32), 100, "CIFAR-100 natural images (fine labels)", 50_000, 10_000),
}

# Canonical architecture names (constructors: bnmem.models.MODELS, which lists exactly these).
ARCHS: tuple[str, ...] = ("lenet", "mlp", "resnet20", "resnet18", "densenet", "fastnet")
# Aliases a user may type, resolved to a canonical name.
ARCH_ALIASES: dict[str, str] = {"resnet": "resnet20"}

# Normalization kinds every architecture takes (layers: bnmem.models.norms.norm_factory).
BATCH_NORM = "batch"  # what the study measures
NO_NORM = "none"  # its baseline
NORMS: tuple[str, ...] = (BATCH_NORM, NO_NORM, "group", "layer")

# Training recipes (bnmem.train.recipe declares how the per-norm ones are selected). Fair arms, the default of
# studies: each norm's learning rate and epochs selected on the validation split. The paper's protocol, a named
# secondary analysis: one shared recipe, the same epochs, for every norm.
FAIR_ARMS = "per-norm"
PAPER_PROTOCOL = "shared"
RECIPES: tuple[str, ...] = (FAIR_ARMS, PAPER_PROTOCOL)
RECIPE_LABELS: dict[str, str] = {FAIR_ARMS: "fair arms (each norm's learning rate and epochs selected on validation)",
                                 PAPER_PROTOCOL: "paper's protocol (one shared recipe, same epochs)"}
# A study's recipes unless it names them: fair arms decide; the paper's protocol runs beside them (and is the
# only recipe of the lenses that take none).
DEFAULT_RECIPES: tuple[str, ...] = (FAIR_ARMS, PAPER_PROTOCOL)
# The validation split a study with fair arms carves when data.val_fraction is not set (as the mitigate lens
# carves for its λ selection): 10% of the training pool, the usual hold-out share.
FAIR_ARMS_VAL_FRACTION = 0.1

# Built-in lenses, in the order a study runs them (cheap first; membership inference last),
# each with the module that registers it (bnmem.lenses.registry imports it on first use).
MEMORIZE = "memorize"
GAMMA_SIGMA = "gamma-sigma"
GRADNORMS = "gradnorms"
MITIGATE = "mitigate"
LIRA = "lira"
DEFENSES = "defenses"
THEORY = "theory"
BUILTIN_LENSES: dict[str, str] = {
    MEMORIZE: "bnmem.lenses.memorize",
    GAMMA_SIGMA: "bnmem.lenses.gamma_sigma",
    GRADNORMS: "bnmem.lenses.gradnorms",
    MITIGATE: "bnmem.lenses.mitigate",
    LIRA: "bnmem.lenses.lira",
    DEFENSES: "bnmem.lenses.defenses",
    THEORY: "bnmem.lenses.theory",
}

# Files of a run directory, each named once (writers and readers import these).
STUDY_FILE = "study.json"  # a study's definition and the analysis plan it recorded before its first job
# The key under which a run adds each setting's selected recipes to study.json when it ends (bnmem.study.recipes):
# not part of the study (its hash, a resume and the confirmatory seeds leave it out).
SELECTED_RECIPES_KEY = "selected_recipes"
INDEX_FILE = "index.json"  # a study's cells, conditions and each lens's folder (written first)
CONFIG_FILE = "config.json"  # a run's resolved config
ENVIRONMENT_FILE = "environment.json"  # versions and machine
METRICS_FILE = "metrics.json"  # a lens's results file unless its spec names another
ERROR_FILE = "ERROR.txt"  # a failed job's one-line error
REPORT_HTML, SUMMARY_MD, SUMMARY_CSV = "report.html", "summary.md", "summary.csv"  # what bnmem report writes
