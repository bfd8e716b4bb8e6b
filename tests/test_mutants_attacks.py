"""The attack registry (:mod:`bnmem.attacks.spec`) against expectations written out independently (issue 39).

The streaming scorers are built once, at import, into the registry; a test through the registry alone never
runs a changed ``_online`` / ``_offline`` (nor could a slip there be told apart from the registered closure), so
they are called here afresh and compared with scipy's Gaussian, as are the registered ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bnmem.attacks import spec
from bnmem.attacks.lira import STD_EPS


def _block(seed: int = 0) -> spec.Block:
    rng = np.random.default_rng(seed)
    shape = (2, 3, 2)  # targets, examples, views
    fits = {"med_in": rng.normal(1.0, 1.0, shape), "sd_in": rng.uniform(0.5, 2.0, shape),
            "med_out": rng.normal(-1.0, 1.0, shape), "sd_out": rng.uniform(0.5, 2.0, shape)}
    # a spread of exactly 0 (references that all agree) is where STD_EPS decides: it must be added, not subtracted
    fits["sd_in"][0, 0, 0] = fits["sd_out"][0, 1, 0] = 0.0
    return spec.Block(x=rng.normal(size=shape), fits=fits, sd_in=np.array([0.75, 0.0]), sd_out=np.array([0.0, 0.5]))


@pytest.mark.parametrize("fixed", [False, True])
def test_streaming_scorers_are_the_gaussian_likelihood_ratio_and_tail(fixed):
    b = _block()
    sd_in = b.sd_in[:, None, None] if fixed else b.fits["sd_in"]
    sd_out = b.sd_out[:, None, None] if fixed else b.fits["sd_out"]
    online = (stats.norm.logpdf(b.x, b.fits["med_in"], sd_in + STD_EPS)
              - stats.norm.logpdf(b.x, b.fits["med_out"], sd_out + STD_EPS))
    offline = -stats.norm.logsf((b.x - b.fits["med_out"]) / (sd_out + STD_EPS))  # −log P(OUT score ≥ x)
    np.testing.assert_allclose(spec._online(fixed)(b), online, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(spec._offline(fixed)(b), offline, rtol=1e-12, atol=1e-12)
    suffix = "_fixed_variance" if fixed else ""
    np.testing.assert_allclose(spec.get("online" + suffix).stream(b), online, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(spec.get("offline" + suffix).stream(b), offline, rtol=1e-12, atol=1e-12)


def test_labels_and_needs_as_declared():
    assert spec.label("online") == "online LiRA" and spec.label("rmia_offline") == "RMIA, offline"
    assert spec.label("an older attack") == "an older attack"
    assert spec.needing("in") == {"online", "online_fixed_variance", "rmia"}
    assert spec.needing("out") == {"online", "online_fixed_variance", "offline", "offline_fixed_variance", "rmia",
                                   "rmia_offline"}
    assert list(spec.LABELS) == list(spec.available()) and len(spec.LABELS) == len(spec.available())
    assert spec.LABELS["loss"] == "loss threshold"
    with pytest.raises(KeyError, match="nope"):
        spec.LABELS["nope"]
    assert spec.default_attacks() == tuple(n for n in spec.available() if n != "rmia_offline")
    assert spec.shown_in(spec.AUDIT) == ("online", "offline", "rmia", "loss")


@pytest.mark.parametrize("spread", ["none", "per_example", "global"])
def test_every_documented_spread_registers_and_unregistering_twice_is_harmless(spread):
    toy = spec.AttackSpec(f"toy_{spread}", "toy", spread=spread, oracle=lambda r: r.phi_t.mean(-1),
                          stream=lambda b: b.x)
    try:
        assert spec.register(toy) is toy and spec.get(toy.name) is toy and spec.available()[-1] == toy.name
    finally:
        spec.unregister(toy.name)
    spec.unregister(toy.name)  # already gone: no error
    assert toy.name not in spec.available()
