"""The contract every registered lens keeps, checked on each of them; and a registry that refuses surprises.

For each lens: its config validates its own defaults; a tiny run writes its results file
stamped with ``"lens"`` and ``"schema_version"``; its summary renders. A new built-in lens
fails here until it has a tiny configuration in ``TINY``.
"""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from bnmem import io
from bnmem.errors import BnmemError
from bnmem.lenses import registry
from bnmem.data import loaded
from bnmem.lenses.registry import LENS_KEY, SCHEMA_KEY, Lens, LensSpec
from bnmem.lenses.work import lens_work
from bnmem.names import BUILTIN_LENSES

_DATA = {"dataset": "digits", "label_noise": 0.05, "train_size": 120}
# The smallest run of each lens that still goes through all its steps (seconds each, one thread).
TINY = {
    "memorize": {"data": _DATA, "norms": ["batch", "none"], "seeds": [0], "train": {"epochs": 2}},
    "gamma-sigma": {"data": _DATA, "seeds": [0], "train": {"epochs": 2}},
    "gradnorms": {"data": _DATA, "norms": ["batch"], "seeds": [0], "train": {"epochs": 2}, "at": [1, 2]},
    "mitigate": {"data": _DATA, "norms": ["batch"], "seeds": [0], "train": {"epochs": 2}, "lambdas": [1.0],
                 "fixed_epoch": 1},
    "lira": {"data": _DATA, "norms": ["batch"], "shadow_models": 4, "chunk_size": 4, "views": ["identity"],
             "train": {"epochs": 1}},
    "defenses": {"data": _DATA, "norms": ["batch", "none"], "gs_lambda": 0, "dp_epsilons": [], "shadow_models": 4,
                 "chunk_size": 4, "replicates": 1, "train": {"epochs": 1}},
    "theory": {"steps": 20, "sweep_every": 10, "counterfactual_seeds": 1, "plot": False},
}


def test_registry_lists_the_builtin_lenses_of_the_names_table():
    assert registry.names()[: len(BUILTIN_LENSES)] == list(BUILTIN_LENSES)
    assert [lens.name for lens in registry.all_lenses()][: len(BUILTIN_LENSES)] == list(BUILTIN_LENSES)
    assert set(TINY) == set(BUILTIN_LENSES), "every built-in lens needs a tiny configuration here"


@pytest.mark.parametrize("name", list(BUILTIN_LENSES))
def test_config_validates_its_defaults(name):
    lens = registry.get(name)
    defaults = lens.config()
    assert lens.validate(defaults.model_dump(mode="json")) == defaults


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """name -> (lens, returned results, results file read back, folder, dataset loads): each lens run once,
    lazily, as a study runs it in one process: through its cell plan (:func:`bnmem.lenses.work.lens_work`: its graph
    tasks, then the job), from an empty dataset cache, counting every load of the one loader."""
    done: dict[str, tuple] = {}

    def run(name: str):
        if name not in done:
            lens = registry.get(name)
            out = tmp_path_factory.mktemp(name.replace("-", "_"))
            loads: list[str] = []
            original = loaded.load_dataset
            with pytest.MonkeyPatch.context() as mp:
                loaded.forget()
                mp.setattr(loaded, "load_dataset", lambda cfg: (loads.append(cfg.dataset), original(cfg))[1])
                cell = lens_work(lens, lens.validate(TINY[name]), out)
                for task in cell.tasks(name, 1.0):  # a chain: each task's jobs listed when it is ready
                    for spec in (task.specs() if callable(task.specs) else task.specs):
                        task.fn(spec)
                result = cell.run(progress=False)
                loaded.forget()
            done[name] = (lens, result, io.read_json(out / lens.results), out, len(loads))
        return done[name]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BUILTIN_LENSES))
def test_tiny_run_writes_stamped_results_and_its_summary_renders(name, tiny_runs):
    lens, result, doc, out, _ = tiny_runs(name)
    assert list(doc)[:2] == [LENS_KEY, SCHEMA_KEY]
    assert doc[LENS_KEY] == name and doc[SCHEMA_KEY] == lens.schema_version
    assert lens.summary is not None
    text = lens.summary(doc)
    assert isinstance(text, str) and text.strip()
    assert text == lens.summary(result)  # the file read back renders as the run's returned result


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BUILTIN_LENSES))
def test_a_lens_cell_loads_its_dataset_once_in_a_process(name, tiny_runs):
    """Every lens's cell plan, its tasks and its job run in one process, load the cell's dataset exactly once
    (none for the toy model, which reads none): each gets it from its plan (:meth:`LensWork.dataset`) or the
    same per-process cache."""
    lens, *_, loads = tiny_runs(name)
    assert loads == (1 if lens.per_cell else 0), loads


# ---------------------------------------------------------------- duplicates


class _ToyConfig(BaseModel):
    top: int = 1


def _toy(name: str, run=lambda cfg, out, **kw: {}) -> Lens:
    return Lens(LensSpec(name), config=_ToyConfig, run=run)


def test_register_refuses_a_duplicate_name_unless_replace():
    first, second = _toy("contract-toy"), _toy("contract-toy", run=lambda cfg, out, **kw: {"x": 1})
    registry.register(first)
    try:
        with pytest.raises(BnmemError, match="already registered.*replace=True"):
            registry.register(second)
        assert registry.get("contract-toy") is first
        assert registry.register(second, replace=True) is second
        assert registry.get("contract-toy") is second
    finally:
        registry.unregister("contract-toy")


def test_register_refuses_a_builtin_name_from_another_module():
    registry.get("lira")  # loaded: a second "lira" is a duplicate
    with pytest.raises(BnmemError, match="'lira' is already registered"):
        registry.register(_toy("lira"))
    assert registry.get("lira").run.__module__.startswith(BUILTIN_LENSES["lira"])
    # Not yet loaded: the name still belongs to its built-in module.
    saved = registry._REGISTRY.pop("theory")
    try:
        with pytest.raises(BnmemError, match="belongs to the built-in lens in bnmem.lenses.theory"):
            registry.register(_toy("theory"))
        assert "theory" not in registry._REGISTRY
    finally:
        registry._REGISTRY["theory"] = saved
    replaced = dataclasses.replace(saved, spec=dataclasses.replace(saved.spec, title="patched"))
    try:
        assert registry.register(replaced, replace=True) is replaced
    finally:
        registry.register(saved, replace=True)
    assert registry.get("theory") is saved


def test_architecture_doc_lists_every_builtin_lens():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## What bnmem measures"):text.index("## Definitions")]
    rows = re.findall(r"^\| `([a-z-]+)` \|.*\| `([^`]+)`[^|]*\|$", section, flags=re.M)
    # in the order a study runs them, as the doc says: by stage (ties in registration order)
    by_stage = sorted(BUILTIN_LENSES, key=lambda n: registry.get(n).stage)
    assert [name for name, _ in rows] == by_stage
    assert {name: results for name, results in rows} == {n: registry.get(n).results for n in BUILTIN_LENSES}
