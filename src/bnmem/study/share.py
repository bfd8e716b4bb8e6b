"""Train once, serve several lenses: the (norm, seed) runs memorize, gradnorms, gamma-sigma and mitigate share.

``bnmem memorize``, ``bnmem gradnorms``, ``bnmem gamma-sigma`` and the
unregularized variants of ``bnmem mitigate`` each train every (norm, seed) on the full corrupted training set with the same trainer,
data, initial weights and batch order; they differ only in what their
per-epoch hook measures (gradient norms, γ/σ) on the side, and the hooks leave
the model untouched (they measure a float64 copy, or forward in eval/batch mode
with running statistics frozen). So when a cell's lenses share data,
architecture and recipe, a study trains each such run once with all their hooks
together: one job per (cell, norm) trains that norm's seeds together as one
grouped network (:func:`bnmem.lenses.runs.train_fresh_together`, as each lens
trains its own runs), into ``<cell>/_shared/<norm>/seed<k>``, then gives each
lens its ``<norm>/seed<k>`` folder exactly as the lens would have written it
(the model, the history with only that lens's measurements, the DONE marker
last). The lens's own runner then finds the run finished and only summarizes.
The results are byte-identical to running each lens on its own
(tests/test_study.py checks it). A seed whose every lens already has its run is
not trained again; an interrupted job retrains its unfinished seeds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.lenses import registry

SHARED_DIR = "_shared"
SHARED = "shared-training"
# What fixes a (norm, seed) run besides the norm and the seed.
TRAINING_KEYS = ("data", "arch", "train")


def identity(config: dict[str, Any]) -> str:
    """Canonical text of what determines a lens's training runs."""
    return json.dumps({k: config[k] for k in TRAINING_KEYS}, sort_keys=True)


