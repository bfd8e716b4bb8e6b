"""Follow ``shadow_models`` from the ``bnmem lira`` command down to training, and count repeated work.

Runs a tiny ``bnmem lira`` (digits, LeNet, 4 shadow models, 1 epoch, in this process) and, with
``--study``, a one-cell study running only the lira lens, under a ``sys.setprofile`` call tracer.

From the CLI entry (``bnmem.cli.main``) to the first call of the training engine
(``bnmem.train.ensemble.train_models``) it counts:

* **modules**: distinct ``bnmem`` modules one of whose Python functions was called (a module body
  executed by an import is not a call);
* **returns up**: returns from a function to a caller in a *higher* layer (layers as in
  ``[tool.importlinter]`` of pyproject.toml / docs/architecture.md; the root ``bnmem`` package and
  ``bnmem.__main__`` above ``cli``). A return within a layer or to a lower one is not counted.

Over the whole run it counts the calls of ``bnmem.data.pipeline.load_dataset`` and of the shadow-model
loaders (``bnmem.shadow.training.load_shadow_model``: one model file read into a module).

Usage::

    python benchmarks/trace_shadow_models.py [--study]

The script prints one ``key=value`` line per run. Measured for issue 28 (counts, not times, so the
machine's load does not matter), before (main at 2684f4f) -> after (branch proto):

* ``bnmem lira``: 46 -> 46 modules, 34 -> 35 returns up (the protocol's views rule now lives in
  ``bnmem.config``, one layer lower), load_dataset 6 -> 5, shadow-model loads 12 -> 8;
* one lira cell of a study: 33 -> 32 modules, 101 -> 102 returns up, load_dataset 10 -> 5, shadow-model
  loads 12 -> 8.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIRST_TRAINING = ("bnmem.train.ensemble", "train_models")
COUNTED = {("bnmem.data.pipeline", "load_dataset"): "load_dataset",
           ("bnmem.shadow.training", "load_shadow_model"): "model_loads"}
LIRA_ARGS = ["lira", "--dataset", "digits", "--train-size", "200", "--norms", "batch,none", "--epochs", "1",
             "--shadow-models", "4", "--chunk-size", "4", "--views", "identity", "--quiet"]
STUDY = """name: trace
data: {dataset: digits, seed: 0, train_size: 200}
arch: lenet
train: {epochs: 1, batch_size: 64, threads: 1}
grid: {norms: [batch, none], seeds: [0], replicates: 1, outliers: [{label_noise: 0.05}]}
lenses:
  lira: {shadow_models: 4, chunk_size: 4, views: [identity]}
"""


def layer_ranks() -> dict[str, int]:
    """Top-level bnmem name -> rank (0: highest), from the layers contract."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "layers")["layers"]
    ranks = {"__init__": -1, "__main__": -1}
    for i, row in enumerate(layers):
        for name in row.split("|"):
            ranks[name.strip()] = i
    return ranks


def rank_of(module: str, ranks: dict[str, int]) -> int | None:
    parts = module.split(".")
    if parts[0] != "bnmem":
        return None
    return ranks["__init__"] if len(parts) == 1 else ranks.get(parts[1])


class Tracer:
    """A profile function: modules and upward returns until the first training call; counted calls throughout."""

    def __init__(self) -> None:
        self.ranks = layer_ranks()
        self.modules: set[str] = set()
        self.returns_up = 0
        self.before_training = True
        self.counts = dict.fromkeys(COUNTED.values(), 0)

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("bnmem") or frame.f_code.co_name == "<module>":
            return  # a module body runs on import: not a call on the data's path
        key = (module, frame.f_code.co_name)
        if event == "call":
            if key in COUNTED:
                self.counts[COUNTED[key]] += 1
            if key == FIRST_TRAINING:
                self.before_training = False
            if self.before_training:
                self.modules.add(module)
            return
        if not self.before_training or frame.f_back is None:
            return
        caller = frame.f_back.f_globals.get("__name__", "")
        here, there = rank_of(module, self.ranks), rank_of(caller, self.ranks)
        if here is not None and there is not None and there < here:
            self.returns_up += 1


def traced(argv: list[str]) -> Tracer:
    from bnmem.cli import main

    tracer = Tracer()
    sys.setprofile(tracer)
    try:
        code = main(argv)
    finally:
        sys.setprofile(None)
    if code:
        raise SystemExit(f"bnmem {' '.join(argv)} exited with {code}")
    return tracer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--study", action="store_true", help="also trace a one-cell lira-only study")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        t = traced([*LIRA_ARGS, "--out", f"{tmp}/lira"])
        print(f"run=lira modules={len(t.modules)} returns_up={t.returns_up} "
              f"load_dataset={t.counts['load_dataset']} model_loads={t.counts['model_loads']}")
        if args.study:
            (Path(tmp) / "s.yaml").write_text(STUDY)
            t = traced(["run", f"{tmp}/s.yaml", "--out", f"{tmp}/study", "--workers", "1", "--quiet"])
            print(f"run=study-one-lira-cell modules={len(t.modules)} returns_up={t.returns_up} "
                  f"load_dataset={t.counts['load_dataset']} model_loads={t.counts['model_loads']}")


if __name__ == "__main__":
    main()
