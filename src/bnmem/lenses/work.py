"""A lens's work in one cell, typed and built once: :class:`LensWork`, the lens's
:class:`~bnmem.lenses.registry.CellWork` in a study.

A study builds every job once (:func:`bnmem.study.run.build_jobs`): each lens job holds its lens's work, made by
:func:`lens_work` from the config validated then. The work says what the job trains (:meth:`LensWork.models`,
what the cost model times), what it writes (:meth:`LensWork.bytes`, the dry run's disk), the graph tasks it
runs first (lira's shadow-model chunks), and hands out its dataset (:meth:`LensWork.dataset`: loaded once per
process by :func:`bnmem.data.loaded.load_once`). A lens whose work differs from "every (norm, seed) once"
registers a subclass as its ``work`` (lira, mitigate, defenses). Kept apart from the registry, which the
report reads and which must import no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

from bnmem.data.loaded import load_once
from bnmem.lenses import registry
from bnmem.lenses.registry import FolderWork, Lens, Training
from bnmem.lenses.spec import get as spec_of


@dataclass(frozen=True, eq=False)
class LensWork(FolderWork):
    """A lens's work in one folder (a cell's, or the study's for a once-per-study lens): the lens's
    :class:`~bnmem.lenses.registry.CellWork`. A lens whose work differs (the models it trains, the bytes it writes, tasks of its own)
    registers a subclass as its ``work``.

    Attributes:
        kind: the lens's name.
        cfg: its config, validated once when the study's jobs were built; the job runs with it.
        out: its folder.
    """

    kind: str
    cfg: Any
    out: Path
    lens_share: ClassVar[float] = 1.0
    marked: ClassVar[bool] = True

    @property
    def lens(self) -> Lens:
        return registry.get(self.kind)

    @property
    def step_factor(self) -> float:
        return spec_of(self.kind).step_factor

    @property
    def fixed_seconds(self) -> float:
        return spec_of(self.kind).fixed_seconds

    def dataset(self) -> Any:
        return load_once(self.cfg.data)

    def training(self) -> Training | None:
        if not all(hasattr(self.cfg, k) for k in ("data", "arch", "train")):
            return None
        return Training(self.cfg.data, self.cfg.arch, self.cfg.train)

    def models(self) -> float:
        """Every (norm, seed) of its config, once (a lens that trains something else says so)."""
        return float(len(getattr(self.cfg, "norms", None) or [1]) * len(getattr(self.cfg, "seeds", None) or [1]))

    def bytes(self, n_train: int, parameter_count: Callable[[str, str, str], int]) -> dict[str, int]:
        """Float32 weights of every (norm, seed) model of a lens that :attr:`~LensSpec.trains_runs`."""
        if not spec_of(self.kind).trains_runs or not hasattr(self.cfg, "norms"):
            return {}
        cfg = self.cfg
        return {"models": 4 * sum(parameter_count(cfg.arch, cfg.data.dataset, n) for n in cfg.norms) * len(cfg.seeds)}

    def run(self, progress: bool = False, executor: Any = None) -> dict[str, Any]:
        """The lens's runner on its config and folder; its results."""
        return self.lens.run(self.cfg, self.out, progress=progress, executor=executor)

    def tidy(self) -> None:
        pass

    def in_driver(self) -> bool:
        spec = spec_of(self.kind)
        return spec.uses_executor and not spec.phases


def lens_work(lens: Lens, cfg: Any, out: str | Path) -> LensWork:
    """The work of ``lens`` with its validated config ``cfg`` in the folder ``out`` (its registered ``work``
    class, else :class:`LensWork`)."""
    return (lens.work or LensWork)(lens.name, cfg, Path(out))
