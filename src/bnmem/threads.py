"""Fixed torch thread counts per training job.

Float32 training is bitwise reproducible only at a fixed intra-op thread count,
so every job sets its own count, whatever process or executor runs it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the body with ``n`` intra-op threads, restoring the previous count."""
    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)
