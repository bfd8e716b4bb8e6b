"""The toy-model lens: one conv channel + linear classifier with and without BN (once per study).

The model and its measurements live in :mod:`bnmem.theory`; this module only
registers them as a lens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem.lenses.registry import Lens, register
from bnmem.lenses.spec import SPECS
from bnmem.names import THEORY
from bnmem.theory.config import TheoryConfig


def run(cfg: TheoryConfig, out: Path, *, progress: bool = True, executor: Any = None) -> dict[str, Any]:
    """Run the toy-model simulation into ``out`` (a finished identical one is not rerun)."""
    from bnmem.theory import run_theory

    return run_theory(cfg, out, progress=progress)


def summary(result: dict[str, Any]) -> str:
    """``section.key: value`` lines for the scalar entries of the simulation's summary."""
    def lines(d: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict):
                out += lines(v, f"{prefix}{k}.")
            elif isinstance(v, float):
                out.append(f"{prefix}{k}: {v:.4g}")
            elif v is None:  # a step that never came (within the run's steps), or a number not measured
                out.append(f"{prefix}{k}: " + ("not reached" if k.endswith(("_step", "_fit")) else "—"))
            elif isinstance(v, (int, str)):
                out.append(f"{prefix}{k}: {v}")
        return out

    return "\n".join(lines(result.get("summary", result)))


LENS = register(Lens.of(SPECS[THEORY], config=TheoryConfig, run=run, summary=summary))
