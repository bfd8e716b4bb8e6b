"""The many-models engine against one-by-one training for the paper's and the fast architectures, BN and no
norm, in float64: ResNet-20 (vmap and grouped), DenseNet (vmap) and the fast pair (vmap and grouped).

One step (every model one full batch) and one epoch (IN sets of 40, 35 and 48 examples: 2 or 3 batches of 16,
so the skipped-step masking is exercised), with momentum, weight decay and, on BN, the γ/σ regularizer. Every
parameter and BN running statistic (and num_batches_tracked exactly) within 1e-9 of the oracle, and the eval
logits, which read each model's own running statistics, likewise (tests/test_ensemble.py's helpers and
tolerances). The models' running statistics differ from one another, so a shared or swapped statistic fails.
"""

from __future__ import annotations

import pytest
import torch

from bnmem.config import ModelConfig
from bnmem.train.ensemble import train_models
from test_ensemble import _assert_match, _in_sets, _oracle, _sgd

SEEDS = [3, 5, 8]
CASES = [("resnet20", "vmap"), ("resnet20", "grouped"), ("densenet", "vmap"), ("fastnet", "vmap"),
         ("fastnet", "grouped")]
SIZES = {"one step": (16, 19, 17), "one epoch": (40, 35, 48)}


@pytest.mark.parametrize("norm", ["batch", "none"])
@pytest.mark.parametrize("arch, method", CASES)
@pytest.mark.parametrize("length", list(SIZES))
def test_float64_engine_matches_one_by_one(ds64, arch, method, norm, length):
    mc, cfg, idx = ModelConfig(arch=arch, norm=norm), _sgd(epochs=1), _in_sets(SIZES[length])
    models = train_models(mc, ds64, cfg, SEEDS, idx, method=method, progress=False)
    refs = _oracle(mc, ds64, cfg, SEEDS, idx)
    _assert_match(refs, models, ds64, 1e-9)
    if norm == "batch":  # the models' statistics differ, so a shared or swapped one would have failed above
        name = next(k for k, _ in models[0].named_buffers() if k.endswith("running_mean"))
        means = [dict(m.named_buffers())[name] for m in models]
        assert all((means[0] - other).abs().max() > 1e-6 for other in means[1:])
