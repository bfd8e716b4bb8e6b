"""Train once, serve several lenses: the (norm, seed) runs memorize, gradnorms, gamma-sigma and mitigate share.

``bnmem memorize``, ``bnmem gradnorms``, ``bnmem gamma-sigma`` and the
unregularized variants of ``bnmem mitigate`` each train every (norm, seed) on the full corrupted training set with the same trainer,
data, initial weights and batch order; they differ only in what their
per-epoch hook measures (gradient norms, γ/σ) on the side, and the hooks leave
the model untouched (they measure a float64 copy, or forward in eval/batch mode
with running statistics frozen). So when a cell's lenses share data,
architecture and recipe, a study trains each such run once with all their hooks
together, into ``<cell>/_shared/<norm>/seed<k>`` (resumable: the trainer's
checkpoint), then gives each lens its ``<norm>/seed<k>`` folder exactly as the
lens would have written it (the model, the history with only that lens's
measurements, the DONE marker last). The lens's own runner then finds the run
finished and only summarizes. The results are byte-identical to running each
lens on its own (tests/test_study.py checks it).
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
    """The (norm, seed) runs of one cell that two or more lenses would train identically.

    Args:
        cell_id: the cell (folders are relative to the run directory).
        configs: lens name -> validated lens config (plain data).

    Returns:
        One dict per shared run: ``id``, ``folder`` (scratch training folder),
        ``norm``, ``seed``, ``training`` (data/arch/train), ``targets`` (list of
        ``{"lens", "config", "folder"}``, folder = the lens's folder).
    """
    groups: dict[str, list[str]] = {}
    for lens, cfg in configs.items():
        if registry.get(lens).trains_runs:
            groups.setdefault(identity(cfg), []).append(lens)
    runs = []
    for key, lenses in groups.items():
        if len(lenses) < 2:
            continue
        pairs = dict.fromkeys((n, s) for lens in lenses for n in configs[lens]["norms"] for s in configs[lens]["seeds"])
        for norm, seed in pairs:
            targets = [{"lens": lens, "config": configs[lens], "folder": f"{cell_id}/{lens}"}
                       for lens in lenses if norm in configs[lens]["norms"] and seed in configs[lens]["seeds"]]
            if len(targets) < 2:
                continue
            runs.append({
                "id": f"{cell_id}/{SHARED_DIR}/{norm}/seed{seed}",
                "folder": f"{cell_id}/{SHARED_DIR}/{norm}/seed{seed}",
                "norm": norm,
                "seed": seed,
                "training": json.loads(key),
                "targets": targets,
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


def give_run(scratch: Path, dst: Path, lens: str) -> None:
    """Write a lens's finished ``<norm>/seed<k>`` folder from the shared run, DONE last.

    Args:
        scratch: the finished shared training folder (model.pt, history.json, DONE).
        dst: the lens's run folder.
        lens: the lens it is for.
    """
    io.write_bytes(dst / "model.pt", (scratch / "model.pt").read_bytes())
    io.write_json(dst / "history.json", lens_history(io.read_json(scratch / "history.json"), lens))
    io.write_bytes(dst / io.DONE, (scratch / io.DONE).read_bytes())


def is_shared_finished(spec: dict[str, Any]) -> bool:
    """A shared run is finished when every target lens has its copy."""
    rel = f"{spec['norm']}/seed{spec['seed']}"
    return all(io.is_done(Path(t["out"]) / rel) for t in spec["targets"])


def run_shared_training(spec: dict[str, Any]) -> None:
    """Train one shared (norm, seed) run with every target lens's hook, then hand it out.

    Args:
        spec: a :func:`shared_runs` entry with absolute ``out`` (scratch folder)
            and each target's absolute ``out`` (lens folder), plus ``progress``.
    """
    from bnmem.config import DataConfig, ModelConfig, TrainConfig
    from bnmem.data import load_dataset
    from bnmem.lenses.runs import train_run

    norm, seed = spec["norm"], int(spec["seed"])
    rel = f"{norm}/seed{seed}"
    scratch = Path(spec["out"])
    pending = [t for t in spec["targets"] if not io.is_done(Path(t["out"]) / rel)]
    if pending and not io.is_done(scratch):
        training = spec["training"]
        ds = load_dataset(DataConfig.model_validate(training["data"]))
        hooks = {}
        for t in spec["targets"]:
            lens = registry.get(t["lens"])
            if lens.hook is not None:
                cfg = lens.config.model_validate(t["config"])
                hook = lens.hook(cfg, ds, Path(t["out"]) / rel, seed)
                if hook is not None:
                    hooks[lens.name] = hook

        def on_epoch(epoch: int, model) -> dict | None:
            record = {HOOK_PREFIX + lens: r for lens, hook in hooks.items() if (r := hook(epoch, model))}
            return record or None

        train_run(ModelConfig(arch=training["arch"], norm=norm), ds, TrainConfig.model_validate(training["train"]),
                  seed, scratch, lambda: on_epoch, progress=f"{norm} seed {seed} (shared)" if spec.get("progress") else False)
    for t in pending:
        give_run(scratch, Path(t["out"]) / rel, t["lens"])
    # Every lens has its copy now; the scratch run is only a duplicate.
    shutil.rmtree(scratch, ignore_errors=True)
