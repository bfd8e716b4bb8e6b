"""Claims 4 and 7 restricted to the BN layers with an identifiable γ scale (bnmem.report.claims.identifiable).

Synthetic gamma_sigma runs (no training): claim 4's own test must run over the identifiable layers only, with the
others described; claim 7's deciding layers come from the graph flag, cross-checked with the radial cosine.
"""

from __future__ import annotations

import numpy as np
import pytest

from bnmem.analysis_plan import CONTRADICTED, GS_SIGMA, NOT_RUN, REPRODUCED
from bnmem.report.claims.claim7 import PUSH_INVARIANT_COS
from bnmem.names import GAMMA_SIGMA
from bnmem.report.claims import claim4, claim7
from bnmem.report.claims import identifiable as ident
from bnmem.report.results import settings_of

from synthetic_runs import make_cell, make_run

STRONG = 10.0  # a layer far from 1 (log ratio ±10): its p is ≈ 0 even at n = 2


def _run(means, flags, n: int = 4, seeds: int = 2, steps=None):
    """One setting, n replicates; per BN layer its true mean log median |γ|/σ and its flag (None: not recorded)."""
    rng = np.random.default_rng(3)
    mu = np.asarray(means, dtype=float)
    cells = []
    for r in range(n):
        vals = (mu + rng.normal(0, 0.03, mu.size))[None, :] + rng.normal(0, 0.03, (seeds, mu.size))
        final = {}
        for i in range(mu.size):
            rec = {"n_channels": 8, "layer_type": "conv", "median_ratio": 1.0, "per_seed": {
                str(s): {"median_ratio": float(np.exp(vals[s, i])), "frac_above_1": float(vals[s, i] > 0),
                         **({"median_effective_step": steps[i] * (1 + s)} if steps else {})}
                for s in range(seeds)}}
            if flags[i] is not None:
                rec["scale_identifiable"] = flags[i]
            final[f"bn{i}"] = rec
        data = {"final": {"running": final}, "conditions": {"norms": ["batch"], "label_noise": 0.05}}
        cells.append(make_cell("glenet", r, {GAMMA_SIGMA: data}))
    return settings_of(make_run(cells), GAMMA_SIGMA)[0].lenses(GAMMA_SIGMA)


def test_claim4_decides_on_the_identifiable_layers_and_describes_the_others():
    # One identifiable layer far above 1, three non-identifiable far below: every layer reads contradicted,
    # the identifiable one reproduced.
    reps = _run([STRONG, -STRONG, -STRONG, -STRONG], [True, False, False, False])
    assert claim4.layer_analysis("all", reps, GS_SIGMA).status == CONTRADICTED
    a = ident.claim4_identifiable(reps, claim4.layer_analysis)
    assert a.status == REPRODUCED
    assert a.value == pytest.approx(np.exp(STRONG), rel=0.1)  # bn0's |γ|/σ, the only deciding layer
    assert "1 of 4 BN layers identifiable (bn0)" in a.note
    assert "3 layers whose γ scale is not identifiable (bn1, bn2, bn3)" in a.note
    assert "0.0, 0.0, 0.0, 0.0 of 3" in a.note  # none of them above 1 in any replicate


def test_claim4_over_identifiable_layers_is_claim4s_own_test_on_those_layers():
    rng = np.random.default_rng(5)
    means = rng.normal(0.2, 0.4, 6)
    flags = [True, False, True, True, False, True]
    reps = _run(means, flags)
    a = ident.claim4_identifiable(reps, claim4.layer_analysis)
    b = claim4.layer_analysis("same", ident.restricted(reps, ["bn0", "bn2", "bn3", "bn5"]), GS_SIGMA)
    assert (a.status, a.value, a.ci_low, a.ci_high) == (b.status, b.value, b.ci_low, b.ci_high)
    # all layers identifiable: exactly claim 4's analysis of today
    every = _run(means, [True] * 6)
    c, d = ident.claim4_identifiable(every, claim4.layer_analysis), claim4.layer_analysis("x", every, GS_SIGMA)
    assert (c.status, c.value, c.ci_low, c.ci_high) == (d.status, d.value, d.ci_low, d.ci_high)


