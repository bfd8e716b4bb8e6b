"""Lens specs: the static declarations the report, the tidy export and the CLI listing read.

The check that matters runs in a fresh interpreter: reading a real run (``bnmem report RUN``
and ``bnmem.results.load(RUN)``) must never import torch, which a lens module would.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bnmem.cli import main
from bnmem.lenses import registry, spec as specs
from bnmem.names import BUILTIN_LENSES

SRC = Path(__file__).resolve().parents[1] / "src"

# The smallest study that writes each kind of results file the report dispatches on
# (metrics.json of memorize and lira, gamma_sigma.json, theory.json).
TINY = {
    "name": "specs",
    "data": {"dataset": "digits", "train_size": 80, "val_fraction": 0.1},
    "train": {"epochs": 1, "batch_size": 32},
    "grid": {"norms": ["batch", "none"], "seeds": [0], "outliers": [{"label_noise": 0.1}]},
    "lenses": {"memorize": {}, "gamma-sigma": {}, "lira": {"shadow_models": 4}, "theory": {"steps": 5, "plot": False}},
}


# The study runs in this process (--workers 1): its results are the same bytes for any worker count
# (tests/test_study_graph.py), and spawned workers would import torch again.
IN_PROCESS = ("--workers", "1")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("specs")
    (base / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    out = base / "run"
    assert main(["run", str(base / "tiny.yaml"), "--out", str(out), "--quiet", *IN_PROCESS]) == 0
    return out


def _fresh(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


HEAVY = "sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'opacus'))"


@pytest.mark.slow
def test_report_and_results_load_never_import_torch(tiny_run):
    code = (f"import sys\nfrom bnmem.cli import main\n"
            f"assert main(['report', {str(tiny_run)!r}]) == 0\n"
            f"assert not {HEAVY}, ('report', {HEAVY})\n"
            f"import bnmem.results\ndf = bnmem.results.load({str(tiny_run)!r})\n"
            f"assert not {HEAVY}, ('results.load', {HEAVY})\n"
            f"assert set(df['lens']) >= {{'memorize', 'gamma-sigma', 'lira'}}, set(df['lens'])\n"
            f"lenses = sorted(m for m in sys.modules if m.startswith('bnmem.lenses.'))\n"
            f"assert set(lenses) <= {{'bnmem.lenses.spec', 'bnmem.lenses.registry'}}, lenses\n")
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tiny_run / "report.html").is_file()


def test_the_planted_import_is_seen():
    """The check can fail: importing a lens module (as the report once did) loads torch."""
    proc = _fresh(f"import sys\nimport bnmem.lenses.memorize\nprint({HEAVY})")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "'torch'" in proc.stdout


def test_cli_listing_reads_specs_only():
    proc = _fresh(f"import sys\nfrom bnmem.cli import main\nmain(['--help'])\n")
    assert proc.returncode == 0 and "memorize" in proc.stdout and "gamma-sigma" in proc.stdout
    proc = _fresh(f"import sys\nimport bnmem.cli\nprint({HEAVY}, sorted(m for m in sys.modules "
                  f"if m.startswith('bnmem.lenses.')))")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("[] ") and "bnmem.lenses.memorize" not in proc.stdout


@pytest.mark.parametrize("name", list(BUILTIN_LENSES))
def test_each_builtin_lens_is_its_spec_with_a_runtime(name):
    """The registered lens carries exactly its static spec (nothing restated in the lens module)."""
    lens = registry.get(name)
    assert lens.spec == specs.SPECS[name]
    assert lens.run.__module__.startswith(BUILTIN_LENSES[name])
    if lens.spec.summary_ref:
        assert specs.resolve(lens.spec.summary_ref) is lens.summary


def test_aliases_and_names_come_from_specs():
    assert specs.canonical("rmia") == registry.canonical("rmia") == "lira"
    assert specs.canonical("gamma_sigma") == "gamma-sigma"
    assert registry.names() == list(BUILTIN_LENSES)
    with pytest.raises(Exception, match="unknown lens 'nope'"):
        specs.canonical("nope")


def test_a_registered_lens_brings_its_spec_and_takes_it_away():
    from pydantic import BaseModel

    class Cfg(BaseModel):
        k: int = 1

    toy = registry.Lens.of(specs.LensSpec("spec-toy", aliases=("spectoy",), results="toy.json", title="Toy"),
                           config=Cfg, run=lambda cfg, out, **kw: {})
    registry.register(toy)
    try:
        assert specs.get("spectoy") == toy.spec == dataclasses.replace(toy.spec)
        assert specs.all_specs()[-1].name == "spec-toy" and "spec-toy" in registry.names()
    finally:
        registry.unregister("spec-toy")
    assert specs.find("spec-toy") is None


def _string_constants(path: Path) -> set[str]:
    """Every string literal of a module that is a whole expression's value (docstrings excluded)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs}


