"""Memory-bounded per-sample gradients: chunk sizes from the footprint and a budget, one clear line when
not even one example fits."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn

from bnmem.errors import BnmemError
from bnmem.measure.gradnorms import float64_copy, per_sample_grad_norms
from bnmem.measure.memory import Footprint, fit_chunk, footprint, parse_size


def test_parse_size():
    assert parse_size("8GB") == 8 * 2**30 and parse_size("512 MiB") == 512 * 2**20
    assert parse_size("1.5g") == int(1.5 * 2**30) and parse_size(4096) == 4096
    for bad in ("lots", "8 parsecs", "0MB", "-1G"):
        with pytest.raises(BnmemError, match="max-memory"):
            parse_size(bad)


def test_footprint_counts_parameters_and_activations():
    model = float64_copy(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 10)))
    fp = footprint(model, torch.zeros(1, 1, 8, 8, dtype=torch.float64))
    n_params = 4 * 9 + 4 + 256 * 10 + 10
    assert fp.params == 8 * n_params and fp.model == 8 * n_params
    # conv out 4x8x8, relu 4x8x8, flatten 256, linear 10
    assert fp.activations == 8 * (256 + 256 + 256 + 10)
    assert fp.patches == 8 * 64 * 9  # L = 64 positions x 9 patch entries
    assert fp.per_example("vmap") > fp.per_example("ghost")


def test_fit_chunk_fits_the_budget_and_refuses_one_example_that_does_not_fit():
    fp = Footprint(params=8_000_000, model=8_000_000, activations=100_000)
    per = fp.per_example("vmap")
    assert fit_chunk(fp, "vmap", fp.model + 10 * per) == 10
    assert fit_chunk(fp, "vmap", 10**12) == 256 and fit_chunk(fp, "vmap", 10**12, requested=7) == 7
    with pytest.raises(BnmemError, match=r"cannot hold one example of the vmap .* give at least"):
        fit_chunk(fp, "vmap", fp.model + per // 2)
    # `--max-memory 8` is 8 bytes: the error shows the 8GB form (only for a budget that small)
    with pytest.raises(BnmemError, match=r"a number without a unit is bytes: --max-memory 8GB is 8 gigabytes"):
        fit_chunk(fp, "vmap", parse_size("8"))
    with pytest.raises(BnmemError) as err:
        fit_chunk(fp, "vmap", fp.model + per // 2)
    assert "without a unit" not in str(err.value)


BIG = 400 * 2**20
SCRIPT = r"""
import json, resource, sys, torch
from torch import nn
from bnmem.measure.gradnorms import per_sample_grad_norms
torch.manual_seed(0)
# 4.5 M parameters: one float64 per-sample gradient is 36 MB, so vmap over the 48 examples in one
# chunk (the default cap is 256) would hold 1.7 GB of gradients; the budget is 400 MB.
model = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 10))
x, y = torch.randn(48, 64), torch.randint(0, 10, (48,))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
r = per_sample_grad_norms(model, x, y, method=sys.argv[1], max_memory=sys.argv[2])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"grew": after - before, "chunk": r.chunk_size, "norms": r.norms[:3].tolist()}))
"""


@pytest.mark.parametrize("method", ["vmap", "ghost"])
def test_tight_budget_bounds_peak_memory(method, tmp_path):
    """A subprocess (fresh peak-RSS counter) measures under a 400 MB budget that vmap at the old fixed
    chunk would exceed several times over; the norms still equal the loop's."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT, method, "400MB"], capture_output=True, text=True,
                          env={"OMP_NUM_THREADS": "1", "PYTHONPATH": ":".join(sys.path)})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["grew"] < BIG, out
    if method == "vmap":
        assert 1 <= out["chunk"] < 48  # the budget, not the data, set the chunk
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 10))
    x, y = torch.randn(48, 64), torch.randint(0, 10, (48,))
    loop = per_sample_grad_norms(model, x[:3], y[:3], method="loop").norms
    assert out["norms"] == pytest.approx(loop.tolist(), rel=1e-9)


def test_budget_below_one_example_is_one_clear_error():
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))
    x, y = torch.randn(4, 64), torch.randint(0, 10, (4,))
    with pytest.raises(BnmemError, match="cannot hold one example of the vmap"):
        per_sample_grad_norms(model, x, y, method="vmap", max_memory="600KB")
    with pytest.raises(BnmemError, match="cannot hold the float64 copy"):
        per_sample_grad_norms(model, x, y, max_memory="10KB")
