"""Run directories: the resolved config, the environment, and resume safety."""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

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


# What prepare_run_dir writes before any job runs (a folder holding only these has no results).
START_FILES = frozenset({CONFIG_FILE, ENVIRONMENT_FILE})


def _canonical(config: dict[str, Any]) -> Any:
    return json.loads(json.dumps(config, default=str))


def config_hash(config: dict[str, Any], length: int = 8) -> str:
    """A short hex digest of ``config`` as ``config.json`` holds it (key order does not matter)."""
    text = json.dumps(_canonical(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def default_out(name: str, config: dict[str, Any], root: str | Path = "runs") -> Path:
    """``runs/<name>-<config hash>``: the run directory of one configuration, so a changed setting
    never lands in (and is refused by) the directory of another, and the same command resumes."""
    return Path(root) / f"{name}-{config_hash(config)}"


@contextmanager
def removed_if_unstarted(out: str | Path) -> Iterator[None]:
    """Remove ``out`` when the body fails before any result is written there.

    Only a directory this call did not find and that holds nothing but :data:`START_FILES`
    is removed, so a failed start (a missing optional package, missing data) leaves no
    config behind to refuse the corrected command, and nothing a run produced is lost.
    """
    out = Path(out)
    existed = out.exists()
    try:
        yield
    except BaseException:
        if not existed and out.is_dir() and {p.name for p in out.iterdir()} <= START_FILES:
            shutil.rmtree(out, ignore_errors=True)
        raise


def prepare_run_dir(out: str | Path, config: dict[str, Any], name: str = CONFIG_FILE) -> Path:
    """Create ``out`` and write the resolved config, or check it matches on a rerun.

    A rerun into the same directory resumes (finished jobs are skipped), which is
    only sound with the same config; a different one is refused.

    Raises:
        BnmemError: the directory holds a run with a different config, or is not writable.
    """
    out = io.ensure_dir(out)
    path = out / name
    canonical = _canonical(config)
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
