"""The lens-side delete-one-model jackknife and how it feeds claim 3's interval with a single replicate."""

from __future__ import annotations

import numpy as np
import pytest

from bnmem.names import LIRA
from bnmem.report.claims import claim3
from bnmem.stats import jackknife_interval
from synthetic_runs import lira_run


def claim_lira(run, clean):
    return claim3.evaluate_one(run, clean)



def _toy_logits(rng, keep, labels, boost):
    m, n = keep.shape
    logits = rng.normal(0, 1, (m, n, 1, 3))
    logits[np.arange(m)[:, None], np.arange(n)[None], 0, labels[None]] += 1.0 + boost * keep
    return logits


def test_paired_jackknife_matches_the_exact_case_and_sees_shared_references():
    """With the loss attack (no reference models) deleting model j only removes target j, so each
    leave-one-out value is the mean of the other targets' differences and the jackknife se is the classical
    sd/√M. With online LiRA the deleted model also leaves every reference set, which the values must show."""
    from bnmem.lenses.lira.jackknife import paired_jackknife

    rng = np.random.default_rng(4)
    m, n = 8, 80
    keep = np.zeros((m, n), dtype=bool)
    keep[np.argsort(rng.random((m, n)), axis=0)[: m // 2], np.arange(n)] = True
    labels = rng.integers(0, 3, n)
    from bnmem.attacks.phi import phi_from_logits_block
    from bnmem.attacks.streaming import evaluate_stream

    a = phi_from_logits_block(_toy_logits(rng, keep, labels, 2.0), labels)
    b = phi_from_logits_block(_toy_logits(rng, keep, labels, 0.5), labels)
    full = {att: np.array(evaluate_stream(a, keep, attacks=[att])["metrics"][att]["all"]["auc_per_target"])
            - np.array(evaluate_stream(b, keep, attacks=[att])["metrics"][att]["all"]["auc_per_target"])
            for att in ("loss", "online")}
    jk = paired_jackknife(a, b, keep, attacks=("loss", "online"))
    d = full["loss"]
    np.testing.assert_allclose(jk["loss"]["all"], (d.sum() - d) / (m - 1), rtol=0, atol=1e-12)
    est = jackknife_interval(float(d.mean()), jk["loss"]["all"])
    half = (est.ci_high - est.ci_low) / 2
    from scipy import stats as sps

    assert half == pytest.approx(sps.t.ppf(0.975, m - 1) * d.std(ddof=1) / np.sqrt(m))
    target_only = (full["online"].sum() - full["online"]) / (m - 1)
    assert not np.allclose(jk["online"]["all"], target_only, atol=1e-6)
    same = paired_jackknife(a, a, keep, attacks=("online",))
    assert np.all(np.array(same["online"]["all"]) == 0.0)


def test_attach_jackknife_feeds_the_claim_3_interval(tmp_path):
    """The lens-side helper writes the jackknife where the report reads it: one replicate gets an interval."""
    from bnmem.attacks import evaluate_attacks
    from bnmem.lenses.lira.jackknife import attach_jackknife
    from bnmem.shadow.query import QUERY_FILE
    from bnmem.stats import paired_summary

    rng = np.random.default_rng(6)
    m, n = 6, 48
    keep = np.zeros((m, n), dtype=bool)
    keep[np.argsort(rng.random((m, n)), axis=0)[: m // 2], np.arange(n)] = True
    labels = rng.integers(0, 3, n)
    per_target = {}
    for norm, boost in (("batch", 3.0), ("none", 0.2)):
        d = tmp_path / norm
        d.mkdir()
        logits = _toy_logits(rng, keep, labels, boost)
        for name, arr in (("logits", logits), ("keep", keep), ("labels", labels),  # a legacy (logits) run dir
                          ("is_noisy", np.arange(n) < 4), ("is_ood", np.zeros(n, bool))):
            np.save(d / f"{name}.npy", arr)
        (d / QUERY_FILE).write_text("{}")
        per_target[norm] = evaluate_attacks(logits, keep, labels, attacks=["online"])["metrics"]["online"]["all"][
            "auc_per_target"]
    paired = {"batch-none": {"online": {"all": {"auc": paired_summary(per_target["batch"], per_target["none"])}}}}
    attach_jackknife(paired, tmp_path, "batch", ["none"], attacks=("online",))
    loo = paired["batch-none"]["online"]["all"]["auc"]["jackknife"]["leave_one_out"]
    assert len(loo) == m and np.all(np.isfinite(loo))
    run = lira_run([np.asarray(per_target["batch"]) - np.asarray(per_target["none"])], attacks=("online",))
    run.cells[0].lenses[LIRA].data["paired"] = paired
    claim = claim_lira(run, clean=False)
    assert claim.decisive.ci_low is not None and "jackknife over 6 shadow models" in claim.decisive.method


