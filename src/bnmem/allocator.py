"""Keep freed memory in the process instead of handing it back to the OS after every tensor.

glibc's malloc serves a large block (above a threshold that starts at 128 KB and
moves up only as large blocks are freed) with a fresh ``mmap`` and unmaps it on
``free``, and it trims the heap top back to the OS as soon as a few hundred KB lie
free there. A job that allocates and frees the same multi-MB tensors over and over
(the per-row gradients of the gradient-norm and γ/σ push hooks, the grouped
network's activations) then page-faults every fresh block in again, zeroed by the
kernel. Measured on the demo's BN shared training job (digits LeNet, flip cell, one
thread, best of 3): 435 k minor page faults -> 35 k, 1.26 s -> 0.15 s of system time,
14.9 -> 12.1 CPU seconds in all (``benchmarks/bench_shared.py``; the no-norm job
2.9 -> 2.6). Results do not change: torch aligns every CPU
tensor to 64 bytes whichever way malloc finds the memory, so the kernels see the
same alignment and sum in the same order (the demo's lens files are byte-identical).

The price is memory kept: freed blocks stay in the process (its resident size is
its peak so far, not its current need) until the free top of the heap exceeds
:data:`TRIM_THRESHOLD`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt parameters (glibc's malloc.h); setting either also turns off the dynamic thresholds.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap (freed ones are reused) instead of a fresh mmap each.
MMAP_THRESHOLD = 256 * 2**20
# The heap's free top goes back to the OS only above this size.
TRIM_THRESHOLD = 1024 * 2**20

_done: list[bool] = []


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once; later calls do nothing).

    Returns:
        Whether the thresholds are set (False off glibc, e.g. macOS, or where ``mallopt`` refuses them:
        the process then keeps malloc's defaults, with the same results).
    """
    if _done:
        return _done[0]
    ok = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):  # not glibc (musl has no mallopt)
            mallopt = None
        if mallopt is not None:
            ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    _done.append(ok)
    return ok