def shared_runs(cell_id: str, configs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of one cell that two or more lenses would train identically, one entry per norm.

    Args:
        cell_id: the cell (folders are relative to the run directory).
        configs: lens name -> validated lens config (plain data).

    Returns:
        One dict per (training, norm): ``id``, ``folder`` (scratch training folder), ``norm``, ``seeds`` (those
        two or more lenses take), ``training`` (data/arch/train), ``targets`` (list of ``{"lens", "config",
        "folder", "seeds"}``: folder = the lens's folder, seeds = those of ``seeds`` it takes).
    """
    groups: dict[str, list[str]] = {}
    for lens, cfg in configs.items():
        if registry.get(lens).trains_runs:
            groups.setdefault(identity(cfg), []).append(lens)
    runs = []
    for key, lenses in groups.items():
        if len(lenses) < 2:
            continue
        norms = dict.fromkeys(n for lens in lenses for n in configs[lens]["norms"])
        for norm in norms:
            takers = [lens for lens in lenses if norm in configs[lens]["norms"]]
            seeds = [s for s in dict.fromkeys(s for lens in takers for s in configs[lens]["seeds"])
                     if sum(s in configs[lens]["seeds"] for lens in takers) >= 2]
            if not seeds:
                continue
            targets = [{"lens": lens, "config": configs[lens], "folder": f"{cell_id}/{lens}",
                        "seeds": [s for s in seeds if s in configs[lens]["seeds"]]} for lens in takers]
            runs.append({
                "id": f"{cell_id}/{SHARED_DIR}/{norm}",
                "folder": f"{cell_id}/{SHARED_DIR}/{norm}",
                "norm": norm,
                "seeds": seeds,
                "training": json.loads(key),
                "targets": [t for t in targets if t["seeds"]],
            })
    return runs


# The shared run's history keeps each lens's hook output under its own key
# (two lenses may both fill "gamma_sigma", with different contents).
HOOK_PREFIX = "hook:"


def lens_history(history: list[dict[str, Any]], lens: str) -> list[dict[str, Any]]:
    """The history lens ``lens`` would have written: the trainer's keys, then its own hook's."""
    own = HOOK_PREFIX + lens
    return [{**{k: v for k, v in rec.items() if not k.startswith(HOOK_PREFIX)}, **rec.get(own, {})}
            for rec in history]


def give_run(scratch: Path, dst: Path, lens: str, history: list[dict[str, Any]]) -> None:
    """Write a lens's finished ``<norm>/seed<k>`` folder from the shared run, DONE last.

    Args:
        scratch: the finished shared training folder (model.pt, history.json, DONE).
        dst: the lens's run folder.
        lens: the lens it is for.
        history: the scratch run's history (``history.json``, every hook's record), read once for all lenses.
    """
    io.write_bytes(dst / "model.pt", (scratch / "model.pt").read_bytes())
    io.write_json(dst / "history.json", lens_history(history, lens))
    io.write_bytes(dst / io.DONE, (scratch / io.DONE).read_bytes())


def _pending(spec: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """The targets of ``spec`` that take ``seed`` and have no finished copy of it yet."""
    rel = f"{spec['norm']}/seed{seed}"
    return [t for t in spec["targets"] if seed in t["seeds"] and not io.is_done(Path(t["out"]) / rel)]


def is_shared_finished(spec: dict[str, Any]) -> bool:
    """A shared job is finished when every target lens has its copy of every seed it takes."""
    return not any(_pending(spec, int(s)) for s in spec["seeds"])


def _seed_hook(spec: dict[str, Any], ds: Any, seed: int) -> Any:
    """One per-epoch hook calling every target lens's hook for ``seed`` (each output under its lens's key)."""
    hooks = {}
    for t in spec["targets"]:
        lens = registry.get(t["lens"])
        if lens.hook is not None and seed in t["seeds"]:
            cfg = lens.config.model_validate(t["config"])
            hook = lens.hook(cfg, ds, Path(t["out"]) / f"{spec['norm']}/seed{seed}", seed)
            if hook is not None:
                hooks[lens.name] = hook

    def on_epoch(epoch: int, model: Any) -> dict | None:
        record = {HOOK_PREFIX + lens: r for lens, hook in hooks.items() if (r := hook(epoch, model))}
        return record or None

    return on_epoch


def run_shared_training(spec: dict[str, Any]) -> None:
    """Train one cell's shared runs of one norm with every target lens's hook, seeds together, then hand them out.

    Args:
        spec: a :func:`shared_runs` entry with absolute ``out`` (scratch folder)
            and each target's absolute ``out`` (lens folder), plus ``progress``.
    """
    from bnmem.config import DataConfig, ModelConfig, TrainConfig
    from bnmem.data.loaded import load_once
    from bnmem.lenses.runs import PendingRun, train_fresh_together, train_run

    norm, scratch = spec["norm"], Path(spec["out"])
    seeds = [int(s) for s in spec["seeds"] if _pending(spec, int(s))]
    if seeds:
        training = spec["training"]
        ds = load_once(DataConfig.model_validate(training["data"]))
        model_cfg = ModelConfig(arch=training["arch"], norm=norm)
        train = TrainConfig.model_validate(training["train"])
        runs = [PendingRun(s, train, scratch / f"seed{s}", lambda s=s: _seed_hook(spec, ds, s)) for s in seeds]
        show = bool(spec.get("progress"))
        fresh = train_fresh_together(model_cfg, ds, runs, progress=f"{norm} seeds {seeds} (shared)" if show else False)
        together = {r.seed for r in fresh}
        for r in runs:  # one by one what the engine does not take or resumes (a finished one is read back)
            if r.seed not in together:
                train_run(model_cfg, ds, train, r.seed, r.job, r.make_hook,
                          progress=f"{norm} seed {r.seed} (shared)" if show else False)
    for s in seeds:
        history = io.read_json(scratch / f"seed{s}" / "history.json")  # every hook's record: read once, not per lens
        for t in _pending(spec, s):
            give_run(scratch / f"seed{s}", Path(t["out"]) / f"{norm}/seed{s}", t["lens"], history)
    # Every lens has its copy now; the scratch runs are only duplicates.
    shutil.rmtree(scratch, ignore_errors=True)
