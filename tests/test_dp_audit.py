"""The DP audit: every DP variant's empirical ε lower bound must stay at or below its accountant ε.

It audits the whole pipeline, Opacus to bnmem's attacks: DP shadow models (the defenses lens), the
query, the attacks, the Clopper–Pearson bound. The check must be able to fail: with the DP noise
removed by a planted bug (the accountant still reports ε ≈ 1), the same check catches it.

Canaries (Steinke, Nasr & Jagielski 2023 style): 20% of the training set is OOD noise images with
random labels, each IN for a random half of the models. Flipped digits were too weak: without noise
(40 epochs, clipping at C = 1) the best bound on 5% or 20% flipped labels stayed near 1.2, which does
not clear ε = 1 once the family-wise correction is applied; noise canaries reach about 2.
"""

from __future__ import annotations

import pytest
import torch

from bnmem.config import DataConfig, TrainConfig

# The second test trains the same DP shadow models (same sizes): Opacus's σ searches are memoized (conftest).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("memoized_noise_multiplier")]


def _config():
    from bnmem.lenses.defenses import DefensesConfig

    return DefensesConfig(data=DataConfig(dataset="digits", ood=0.2, ood_source="noise", seed=0),
                          train=TrainConfig(epochs=40, batch_size=64, lr=0.05, momentum=0.9),
                          norms=["none"], gs_lambda=0, dp_norms=["none"], dp_epsilons=[1.0], dp_lr=0.5,
                          shadow_models=4, chunk_size=4, replicates=1)


def _run(out):
    from bnmem.lenses.defenses import run_defenses

    return run_defenses(_config(), out, progress=False)


def test_dp_variant_eps_lb_stays_below_its_epsilon(tmp_path):
    pytest.importorskip("opacus")
    from bnmem.lenses.defenses import summary

    res = _run(tmp_path / "defenses")
    v = res["variants"]["dp-none-eps1"]
    audit = v["dp_audit"]
    assert audit["passed"], audit
    assert audit["eps_lb_max"] <= v["epsilon"]["mean"] <= 1.0 + 1e-6
    assert audit["per_replicate"][0]["family_size"] == 2 * 2 * 4  # attacks × subsets × targets × replicates
    assert "consistent with the accountant" in summary(res)
    assert res["variants"]["none"].get("dp_audit") is None and "eps_lb" in res["variants"]["none"]


def test_audit_catches_a_planted_bug_that_removes_the_noise(tmp_path, monkeypatch):
    pytest.importorskip("opacus")
    import opacus.optimizers.optimizer as opacus_optimizer
    from bnmem.lenses.defenses import summary

    # The bug: DP-SGD adds no noise, while the accountant still reports the ε it planned for.
    monkeypatch.setattr(opacus_optimizer, "_generate_noise",
                        lambda std, reference, generator=None, secure_mode=False: torch.zeros_like(reference))
    res = _run(tmp_path / "defenses")
    v = res["variants"]["dp-none-eps1"]
    assert v["epsilon"]["mean"] == pytest.approx(1.0, abs=0.02)  # the accounting looks fine
    audit = v["dp_audit"]
    assert not audit["passed"] and audit["eps_lb_max"] > v["epsilon"]["mean"], audit
    assert "MORE leakage than the accountant" in summary(res)
