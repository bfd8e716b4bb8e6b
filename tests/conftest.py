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



import functools  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def memoized_noise_multiplier():
    """Opacus's noise multiplier σ for a privacy budget, searched once per budget in this process.

    ``PrivacyEngine.make_private_with_epsilon`` binary-searches σ for (ε, δ, sample rate, epochs) with its
    accountant: pure arithmetic, seconds to tens of seconds per search on this machine. δ = 1/n and the sample
    rate follow each model's training-set size, so a model asks again only when it trains on as many examples
    as one before it: a resumed chunk retraining a model, a second test training the same DP shadow models.
    The memo returns the value the search would return; the training, noise and accounting are untouched.
    """
    try:
        import opacus.privacy_engine as engine
    except ImportError:  # the DP tests skip themselves
        yield
        return
    original = engine.get_noise_multiplier
    engine.get_noise_multiplier = functools.lru_cache(maxsize=None)(original)
    try:
        yield
    finally:
        engine.get_noise_multiplier = original


@pytest.fixture(scope="module")
def ds():
    """The noisy digits most training tests use (tests/digits_data.py's NOISY); a module that needs other data
    defines its own ``ds``."""
    from digits_data import NOISY

    from bnmem.data import load_dataset

    return load_dataset(NOISY)


@pytest.fixture(scope="module")
def ds64(ds):
    """The module's ``ds`` in float64 (a module can define its own)."""
    from digits_data import as_float64

    return as_float64(ds)


@pytest.fixture(params=[True, False], ids=["kernels", "numpy"])
def kernels_on(request, monkeypatch):
    """Each test twice: with the compiled attack kernels (skipped without numba) and with the plain numpy path."""
    from bnmem.attacks import kernels

    if request.param and kernels.compiled() is None:
        pytest.skip("numba is not installed")
    if not request.param:
        monkeypatch.setattr(kernels, "compiled", lambda: None)
    return request.param
