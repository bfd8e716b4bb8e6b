"""Chunk sizing from free memory (:mod:`bnmem.train.sizing`), with fake free-memory numbers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bnmem.train.sizing as sizing
from bnmem.config import ModelConfig, TrainConfig
from bnmem.train import seeded_model
from bnmem.train.ensemble import ACCEL_MAX_CHUNK, _max_chunk
from bnmem.train.ensemble_grouped_resnet import GroupedResNet

MiB, GiB = 2**20, 2**30


def test_chunk_fills_the_stated_fraction_of_free_memory():
    per_model = sizing.ModelBytes(state=10 * MiB, activations=90 * MiB)
    assert sizing.chunk_size(per_model, 10 * GiB, 512) == int(0.6 * 10 * 1024 // 100) == 61
    assert sizing.chunk_size(per_model, 10 * GiB, 512, fraction=0.3) == 30
    assert sizing.chunk_size(per_model, 10 * GiB, 512, multiple=4) == 60  # rounded down to the multiple
    assert sizing.chunk_size(per_model, 10 * GiB, 16) == 16  # the cap
    assert sizing.chunk_size(per_model, 10 * MiB, 512) == 1  # too little memory: one model at a time
    assert sizing.chunk_size(per_model, 10 * MiB, 512, multiple=2) == 2  # a grouped network pads to 2 anyway


def test_saved_activations_are_counted_exactly_on_a_known_model():
    # Linear (no bias) saves its input (10 floats per example), ReLU its output (20); the weight is excluded.
    model = nn.Sequential(nn.Linear(10, 20, bias=False), nn.ReLU())
    per_example, per_step = sizing.saved_activation_bytes(model, (10,), torch.float32)
    assert per_example == 30 * 4 and per_step == 0
    per_example64, _ = sizing.saved_activation_bytes(model, (10,), torch.float64)
    assert per_example64 == 30 * 8


def test_model_bytes_state_and_batch_scaling():
    model = nn.Sequential(nn.Linear(10, 20), nn.BatchNorm1d(20), nn.ReLU())
    n_params = 10 * 20 + 20 + 2 * 20
    buffers = 2 * 20 * 4 + 8  # running mean/var (float32) and num_batches_tracked (int64)
    sgd = sizing.model_bytes(model, (10,), 32, torch.float32, "sgd", 0.9)
    assert sgd.state == n_params * 4 * 3 + buffers  # parameters, gradients, momentum
    assert sizing.model_bytes(model, (10,), 32, torch.float32, "sgd", 0.0).state == n_params * 4 * 2 + buffers
    assert sizing.model_bytes(model, (10,), 32, torch.float32, "adam").state == n_params * 4 * 4 + buffers
    # Activations grow linearly with the batch: per example the linear layer's input (10), the BN's input (20) and
    # the ReLU's output (20); BN's per-channel mean and inverse std are per step.
    a = {b: sizing.model_bytes(model, (10,), b, torch.float32).activations for b in (32, 64, 96)}
    assert a[64] - a[32] == a[96] - a[64] == 32 * (10 + 20 + 20) * 4 * sizing.BACKWARD_PEAK


def test_accelerator_chunks_follow_the_devices_free_memory(ds, monkeypatch):
    """On CUDA the chunk is the share of mem_get_info's free memory (faked here) that the probe-measured
    per-model bytes fill, not a fixed budget."""
    model = seeded_model(ModelConfig(arch="resnet20", norm="batch"), ds, 0)
    cfg = TrainConfig(batch_size=128)
    per_model = sizing.model_bytes(model, ds.input_shape, 128, torch.float32, "sgd", 0.9)
    cuda = torch.device("cuda")
    chunks = {}
    for free in (1 * GiB, 4 * GiB, 64 * GiB):
        monkeypatch.setattr(sizing, "free_bytes", lambda device, free=free: free)
        chunks[free] = _max_chunk(cuda, model, ds.input_shape, cfg, torch.float32, "vmap")
        assert chunks[free] == min(ACCEL_MAX_CHUNK, max(1, int(sizing.FREE_FRACTION * free // per_model.total)))
        grouped = _max_chunk(cuda, model, ds.input_shape, cfg, torch.float32, "grouped", GroupedResNet)
        assert grouped % GroupedResNet.multiple == 0 and grouped <= max(2, chunks[free])
    assert chunks[1 * GiB] < chunks[4 * GiB] < chunks[64 * GiB]
    # bf16 autocast keeps its saved activations in half the bytes: more models fit.
    bf16 = cfg.model_copy(update={"precision": "bf16"})
    monkeypatch.setattr(sizing, "free_bytes", lambda device: 4 * GiB)
    assert _max_chunk(cuda, model, ds.input_shape, bf16, torch.float32, "vmap") > chunks[4 * GiB]


def test_cpu_uses_the_documented_bound():
    assert sizing.free_bytes(torch.device("cpu")) == sizing.CPU_MEMORY_BOUND


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_free_memory_is_the_drivers_plus_the_allocators_cache():
    free, total = torch.cuda.mem_get_info()
    assert free <= sizing.free_bytes(torch.device("cuda")) <= total