def test_file_and_lens_names_are_written_once():
    """A run directory's file names are spelled only in bnmem.names; the lens specs and the analysis plan take
    the built-in lens names from there too."""
    from bnmem import names

    once = {names.STUDY_FILE, names.INDEX_FILE, names.CONFIG_FILE, names.ENVIRONMENT_FILE, names.METRICS_FILE,
            names.ERROR_FILE, names.REPORT_HTML, names.SUMMARY_MD, names.SUMMARY_CSV}
    lens_names = set(BUILTIN_LENSES)
    for path in sorted((SRC / "bnmem").rglob("*.py")):
        if path.name == "names.py":
            continue
        found = _string_constants(path)
        assert not found & once, f"{path.relative_to(SRC)} spells {sorted(found & once)}"
        # The lens specs and the plan (attacks/spec.py's "lira" is an attack family, not the lens).
        if path.relative_to(SRC).as_posix() in ("bnmem/lenses/spec.py", "bnmem/analysis_plan.py"):
            assert not found & lens_names, (path.name, sorted(found & lens_names))


def test_tidy_keeps_a_per_target_list_with_some_nan_entries():
    """A target whose small subset holds only members has no AUC there (NaN): its row stays, with the NaN,
    beside the other targets'. A list that is NaN for every target (an empty subset) gives no rows."""
    import math

    from bnmem.report.rundata import LensOutput
    from bnmem.report.tidy import lira_rows

    nan = float("nan")
    data = {"batch": {"online": {"all": {"auc": 0.6, "auc_per_target": [0.61, 0.59, 0.6]},
                                 "outliers": {"auc": 0.7, "auc_per_target": [0.8, nan, 0.6]},
                                 "ood": {"auc": nan, "auc_per_target": [nan, nan, nan]}}},
            "conditions": {"norms": ["batch"]}}
    rows = list(lira_rows(LensOutput("lira", Path("/x"), data)))
    by_subset = {s: [r for r in rows if r["subset"] == s] for s in ("all", "outliers", "ood")}
    assert [r["unit_id"] for r in by_subset["outliers"]] == [0, 1, 2]
    assert by_subset["outliers"][0]["value"] == 0.8 and math.isnan(by_subset["outliers"][1]["value"])
    assert len(by_subset["all"]) == 3 and by_subset["ood"] == []


def test_the_plan_states_and_lens_names_have_one_home():
    """The plan check's states (and their headline words) are spelled in bnmem.report.preregistration only;
    the analysis plan keeps no second set of lens names (it and the report import bnmem.names')."""
    import bnmem.analysis_plan as plan
    from bnmem.report import preregistration as prereg

    states = {prereg.FIXED, prereg.CHANGED, prereg.UNRECORDED, *prereg.STATE_WORDS.values()}
    for path in sorted((SRC / "bnmem").rglob("*.py")):
        if path.name != "preregistration.py":
            found = _string_constants(path) & states
            assert not found, f"{path.relative_to(SRC)} spells {sorted(found)}"
    assert not [n for n in vars(plan) if n.startswith("LENS_")]
    from bnmem import names

    assert (plan.BN, plan.BASELINE) == (names.BATCH_NORM, names.NO_NORM)
