"""Run directories: the resolved config, the environment, and resume safety."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.errors import BnmemError
from bnmem.names import CONFIG_FILE, ENVIRONMENT_FILE
from bnmem.version import __version__


def environment() -> dict[str, Any]:
    """Versions that condition every number a run produces."""
    import numpy
    import torch

    return {
        "bnmem": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "cuda": torch.cuda.is_available(),
    }


def prepare_run_dir(out: str | Path, config: dict[str, Any], name: str = CONFIG_FILE) -> Path:
    """Create ``out`` and write the resolved config, or check it matches on a rerun.

    A rerun into the same directory resumes (finished jobs are skipped), which is
    only sound with the same config; a different one is refused.

    Raises:
        BnmemError: the directory holds a run with a different config, or is not writable.
    """
    out = io.ensure_dir(out)
    path = out / name
    canonical = json.loads(json.dumps(config, default=str))
    if path.exists():
        try:
            previous = io.read_json(path)
        except (OSError, json.JSONDecodeError):
            previous = None
        if previous is not None and previous != canonical:
            raise BnmemError(
                f"{out} holds a run with a different configuration ({name}); "
                "use a new --out directory or delete the old one"
            )
    io.write_json(path, canonical)
    io.write_json(out / ENVIRONMENT_FILE, environment())
    return out
