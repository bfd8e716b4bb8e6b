"""Whether a torch device named in a config exists on this machine (checked when a run starts)."""

from __future__ import annotations

from bnmem.config import check_device
from bnmem.errors import BnmemError


def check_device_here(device: str, flag: str = "--device") -> None:
    """Fail with one line when ``device`` is not present on this machine (torch would raise deep inside a run).

    Raises:
        BnmemError: no CUDA (or that CUDA index), no MPS, no XPU.
    """
    kind, _, index = check_device(device).partition(":")
    if kind == "cpu":
        return
    import torch

    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    elif kind == "mps":
        count = int(torch.backends.mps.is_available())
    else:
        count = torch.xpu.device_count() if hasattr(torch, "xpu") and torch.xpu.is_available() else 0
    if count == 0:
        raise BnmemError(f"{flag} {device}: this machine has no {kind} device (torch sees none); use {flag} cpu")
    if index and int(index) >= count:
        raise BnmemError(f"{flag} {device}: this machine has {count} {kind} device(s), numbered from 0")
