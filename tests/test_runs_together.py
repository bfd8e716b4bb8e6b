"""The lenses' and the study's (norm, seed) runs trained together (seeds of one norm as one grouped network,
each lens's per-epoch hook on each run's model) against their oracle: each run trained alone by
``train_run`` with the same hooks.

float64 over 2 epochs on 160 digits with 5% flipped labels: every history value, the gradient-norm lens's
per-sample norms and the γ/σ lens's statistics and pushes within 1e-9 (the two ways differ only in summation
order inside kernels); epochs, learning rates and accuracies exactly. Plus resumption: a finished run is read
back, never trained again, and the rest train together.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from bnmem import io
from bnmem.config import DataConfig
from bnmem.data import load_dataset
from bnmem.lenses.gamma_sigma import GammaSigmaConfig, measure_hook as gs_hook
from bnmem.lenses.gradnorms import GradNormsConfig, gradnorm_file, measure_hook as gn_hook
from bnmem.lenses.runs import run_folder, train_run, train_runs
from bnmem.study import share

from digits_data import load64

TOL = 1e-9
DATA = {"dataset": "digits", "label_noise": 0.05, "seed": 0, "train_size": 180, "val_fraction": 0.1}
TRAIN = {"epochs": 2, "batch_size": 32, "lr": 0.05}
SEEDS = [3, 7]


@pytest.fixture(scope="module")
def ds64():
    return load64(DataConfig(**DATA))


def _close(a, b, where: str) -> None:
    """Equal structure; floats within TOL (absolute and relative to the value's size)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, set(a) ^ set(b or {}))
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=TOL, abs_tol=TOL) or (math.isnan(a) and math.isnan(b)), \
            f"{where}: {a} vs {b}"
    else:
        assert a == b, f"{where}: {a} vs {b}"


def _gradnorms_cfg(norms: list[str]) -> GradNormsConfig:
    return GradNormsConfig(data=DATA, norms=norms, seeds=SEEDS, train=TRAIN, at=[1, 2], definitions=["eval", "batch"],
                           batch_subset=40)


def _gs_cfg() -> GammaSigmaConfig:
    return GammaSigmaConfig(data=DATA, norms=["batch"], seeds=SEEDS, train=TRAIN, push_norm_sample=16)


def record_together(monkeypatch) -> list[list[int]]:
    """The seeds of every train_runs_together call from now on, in order (the calls still train)."""
    import bnmem.train.ensemble_runs as engine

    trained: list[list[int]] = []
    real = engine.train_runs_together

    def recording(model_cfg, ds, cfgs, seeds, *args, **kwargs):
        trained.append(list(seeds))
        return real(model_cfg, ds, cfgs, seeds, *args, **kwargs)

    monkeypatch.setattr(engine, "train_runs_together", recording)
    return trained


@pytest.mark.parametrize("lens", ["gradnorms", "gamma-sigma"])
def test_float64_lens_runs_together_match_one_by_one(ds64, tmp_path, lens):
    cfg, hook = (_gradnorms_cfg(["batch", "none"]), gn_hook) if lens == "gradnorms" else (_gs_cfg(), gs_hook)
    got = train_runs(cfg, ds64, tmp_path / "together", hook=hook, progress=False)
    for norm in cfg.norms:
        for seed in cfg.seeds:
            job = run_folder(tmp_path / "alone", norm, seed)
            want = train_run(cfg.model(norm), ds64, cfg.train, seed, job,
                             lambda job=job, seed=seed: hook(cfg, ds64, job, seed))
            assert len(want) == cfg.train.epochs
            _close(want, got[norm][seed], f"{norm} seed {seed}")
            together = run_folder(tmp_path / "together", norm, seed)
            assert io.is_done(together) and io.read_json(together / "history.json") == got[norm][seed]
            if lens == "gradnorms":
                for d in cfg.definitions:
                    for e in cfg.at:
                        a, b = np.load(gradnorm_file(job, d, e)), np.load(gradnorm_file(together, d, e))
                        np.testing.assert_allclose(b, a, rtol=TOL, atol=TOL, err_msg=f"{norm} {seed} {d} ep{e}")
    if lens == "gamma-sigma":  # the pushes were measured (outliers in the data), not skipped
        assert "gamma_push" in got["batch"][SEEDS[0]][0]


