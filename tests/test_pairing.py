"""BN/other-norm pairs start from the same weights wherever both have a layer; the ResNet exception is recorded."""

from __future__ import annotations

import pytest
import torch

from bnmem.config import DataConfig
from bnmem.lenses.conditions import conditions
from bnmem.lenses.memorize import MemorizeConfig
from bnmem.models import ResNet
from bnmem.models.pairing import init_pairing

NORMS = ["batch", "none", "group", "layer"]


@pytest.mark.parametrize("arch", ["lenet", "mlp", "densenet", "resnet20"])
def test_shared_layers_start_identical_for_every_norm(arch):
    shape = (3, 32, 32) if arch != "mlp" else (1, 8, 8)
    rec = init_pairing(arch, shape, 10, NORMS, seed=7)
    for norm in ("group", "layer"):
        assert rec["per_norm"][norm]["differ"] == [] and rec["per_norm"][norm]["identical"] > 0
    differ = rec["per_norm"]["none"]["differ"]
    if arch == "resnet20":
        # Exactly the last conv of each of the 9 residual branches (zero-initialized without a norm).
        assert differ == sorted(f"layer{s}.{b}.conv2.weight" for s in (1, 2, 3) for b in range(3))
        assert "zero-initialized residual" in rec["note"]
    else:
        assert differ == []


def test_pairing_is_measured_not_assumed():
    # With the zero-init switched off the ResNet pair is identical everywhere both have a layer.
    def state(norm: str, zero) -> dict:
        torch.manual_seed(3)
        return ResNet((3, 8, 8), 10, norm, (8, 16), (1, 1), zero_init_residual=zero).state_dict()

    bn, none = state("batch", False), state("none", False)
    assert all(torch.equal(bn[k], none[k]) for k in set(bn) & set(none))
    zeroed = state("none", None)  # the default: zero-init without norm
    assert zeroed["layer1.0.conv2.weight"].abs().sum() == 0 < bn["layer1.0.conv2.weight"].abs().sum()
    assert torch.equal(zeroed["conv1.weight"], bn["conv1.weight"])


def test_results_name_what_differs_at_init():
    cond = conditions(MemorizeConfig(data=DataConfig(dataset="digits"), arch="resnet20"))
    assert "9 of" in cond["init_pairing"] and "conv2" in cond["init_pairing"]
    assert "identical" in conditions(MemorizeConfig())["init_pairing"]
    # Building the record leaves the global random stream alone.
    torch.manual_seed(0)
    a = torch.rand(1)
    torch.manual_seed(0)
    conditions(MemorizeConfig())
    assert torch.equal(torch.rand(1), a)
