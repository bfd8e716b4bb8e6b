"""The lenses a study can run, and how a study job calls each lens's runner.

A lens is one experiment runner (``bnmem memorize``, ``bnmem lira``, ...). Each
is called the same way a user would call it from the command line, with the
lens's own validated config, into its own run directory; the study adds only
the completion marker that some runners do not write themselves.

The per-cell lenses are looked up lazily (by module path), so a study that does
not use a lens never imports it, and a lens whose module is missing fails with
one clear line.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from bnmem.errors import BnmemError


@dataclass(frozen=True)
class LensSpec:
    """Where a per-cell lens lives.

    Attributes:
        name: the lens name in a study's ``lenses`` section (= its CLI command).
        module: module holding the config class and runner.
        config: name of its pydantic config class (an ``ExperimentConfig`` subclass).
        runner: name of ``runner(cfg, out, ..., progress=...)``.
        folder: folder of its results inside a cell.
        one_seed: the lens takes a single base seed (lira derives every shadow
            model's seed from it); a cell gives it its first seed.
        bn_only: the lens measures BatchNorm layers only; a cell gives it
            ``norms: [batch]``.
        trains_runs: the lens trains every (norm, seed) on the full training
            set exactly as ``bnmem memorize`` does, into ``<norm>/seed<k>``
            (a finished folder there is skipped), so lenses with the same data,
            architecture and recipe can share those runs.
        hook_key: the history key its per-epoch training hook fills (None: no
            hook). For mitigate, trains_runs covers its unregularized variants
            (folder ``<norm>/seed<k>``); its λ > 0 variants are its own.
    """

    name: str
    module: str
    config: str
    runner: str
    folder: str
    one_seed: bool = False
    bn_only: bool = False
    trains_runs: bool = False
    hook_key: str | None = None


# Order = the order a study runs them in (cheap first, so early results cover
# every cell; membership inference, the expensive one, last).
CELL_LENSES: dict[str, LensSpec] = {
    s.name: s
    for s in (
        LensSpec("memorize", "bnmem.lenses.memorize", "MemorizeConfig", "run_memorize", "memorize",
                 trains_runs=True),
        LensSpec("gamma-sigma", "bnmem.lenses.gamma_sigma", "GammaSigmaConfig", "run_gamma_sigma",
                 "gamma-sigma", bn_only=True, trains_runs=True, hook_key="gamma_sigma"),
        LensSpec("gradnorms", "bnmem.lenses.gradnorms", "GradNormsConfig", "run_gradnorms", "gradnorms",
                 trains_runs=True, hook_key="gradnorms"),
        LensSpec("mitigate", "bnmem.lenses.mitigate", "MitigateConfig", "run_mitigate", "mitigate",
                 trains_runs=True, hook_key="gamma_sigma"),
        LensSpec("lira", "bnmem.lenses.lira", "LiraConfig", "run_lira", "lira", one_seed=True),
    )
}
# ``rmia`` is reported by the lira lens (its attack evaluation includes RMIA):
# asking for it runs lira into the same folder.
RMIA = "rmia"
THEORY = "theory"
LENSES: tuple[str, ...] = (*CELL_LENSES, RMIA, THEORY)
ALIASES = {"gamma_sigma": "gamma-sigma", "gamma-sigma": "gamma-sigma"}


def canonical_lens(name: str) -> str:
    """Resolve ``gamma_sigma`` to ``gamma-sigma``; other names unchanged."""
    return ALIASES.get(name, name)


def _module(spec: LensSpec):
    try:
        return importlib.import_module(spec.module)
    except ModuleNotFoundError as e:
        if e.name and spec.module.startswith(e.name):
            raise BnmemError(f"lens {spec.name!r} is not available in this installation ({spec.module} is missing)") from e
        raise


def config_class(name: str) -> type[BaseModel]:
    """The pydantic config class of a per-cell lens.

    Raises:
        BnmemError: the lens's module is not installed.
    """
    spec = CELL_LENSES[name]
    mod = _module(spec)
    try:
        return getattr(mod, spec.config)
    except AttributeError as e:
        raise BnmemError(f"lens {name!r}: {spec.module} has no {spec.config}") from e


def validation_line(err: ValidationError, prefix: str) -> str:
    """'prefix.path: message; ...' for every error of a pydantic ValidationError."""
    parts = []
    for e in err.errors():
        loc = ".".join([prefix, *(str(p) for p in e["loc"])])
        parts.append(f"{loc}: {e['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def build_config(name: str, config: dict[str, Any], where: str) -> BaseModel:
    """Validate a per-cell lens config (a plain dict) with the lens's own model.

    Args:
        name: lens name.
        config: the merged config dict (cell base + lens options).
        where: path prefix for error messages, e.g. ``lenses.lira``.

    Returns:
        The validated config object.

    Raises:
        BnmemError: one line naming the bad key's path.
    """
    cls = config_class(name)
    try:
        return cls.model_validate(config)
    except ValidationError as e:
        raise BnmemError(f"invalid study: {validation_line(e, where)}") from e


def run_cell_lens(name: str, config: dict[str, Any], out: Path, progress: bool, executor: Any = None) -> Any:
    """Run one per-cell lens into ``out`` (its runner resumes from its own markers).

    The executor is handed to runners that accept one (lira trains its shadow
    models through it); the others run in the calling process.
    """
    spec = CELL_LENSES[name]
    cfg = config_class(name).model_validate(config)
    runner = getattr(_module(spec), spec.runner)
    params = inspect.signature(runner).parameters
    kwargs: dict[str, Any] = {}
    if "progress" in params:
        kwargs["progress"] = progress
    if executor is not None and "executor" in params:
        kwargs["executor"] = executor
    return runner(cfg, out, **kwargs)


def training_hook(name: str, config: dict[str, Any], ds: Any, job: Path, seed: int) -> Callable | None:
    """The per-epoch measurement hook lens ``name`` gives the trainer for one (norm, seed) run.

    Args:
        name: a per-cell lens with ``trains_runs``.
        config: its config (plain data).
        ds: the loaded dataset.
        job: its ``<norm>/seed<k>`` folder (gradnorms writes its arrays there).
        seed: the run's seed.

    Returns:
        The lens's own ``on_epoch`` hook, or None for a lens without one (memorize).
    """
    spec = CELL_LENSES[name]
    if spec.hook_key is None:
        return None
    cfg = config_class(name).model_validate(config)
    mod = _module(spec)
    if name == "gradnorms":
        return mod.measure_hook(cfg, ds, job, seed)
    if name == "gamma-sigma":
        return mod.measure_hook(cfg, ds)
    if name == "mitigate":  # as run_mitigate builds it for every variant
        return mod.gamma_sigma_hook(ds, {cfg.fixed_epoch, cfg.train.epochs}, cfg.train.batch_size, cfg.data.seed)
    raise ValueError(f"no training hook adapter for lens {name!r}")


SHADOW_GAMMA_SIGMA = "shadow_gamma_sigma.json"


def shadow_gamma_sigma(config: dict[str, Any], out: Path) -> dict[str, Any] | None:
    """|γ|/σ of every BN shadow model the lira lens trained, written next to its results.

    The shadow models are already there (M of them, each on a random half of the
    training set), so this is γ/σ over many independently trained BN models at
    no extra training: the spread the gamma-sigma lens's few seeds cannot show.

    Args:
        config: the lira lens's config (plain data).
        out: its folder (``<out>/batch/shadow/...`` holds the models).

    Returns:
        The document written to ``<out>/shadow_gamma_sigma.json``, or None when
        the lens has no BN models.
    """
    import numpy as np

    from bnmem import io
    from bnmem.data import load_dataset
    from bnmem.lenses.lira.shadow import load_shadow_models
    from bnmem.measure.gamma_sigma import gamma_sigma_stats

    cfg = config_class("lira").model_validate(config)
    if "batch" not in cfg.norms:
        return None
    ds = load_dataset(cfg.data)
    stats = [gamma_sigma_stats(m, mode="running") for m in load_shadow_models(cfg, "batch", out / "batch", ds)]

    def spread(values: list[float]) -> dict[str, Any]:
        arr = np.asarray(values, dtype=float)
        return {"mean": float(arr.mean()), "min": float(arr.min()), "max": float(arr.max()), "per_model": arr.tolist()}

    layers = list(stats[0]["layers"])
    doc = {
        "norm": "batch",
        "shadow_models": cfg.shadow_models,
        "sigma": "running: sqrt(running_var + eps), the σ BN divides by in eval mode",
        "ratio": "|γ| / σ per channel; per layer the median over channels and the fraction above 1",
        "source": "the lira lens's BN shadow models (model m trains on the keep-matrix half m of the training "
                  "set), final epoch; no extra training",
        "layers": {layer: {"n_channels": stats[0]["layers"][layer]["n_channels"],
                           "median_ratio": spread([s["layers"][layer]["median_ratio"] for s in stats]),
                           "frac_above_1": spread([s["layers"][layer]["frac_above_1"] for s in stats])}
                   for layer in layers},
        "summary": {"frac_above_1": spread([s["summary"]["frac_above_1"] for s in stats]),
                    "median_ratio": spread([s["summary"]["median_ratio"] for s in stats]),
                    "layers_median_above_1": spread([s["summary"]["layers_median_above_1"] for s in stats]),
                    "n_layers": len(layers)},
    }
    io.write_json(out / SHADOW_GAMMA_SIGMA, doc)
    return doc


def run_theory_lens(options: dict[str, Any], out: Path, progress: bool) -> Any:
    """Run the toy-model simulation (one per study) into ``out``."""
    from bnmem.theory import TheoryConfig, run_theory

    return run_theory(TheoryConfig.model_validate(options), out, progress=progress)