def _shared_spec(tmp_path: Path) -> tuple[share.SharedTraining, dict]:
    """The study's shared BN job for gradnorms + gamma-sigma (float32 configs; the test loads them in float64),
    bound to the run directory ``tmp_path``."""
    configs = {"gradnorms": _gradnorms_cfg(["batch"]), "gamma-sigma": _gs_cfg()}
    (entry,) = share.shared_runs("cell", configs)
    return entry.at(tmp_path), configs


def test_float64_shared_runs_together_match_each_lens_alone(ds64, tmp_path, monkeypatch):
    """A study's shared job (seeds together, every lens's hook) hands each lens what it gets training alone."""
    from bnmem.data import loaded

    # the shared job reads its dataset through the process's cache (bnmem.data.loaded): load it in float64,
    # and leave no float64 dataset kept for later tests
    monkeypatch.setattr(loaded, "load_dataset", load64)
    loaded.forget()
    request_cleanup = loaded.forget
    spec, _ = _shared_spec(tmp_path / "study")
    assert list(spec.seeds) == SEEDS and sorted(t.lens for t in spec.targets) == ["gamma-sigma", "gradnorms"]
    share.run_shared_training(spec)
    assert spec.finished() and not spec.out.exists()
    for lens, cfg, hook in (("gradnorms", _gradnorms_cfg(["batch"]), gn_hook), ("gamma-sigma", _gs_cfg(), gs_hook)):
        for seed in SEEDS:
            job = run_folder(tmp_path / "alone" / lens, "batch", seed)
            want = train_run(cfg.model("batch"), ds64, cfg.train, seed, job,
                             lambda job=job, seed=seed: hook(cfg, ds64, job, seed))
            given = run_folder(tmp_path / "study" / "cell" / lens, "batch", seed)
            _close(want, io.read_json(given / "history.json"), f"{lens} seed {seed}")
    request_cleanup()


def test_a_partly_finished_shared_job_trains_only_the_rest(tmp_path, monkeypatch):
    """One seed finished for every lens: it is not trained again (its files untouched); the other is."""

    spec, _ = _shared_spec(tmp_path)
    first = dataclasses.replace(spec, seeds=tuple(SEEDS[:1]))
    share.run_shared_training(first)
    finished = {p: p.stat().st_mtime_ns for t in spec.targets
                for p in (t.folder / "batch" / f"seed{SEEDS[0]}").rglob("*")}
    assert finished and not spec.finished()
    trained = record_together(monkeypatch)
    share.run_shared_training(spec)
    assert trained == [SEEDS[1:]]
    assert spec.finished()
    assert {p: p.stat().st_mtime_ns for p in finished} == finished
    trained.clear()
    share.run_shared_training(spec)  # all finished: nothing trains
    assert trained == []


def test_a_lens_resumes_only_its_unfinished_runs(tmp_path, monkeypatch):
    """train_runs after one (norm, seed) finished trains the others together and reads that one back, and the
    histories equal an uninterrupted run's bitwise (a run does not depend on the runs beside it)."""

    cfg = _gradnorms_cfg(["batch"])
    ds = load_dataset(cfg.data)
    whole = train_runs(cfg, ds, tmp_path / "whole", hook=gn_hook, progress=False)
    part = cfg.model_copy(update={"seeds": SEEDS[:1]})
    train_runs(part, ds, tmp_path / "resumed", hook=gn_hook, progress=False)
    trained = record_together(monkeypatch)
    resumed = train_runs(cfg, ds, tmp_path / "resumed", hook=gn_hook, progress=False)
    assert trained == [SEEDS[1:]]
    assert resumed == whole
