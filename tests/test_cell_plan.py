"""A lira cell loads its data and its models as few times as the work needs (issue 28):
the query jobs measure γ/σ while each model is loaded, finished chunks are skipped without loading
the data, and asking a study's phases what is pending never trains."""

from __future__ import annotations

import collections
import json

import pytest

from bnmem import io
from bnmem.config import DataConfig, TrainConfig
from bnmem.lenses.lira import LiraConfig, run_lira
from bnmem.lenses.lira import shadow_gamma_sigma as sgs
from bnmem.shadow import phases, query, training

# Every module that loads the dataset on a lira cell's path, by the name it imported.
LOADERS = [phases, query, training, sgs, __import__("bnmem.lenses.lira.run", fromlist=["run"])]


def _config() -> LiraConfig:
    return LiraConfig(data=DataConfig(dataset="digits", label_noise=0.05, train_size=120), norms=["batch", "none"],
                      shadow_models=4, chunk_size=2, views=["identity"], train=TrainConfig(epochs=1, batch_size=32))


@pytest.fixture(scope="module")
def counted_run(tmp_path_factory):
    """A tiny lira run, counting load_dataset and shadow-model loads."""
    counts: collections.Counter = collections.Counter()
    mp = pytest.MonkeyPatch()
    for module in LOADERS:
        original = module.load_dataset
        mp.setattr(module, "load_dataset", lambda cfg, _f=original: (counts.update(["data"]), _f(cfg))[1])
    for module in (query, training):
        original = module.load_shadow_model
        mp.setattr(module, "load_shadow_model",
                   lambda *a, _f=original, **k: (counts.update(["model"]), _f(*a, **k))[1])
    out = tmp_path_factory.mktemp("lira")
    try:
        run_lira(_config(), out, progress=False)
    finally:
        mp.undo()
    return out, counts


def test_data_and_models_are_loaded_once_per_use(counted_run):
    """Once in the lens, once per training chunk, once per query chunk (2 norms x 2 chunks); each model once."""
    _, counts = counted_run
    assert counts["data"] == 1 + 2 * 2 + 2 * 2, counts
    assert counts["model"] == 2 * 4, counts  # the query's loads only: γ/σ is measured there


def test_gamma_sigma_from_the_query_equals_loading_the_models_again(counted_run, monkeypatch):
    """The oracle: shadow_gamma_sigma.json as the models loaded afresh give it (the path of older runs)."""
    out, _ = counted_run
    written = (out / sgs.SHADOW_GAMMA_SIGMA).read_bytes()
    markers = sorted((out / "batch" / query.QUERY_DIR).glob("*.json"))
    assert markers and all(len(io.read_json(m)[query.GAMMA_SIGMA_KEY]) == 2 for m in markers)
    assert not any(query.GAMMA_SIGMA_KEY in io.read_json(m) for m in (out / "none" / query.QUERY_DIR).glob("*.json"))
    monkeypatch.setattr(sgs, "chunk_bn_ratios", lambda cfg, norm_dir: None)
    sgs.shadow_gamma_sigma(_config(), out)
    assert (out / sgs.SHADOW_GAMMA_SIGMA).read_bytes() == written
    doc = json.loads(written)
    assert doc["summary"]["n_layers"] >= 1 and len(doc["summary"]["median_ratio"]["per_model"]) == 4


def test_a_finished_query_chunk_loads_nothing(counted_run, monkeypatch):
    out, _ = counted_run
    cfg = _config()
    monkeypatch.setattr(query, "load_dataset", lambda cfg: pytest.fail("a finished chunk loaded the data"))
    spec = training.chunk_spec(cfg, "batch", out / "batch", cfg.chunks()[0])
    assert query.query_shadow_chunk(spec)["skipped"] is True
    for phase in phases.PHASES:  # a finished cell: nothing pending in any phase
        assert phases.phase_jobs(cfg, out, phase)[1] == []
