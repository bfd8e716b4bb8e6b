"""What a lens is, without running it: one static :class:`LensSpec` per lens.

A spec holds every fact about a lens that can be known without importing its
runtime module (its config model, runner and hooks, which pull in torch): its
names, the results file and figure it writes, its report title and view, whether
it runs per cell or once per study, and the flags a study schedules it by. The
report, the tidy export and the CLI's command listing read specs only, so
``bnmem report`` and ``bnmem.results.load`` never import a lens module (nor
torch). The runtime part is a :class:`bnmem.lenses.registry.Lens` built from its
spec and holding it (``Lens.of(SPECS[name], config=..., run=...)``), loaded lazily by the
registry. A lens registered from outside bnmem (a plugin, a test) brings its spec
with it: :func:`add` is called by ``registry.register``.

Standard library and :mod:`bnmem.names` only (tests/test_specs.py checks that
importing and reading it loads no torch).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from bnmem.errors import BnmemError
from bnmem.names import (
    BUILTIN_LENSES, DEFENSES, GAMMA_SIGMA, GRADNORMS, LIRA, MEMORIZE, METRICS_FILE, MITIGATE, THEORY,
)

# Every results file a lens writes starts with these two keys; the report dispatches on them.
LENS_KEY = "lens"
SCHEMA_KEY = "schema_version"


@dataclass(frozen=True)
class LensSpec:
    """The static declaration of a lens.

    Attributes:
        name: the one spelling of the lens: study key, CLI command, folder inside a
            cell, and the ``"lens"`` value of its results file.
        aliases: other names accepted in a study or on the command line.
        results: the results file in its folder (holds ``"lens"`` and ``"schema_version"``).
        schema_version: version of that file's layout.
        figure: the figure file in its folder, if any.
        title: section title in the report (and the CLI's help line for a generic command).
        view: ``"module:attribute"`` of its report view (a :class:`bnmem.report.views.LensView`: its
            section, caption, key tables and tidy reader); None: the generic view (its figures, its
            summary table, every number in the tidy export).
        summary_ref: ``"module:function"`` of a torch-free ``summary(results) -> str`` the report's
            generic view prints (None: the summary of the registered lens, if its module is loaded).
        tidy: its numbers are rows of the tidy export (its view's reader, else the generic one);
            False: not exported (said in docs/results.md).
        per_cell: run once per (dataset, arch, outliers) cell; False: once per study.
        stage: study jobs of a lower stage run first (expensive lenses last).
        trains_runs: trains every (norm, seed) on the full training set with the
            cell's recipe into ``<norm>/seed<k>``, so a study can train such a run
            once for all lenses that need it (:mod:`bnmem.study.share`).
        one_seed: takes the cell's first seed only (LiRA derives every shadow
            model's seed from one base seed).
        bn_only: measures BatchNorm layers only (its cell norms become ``[batch]``).
        uses_executor: spreads its own work over the executor it is given (shadow-model
            chunks); on a cluster a study runs such a lens without its cell work's tasks, in the driver.
        phases: names of the tasks of its cell work (the runtime ``work``), which a study
            runs for every cell before calling ``run`` (which then finds that work finished).
        takes_recipe: its config mixes in the recipe options (:class:`bnmem.train.recipe.RecipeOptions`):
            under fair arms it trains each norm's selected recipe; a study runs it in its per-norm cells
            (registering checks the config agrees).
        step_factor: its seconds per example-epoch of the models it trains, relative to plain training (its
            per-epoch hooks, per-sample gradients, queries...): what its cell work declares for
            :mod:`bnmem.study.cost` before a pilot run calibrates it.
        fixed_seconds: its seconds per job besides training (summaries, figures; all of theory's).
    """

    name: str
    aliases: tuple[str, ...] = ()
    results: str = METRICS_FILE
    schema_version: int = 1
    figure: str | None = None
    title: str = ""
    view: str | None = None
    summary_ref: str | None = None
    tidy: bool = True
    per_cell: bool = True
    stage: int = 1
    trains_runs: bool = False
    one_seed: bool = False
    bn_only: bool = False
    uses_executor: bool = False
    phases: tuple[str, ...] = ()
    takes_recipe: bool = False
    step_factor: float = 1.5
    fixed_seconds: float = 0.0

    @property
    def module(self) -> str | None:
        """The module that registers a built-in lens's runtime part (None for any other lens)."""
        return BUILTIN_LENSES.get(self.name)


# The report's views of the built-in lenses (a string: the report layer sits above this one). Defenses has
# none: the report's generic view shows its figure and the summary table summary_ref names.
_VIEWS = "bnmem.report.views"

# The built-in lenses, in the order a study runs them (names.BUILTIN_LENSES).
SPECS: dict[str, LensSpec] = {s.name: s for s in (
    LensSpec(MEMORIZE, figure="memorization.png", title="Forced memorization", view=f"{_VIEWS}:MEMORIZE",
             trains_runs=True, takes_recipe=True, step_factor=1.5, fixed_seconds=5.0),
    LensSpec(GAMMA_SIGMA, aliases=("gamma_sigma",), results="gamma_sigma.json", figure="gamma_sigma.png",
             title="BN |γ|/σ per layer", view=f"{_VIEWS}:GAMMA_SIGMA", trains_runs=True, bn_only=True,
             step_factor=2.0, fixed_seconds=5.0),
    LensSpec(GRADNORMS, figure="gradnorms.png", title="Per-sample gradient norms", view=f"{_VIEWS}:GRADNORMS",
             trains_runs=True, step_factor=4.0, fixed_seconds=30.0),
    LensSpec(MITIGATE, figure="privacy_utility.png", title="Mitigation: the γ/σ regularizer",
             view=f"{_VIEWS}:MITIGATE", trains_runs=True, step_factor=1.5, fixed_seconds=10.0),
    # `rmia` in a study means "run the lira lens": its attack evaluation reports RMIA too.
    LensSpec(LIRA, aliases=("rmia",), schema_version=2, figure="roc.png", title="Membership inference (LiRA, RMIA)",
             view=f"{_VIEWS}:LIRA", one_seed=True, stage=2, uses_executor=True,
             phases=("recipe", "train", "query"), takes_recipe=True, step_factor=1.3, fixed_seconds=10.0),
    LensSpec(DEFENSES, figure="frontier.png", title="What to use instead of BN: the privacy–utility frontier",
             one_seed=True, stage=3, uses_executor=True, summary_ref="bnmem.lenses.defenses_text:summary",
             tidy=False, step_factor=2.0),
    LensSpec(THEORY, results="theory.json", figure="theory.png", title="Toy model: the (γ/σ)² amplification",
             view=f"{_VIEWS}:THEORY_VIEW", per_cell=False, stage=0, tidy=False,
             fixed_seconds=60.0),
)}
assert list(SPECS) == list(BUILTIN_LENSES), "one spec per built-in lens, in names.BUILTIN_LENSES's order"

# Specs of lenses registered from outside bnmem (plugins, tests), in registration order.
_ADDED: dict[str, LensSpec] = {}


def add(spec: LensSpec) -> None:
    """Record a non-built-in lens's spec (``registry.register`` calls this; a built-in's spec is static)."""
    if spec.name not in SPECS:
        _ADDED[spec.name] = spec


def remove(name: str) -> None:
    """Forget a non-built-in lens's spec (``registry.unregister``)."""
    _ADDED.pop(name, None)


def all_specs() -> list[LensSpec]:
    """Every known lens's spec: built-ins in study order, then the others in registration order."""
    return [*SPECS.values(), *_ADDED.values()]


def names() -> list[str]:
    """Every known lens name, built-ins first."""
    return [s.name for s in all_specs()]


def canonical(name: str) -> str:
    """The registered spelling of a lens name or alias (``gamma_sigma`` → ``gamma-sigma``, ``rmia`` → ``lira``).

    Raises:
        BnmemError: no lens by that name.
    """
    for s in all_specs():
        if name == s.name or name in s.aliases:
            return s.name
    raise BnmemError(f"unknown lens {name!r}; choose one of {', '.join(names())}")


def get(name: str) -> LensSpec:
    """The spec of the lens called ``name`` (or one of its aliases).

    Raises:
        BnmemError: no lens by that name.
    """
    name = canonical(name)
    return SPECS.get(name) or _ADDED[name]


def resolve(ref: str) -> Any:
    """The object a ``"module:attribute"`` reference names (imported on demand)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def find(name: str) -> LensSpec | None:
    """The spec of ``name`` or None (a results file from a lens this installation does not know)."""
    try:
        return get(name)
    except BnmemError:
        return None
