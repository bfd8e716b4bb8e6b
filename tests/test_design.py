"""`bnmem design`: per-claim power of a study's design, a pilot's spreads, the proposal, per-lens allotment."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from bnmem.analysis_plan import PLANNING, POWER_TARGET
from bnmem.cli import main
from bnmem.names import MEMORIZE
from bnmem.design import claim_design, evaluate_design
from bnmem.power import power_above
from bnmem.study import load_study, build_jobs

# The studies run in this process (--workers 1): their results are the same bytes for any worker count
# (tests/test_study_graph.py), and spawned workers would import torch again.
IN_PROCESS = ("--workers", "1")

TINY = {"name": "tiny", "data": {"dataset": "digits", "train_size": 120},
        "train": {"epochs": 1, "batch_size": 32},
        "grid": {"norms": ["batch", "none"], "seeds": [0, 1], "replicates": 2,
                 "outliers": [{"label_noise": 0.05}, {"ood": 0.05}], "recipes": ["shared"]},
        "lenses": {"memorize": {}, "theory": {"steps": 5, "plot": False, "counterfactual_seeds": 2}}}


def test_a_default_study_is_designed_on_fair_arms_where_the_lens_takes_a_recipe(tmp_path):
    """With the default recipes (fair arms and the paper's protocol), claim 1 (memorize) is designed on the
    fair-arms cells, claim 2 (gradnorms, which takes no recipe) on the paper's protocol's, as the report
    decides them."""
    from bnmem.design import _settings

    grid = {k: v for k, v in TINY["grid"].items() if k != "recipes"}
    study = load_study(_write(tmp_path, {**TINY, "grid": grid, "lenses": {"memorize": {}, "gradnorms": {}}}))
    assert study.grid.recipes == ["per-norm", "shared"]
    one = [c for _, cells in _settings(study, "1") for c in cells]
    two = [c for _, cells in _settings(study, "2") for c in cells]
    assert len(one) == len(two) == 4
    assert {c.recipe for c in one} == {"per-norm"} and {c.recipe for c in two} == {"shared"}
    assert [s.n for s in claim_design(study, "1").settings] == [2, 2]


def _write(tmp_path: Path, doc: dict, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_lenses_can_be_allotted_to_replicates_and_architectures(tmp_path):
    doc = {**TINY, "grid": {**TINY["grid"], "archs": ["lenet", "mlp"], "replicates": 3},
           "lenses": {"memorize": {"replicates": 2, "archs": ["lenet"]}, "gamma-sigma": {}}}
    _, jobs = build_jobs(load_study(_write(tmp_path, doc)))
    mem = sorted(j.id for j in jobs if j.lens == "memorize")
    assert mem == [f"digits-lenet-{o}-r{r}/memorize" for o in ("flip0.05", "ood0.05-noise") for r in (0, 1)]
    assert sum(j.lens == "gamma-sigma" for j in jobs) == 2 * 2 * 3  # every arch, setting and replicate
    # a lens with replicates of its own (defenses) takes the option as that, not as an allotment
    defenses = load_study(Path(__file__).resolve().parents[1] / "studies" / "defenses.yaml")
    assert [j.config.replicates for j in build_jobs(defenses)[1] if j.lens == "defenses"] == [3]
    bad = {**doc, "lenses": {"memorize": {"archs": ["nonsense"]}}}
    assert main(["run", str(_write(tmp_path, bad, "bad.yaml")), "--dry-run"]) == 2


def test_without_a_pilot_the_declared_planning_sd_decides_the_power(tmp_path):
    study = load_study(_write(tmp_path, TINY))
    d = claim_design(study, "1")
    ep = PLANNING["1"][0]
    assert [s.n for s in d.settings] == [2, 2] and d.basis == "declared planning SD"
    assert d.power == pytest.approx(power_above(2, ep.sd, ep.effect, 0.0, 0.025) ** 2)
    assert power_above(d.needed, ep.sd, ep.effect, 0.0, 0.025) ** 2 >= POWER_TARGET
    assert claim_design(study, "3a").why_not.startswith("the study does not run the lira lens")
    assert claim_design(study, "5b").settings[0].n == 2  # the toy model's seeds are its units


def test_propose_writes_a_study_the_calculator_says_reaches_80_percent(tmp_path, capsys):
    path, out = _write(tmp_path, TINY), tmp_path / "proposed.yaml"
    assert main(["design", str(path), "--propose", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "claim" in printed and "n for 80%" in printed and "estimated time" in printed
    proposed = load_study(out)
    rows = [r for r in evaluate_design(proposed) if r.power is not None]
    assert rows and all(r.power >= POWER_TARGET for r in rows)
    assert proposed.grid.replicates >= 2 and "every claim reaches 80%" in printed
    assert main(["design", str(path), "--propose", str(out)]) == 2  # never overwrites


def test_a_pilot_run_gives_the_observed_spread(tmp_path, capsys):
    """A pilot's spread sizes the design as its one-sided 80% upper confidence bound (plan 5.0). The exact check
    uses a synthetic pilot of claim 1 (a 1-epoch real pilot has no BN epoch whose clean accuracy the baseline
    reaches, so claim 1 at matched progress is not run there: the CLI path is checked on it below)."""
    from synthetic_runs import make_cell, make_run, memorize_data

    from bnmem.report.claims import evaluate_claims

    doc = {**TINY, "lenses": {"memorize": {}}}
    path, run = _write(tmp_path, doc), tmp_path / "pilot"
    rng = np.random.default_rng(3)
    cells = [make_cell("m", r, {MEMORIZE: memorize_data(0.6 + rng.normal(0, 0.03) + rng.normal(0, 0.01, (2, 3)),
                                                          np.full((2, 3), 0.5))}) for r in range(3)]
    pilot = evaluate_claims(make_run(cells))
    observed = {e.where: (e.sd, e.n) for c in pilot if c.id == "1" for e in c.deciding()}
    assert len(observed) == 1
    d = claim_design(load_study(path), "1", pilot)
    # the flip setting is the pilot's own; the OOD setting takes the largest SD the pilot observed
    assert d.basis == ("pilot: largest SD of its settings (80% upper bound on its SD); "
                       "pilot: same setting (80% upper bound on its SD)")
    ep = PLANNING["1"][0]
    # plan 5.0: the pilot's SD enters as its one-sided 80% chi-square upper bound s·sqrt((n − 1)/χ²_{0.20, n−1})
    from scipy.stats import chi2

    (sd, n), = observed.values()
    bound = sd * math.sqrt((n - 1) / chi2.ppf(0.2, n - 1))
    assert n == 3 and bound > 1.5 * sd
    assert d.power == pytest.approx(power_above(2, bound, ep.effect, 0.0, 0.025) ** 2)
    assert main(["run", str(path), "--out", str(run), "--quiet", *IN_PROCESS]) == 0
    assert main(["design", str(path), "--pilot", str(run)]) == 0
    assert "calibrated on" in capsys.readouterr().out
    assert main(["design", str(path), "--pilot", str(tmp_path / "missing")]) == 2


def test_a_pilot_calibrates_the_theory_lens_and_names_a_finished_lens_without_seconds(tmp_path):
    """The theory lens's DONE records its seconds, so a pilot calibrates it; a finished lens whose DONE has no
    seconds (a run from before they were recorded) keeps the declared factor, and the source line says why."""
    from bnmem import io
    from bnmem.study.cost import calibrate

    doc = {**TINY, "grid": {**TINY["grid"], "replicates": 1, "outliers": [{"label_noise": 0.05}]},
           "lenses": {"theory": TINY["lenses"]["theory"]}}
    path, run = _write(tmp_path, doc), tmp_path / "pilot"
    assert main(["run", str(path), "--out", str(run), "--quiet", *IN_PROCESS]) == 0
    jobs = build_jobs(load_study(path))[1]
    cal = calibrate(run, jobs)
    done = io.read_json(run / "theory" / "DONE")
    assert cal.fixed["theory"] == pytest.approx(done["seconds"]) and "for theory (its DONE" in cal.source
    io.mark_done(run / "theory", {"lens": "theory"})  # as an older run wrote it
    source = calibrate(run, jobs).source
    assert "theory (finished, but its DONE recorded no seconds)" in source
    assert "calibrated on" in source and "for no lens" in source


def test_rows_without_a_planning_effect_say_why_by_their_kind(tmp_path):
    """Row 3c (beyond the paper) has no planning effect because it is exploratory, not because it is a derivation
    check; claim 5a is the derivation check."""
    study = load_study(_write(tmp_path, TINY))
    assert claim_design(study, "3c").why_not.startswith("exploratory (beyond the paper)")
    assert claim_design(study, "5a").why_not == "a derivation check: no power"
