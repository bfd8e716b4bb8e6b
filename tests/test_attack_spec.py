"""The attack registry: an attack declared once (an AttackSpec) reaches every reader of attack names.

A toy attack registered from this file, touching nothing in src/, must be evaluated by both
evaluators (the streaming one equal to the oracle), appear in a lira run's results, in the
report's membership table, in the tidy export, and in the audit's membership section.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bnmem.attacks import keep_matrix
from bnmem.attacks import spec as attack_spec
from bnmem.attacks.evaluate import evaluate_attacks
from bnmem.attacks.streaming import evaluate_stream
from bnmem.errors import BnmemError

TOY = "toy_median_gap"


def _toy_spec() -> attack_spec.AttackSpec:
    """φ of the target minus the median of the example's OUT references (an offline LiRA without the spread)."""
    return attack_spec.AttackSpec(
        TOY, "median gap (toy)", needs_out=True, spread="none",
        oracle=lambda r: (r.phi_t - np.median(r.phi_out, axis=0)).mean(axis=1),
        stream=lambda b: b.x - b.fits["med_out"],
        shown=frozenset({attack_spec.LENS_TABLE, attack_spec.REPORT_TABLE, attack_spec.AUDIT}))


@pytest.fixture()
def toy():
    spec = attack_spec.register(_toy_spec())
    try:
        yield spec
    finally:
        attack_spec.unregister(TOY)
    assert TOY not in attack_spec.available()


def _phi(m: int = 8, n: int = 60, v: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    keep = keep_matrix(m, n, seed)
    phi = rng.normal(size=(m, n, v)) + 0.8 * keep[:, :, None]  # members score higher
    return phi, keep


def test_toy_attack_streaming_equals_oracle(toy):
    phi, keep = _phi()
    logits = np.stack([np.zeros_like(phi), phi], axis=-1)  # two classes, label 1: φ = logit margin
    labels = np.ones(phi.shape[1], dtype=int)
    oracle = evaluate_attacks(logits, keep, labels, attacks=[TOY, "offline"])
    stream = evaluate_stream(phi, keep, attacks=[TOY, "offline"], block=7)
    np.testing.assert_allclose(stream["scores"][TOY], oracle["scores"][TOY], rtol=1e-12, atol=1e-12)
    assert oracle["metrics"][TOY]["all"]["auc"] > 0.6  # it sees the planted membership signal
    # Registered with default=True: evaluated when no list is given, by both evaluators.
    assert TOY in evaluate_stream(phi, keep)["metrics"] and TOY in evaluate_attacks(logits, keep, labels)["metrics"]


def test_register_refuses_a_taken_name_and_an_incomplete_spec(toy):
    with pytest.raises(BnmemError, match="already registered"):
        attack_spec.register(_toy_spec())
    with pytest.raises(BnmemError, match="oracle and a streaming scorer"):
        attack_spec.register(attack_spec.AttackSpec("half", "half", oracle=lambda r: r.phi_t.mean(axis=1)))
    with pytest.raises(BnmemError, match="unknown attack"):
        evaluate_stream(*_phi(), attacks=["nope"])


def test_builtin_places_are_declared_once():
    assert attack_spec.shown_in(attack_spec.AUDIT) == ("online", "offline", "rmia", "loss")
    assert attack_spec.shown_in(attack_spec.LENS_TABLE) == ("online", "online_fixed_variance", "offline", "rmia",
                                                              "loss")
    assert attack_spec.default_attacks()[-1] == "rmia" and "rmia_offline" not in attack_spec.default_attacks()
    assert attack_spec.LABELS["online"] == "online LiRA" and attack_spec.label("unknown") == "unknown"


def test_toy_attack_in_the_audit(toy):
    from bnmem.auditing.membership import attack_section

    phi, keep = _phi(n=40)
    outl = np.zeros(40, bool)
    outl[:6] = True
    ds = SimpleNamespace(n_train=40, is_outlier=outl, is_clean=~outl, info={}, x_test=np.zeros((20, 1)))
    pop = np.random.default_rng(1).normal(size=(8, 20, 2))
    section = attack_section(ds, keep, phi, pop, None, 0)
    assert TOY in section["attacks"] and set(section["attacks"][TOY]) == {"all", "outliers", "inliers"}


@pytest.mark.slow
def test_toy_attack_in_lira_results_report_and_tidy_export(toy, tmp_path):
    import json

    from bnmem.cli import main
    from bnmem.report.build import key_tables
    from bnmem.report.rundata import load_run
    from bnmem.results import load

    out = tmp_path / "lira"
    assert main(["lira", "--dataset", "digits", "--train-size", "80", "--epochs", "1", "--shadow-models", "4",
                 "--norms", "batch,none", "--label-noise", "0.1", "--out", str(out), "--quiet"]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    assert {"all", "outliers"} <= set(doc["batch"][TOY]) and 0 <= doc["none"][TOY]["all"]["auc"] <= 1
    lira_rows = [r for t in key_tables(load_run(out))["lira"] for r in t.rows]
    assert any(r[0] == TOY for r in lira_rows)
    df = load(out)
    rows = df[(df["lens"] == "lira") & (df["method"] == TOY)]
    assert len(rows) == 2 * 4 * rows["subset"].nunique() * rows["metric"].nunique() and len(rows) > 0
    assert main(["report", str(out)]) == 0 and TOY in (out / "report.html").read_text()
