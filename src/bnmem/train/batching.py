"""Mini-batch order, shared by the plain and the ensemble trainer.

Data order is a pure function of (seed, epoch), so an interrupted run resumes
with exactly the batches it would have seen, and the ensemble trainer can be
checked batch-for-batch against the plain one.
"""

from __future__ import annotations

import torch

# Keeps the per-epoch order streams of different seeds apart.
_EPOCH_STRIDE = 1_000_003


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator that fixes the data order of ``epoch`` for ``seed``."""
    return torch.Generator().manual_seed(int(seed) * _EPOCH_STRIDE + int(epoch) + 1)


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[torch.Tensor]:
    """Positions 0..n-1 shuffled for this epoch and cut into full batches.

    The last partial batch is dropped (a different one each epoch): BN cannot
    normalize a batch of one, and equal batch sizes keep the ensemble trainer simple.

    Args:
        n: number of training examples of this model.
        batch_size: batch size; if ``n < batch_size`` a single batch of all ``n``.
        seed: the model's seed.
        epoch: 0-based epoch.

    Returns:
        A list of int64 index tensors into the model's training examples.
    """
    perm = torch.randperm(n, generator=epoch_generator(seed, epoch))
    bs = min(batch_size, n)
    n_full = n // bs
    return list(perm[: n_full * bs].view(n_full, bs))
