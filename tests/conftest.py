"""Shared test set-up: one intra-op thread, so float32 results are bitwise reproducible."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import torch

torch.set_num_threads(1)

# Property-based tests draw the same examples on every run and machine (derandomize)
# and write no example database; training examples have no per-example deadline.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "bnmem", derandomize=True, database=None, deadline=None, max_examples=50,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile("bnmem")