def test_claim4_is_not_run_without_the_flag_or_an_identifiable_layer():
    assert ident.claim4_identifiable(_run([1.0, 1.0], [True, None]), claim4.layer_analysis).status == NOT_RUN
    none = ident.claim4_identifiable(_run([1.0, 1.0], [False, False]), claim4.layer_analysis)
    assert none.status == NOT_RUN and "no layer can decide" in none.note


def test_the_split_reads_every_replicate():
    reps = _run([0.0, 0.0, 0.0], [True, False, True])
    split = ident.layer_split(reps)
    assert (split.identifiable, split.described, split.unknown) == (("bn0", "bn2"), ("bn1",), ())
    assert split.text() == "2 of 3 BN layers identifiable (bn0, bn2)"
    # a replicate that disagrees (another architecture would) makes the layer unknown
    reps[1][1].data["final"]["running"]["bn1"]["scale_identifiable"] = True
    assert ident.layer_split(reps).unknown == ("bn1",)


def test_the_effective_step_row_is_a_geometric_mean_described_not_deciding():
    reps = _run([0.0, 0.0], [True, False], n=2, seeds=2, steps=[0.5, 2.0])
    steps = ident.effective_steps(reps)
    assert steps["bn0"] == pytest.approx(np.sqrt(0.5 * 1.0))  # seeds 0, 1: 0.5·1, 0.5·2
    assert steps["bn1"] == pytest.approx(np.sqrt(2.0 * 4.0))
    row = ident.effective_step_analysis(reps)
    assert not row.valid and row.status == NOT_RUN and "bn0*" in row.note and "bn1 " in row.note


def _models(flags_per_model, layers=("norm1", "norm4")):
    return [(0, {str(k): {"epochs": [], "scale_identifiable": f} for k, f in enumerate(flags_per_model)})]


def test_claim7_takes_its_deciding_layers_from_the_graph_and_names_disagreements():
    cos = {"norm1": PUSH_INVARIANT_COS / 100, "norm4": 0.5}
    agree = ident.claim7_layers(_models([{"norm1": False, "norm4": True}] * 2), cos, claim7.scale_invariant(cos))
    assert (agree.deciding, agree.described, agree.disagree, agree.source) == (("norm4",), ("norm1",), (), "graph")
    # the radial cosine calls norm4 invariant too: the graph still decides, the disagreement is named
    flat = {**cos, "norm4": 0.0}
    split = ident.claim7_layers(_models([{"norm1": False, "norm4": True}]), flat, claim7.scale_invariant(flat))
    assert split.deciding == ("norm4",) and split.disagree == ("norm4",)
    # models recorded before the flag: the radial cosine decides, as in plan 5.0
    old = ident.claim7_layers(_models([None]), cos, claim7.scale_invariant(cos))
    assert (old.deciding, old.described, old.source) == (("norm4",), ("norm1",), "radial cosine")


def test_the_plan_texts_have_no_placeholder():
    for text in (ident.IDENTIFIABLE_RULE, ident.CLAIM4_RULE, ident.CLAIM7_RULE, ident.EFFECTIVE_STEP_ROW):
        assert "{" not in text and "}" not in text and text.endswith(".")


def _cells(means, flags, n: int = 4):
    reps = _run(means, flags, n)
    return make_run([cell for cell, _ in reps])


def test_claim4_row_is_decided_on_identifiable_layers_and_shows_every_layer_as_the_previous_verdict():
    """Plan 6.0 wired: the claim's row reads the identifiable layers; plan 5.0's every-layer verdict is its
    previous verdict and the panel's 'every BN layer' row; a run without the flag is decided on every layer and
    says so."""
    from bnmem.analysis_plan import EVERY_LAYER, IDENTIFIABLE_LAYERS

    (claim,) = claim4.evaluate(_cells([STRONG, -STRONG, -STRONG, -STRONG], [True, False, False, False]))
    assert claim.status == REPRODUCED and claim.previous_status == CONTRADICTED
    panel = dict(claim.panel())
    assert panel[IDENTIFIABLE_LAYERS].status == REPRODUCED and panel[EVERY_LAYER].status == CONTRADICTED
    assert claim.deciding()[0].conditions["layers"] == "the 1 of 4 BN layers whose γ scale is identifiable"
    (old,) = claim4.evaluate(_cells([STRONG, -STRONG, -STRONG, -STRONG], [None] * 4))
    assert old.status == CONTRADICTED and "decided on every BN layer" in old.deciding()[0].note
