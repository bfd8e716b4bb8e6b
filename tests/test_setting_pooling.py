"""Replicates of one setting pool into one setting whatever lenses each cell ran.

A study that runs a lens on more replicates than another (e.g. mitigate on 60, lira on the first 20) has cells of
one setting that differ in their lens sets. The setting is the cell's conditions (dataset, architecture, norms,
outliers, recipe); reading the recipe from whichever lens happens to name it split such a setting in two (the
follow-up decisive-claim6's first report: claim 6 over 20 + 40 replicates, k doubled).
"""

from __future__ import annotations

import json
from pathlib import Path

from bnmem.report.results import settings_of
from bnmem.report.rundata import load_run

CONDITIONS = {"dataset": "digits", "arch": "lenet", "norms": ["batch", "none"], "label_noise": 0.05, "ood": 0.0,
              "ood_source": None}


def _lens(folder: Path, kind: str, seed: int, **extra) -> None:
    folder.mkdir(parents=True)
    doc = {"lens": kind, "conditions": {**CONDITIONS, "seeds": [seed], **extra}}
    (folder / "metrics.json").write_text(json.dumps(doc))


def _run(tmp_path: Path, recipe_of_second: str | None) -> Path:
    """Two replicates of one setting: r0 ran mitigate and lira (lira names the shared recipe), r1 mitigate only."""
    cells = []
    for r, kinds in enumerate((("mitigate", "lira"), ("mitigate",))):
        cid = f"digits-lenet-flip0.05-r{r}"
        entry = {"id": cid, **CONDITIONS, "seeds": [r], "replicate": r, "lenses": {}}
        if r == 1 and recipe_of_second is not None:
            entry["recipe"] = recipe_of_second
        for kind in kinds:
            extra = {"recipe": "shared"} if kind == "lira" else {}
            _lens(tmp_path / cid / kind, kind, r, **extra)
            entry["lenses"][kind] = f"{cid}/{kind}"
        cells.append(entry)
    (tmp_path / "index.json").write_text(json.dumps({"study": "pool", "cells": cells}))
    return tmp_path


def test_cells_with_different_lens_sets_pool_into_one_setting(tmp_path):
    run = load_run(_run(tmp_path, None))
    assert [sorted(c.lenses) for c in run.cells] == [["lira", "mitigate"], ["mitigate"]], run.problems
    settings = settings_of(run, "mitigate")
    assert [s.replicates for s in settings] == [[0, 1]]


def test_a_per_norm_recipe_cell_stays_its_own_setting(tmp_path):
    run = load_run(_run(tmp_path, "per-norm"))
    settings = settings_of(run, "mitigate")
    assert sorted(s.replicates for s in settings) == [[0], [1]]
