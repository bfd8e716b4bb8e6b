"""Shared machinery of the property-based fuzzer (tests/test_fuzz.py).

``invoke`` runs ``bnmem`` in process through :func:`bnmem.cli.main` with captured output; ``engine_stubs``
replaces the expensive engines (training, the study executor, the audit's measurements) by a stub that raises
:class:`Reached`: an input that gets that far passed every check a user's typo can fail. ``check_outcome`` is
the property every generated case must hold.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from hypothesis import settings

from bnmem.cli import main

# Files whose presence says "this finished": none may appear from a command that failed.
FINISHED = {"DONE", "report.html", "summary.csv", "summary.md", "audit.json", "audit.md", "audit.html",
            "results.csv", "results.parquet", "metrics.json", "theory.json", "index.json"}


class Reached(Exception):
    """A stubbed engine was called: the input passed validation."""


@dataclass
class Outcome:
    code: int | None  # None: the engine stub was reached
    out: str
    err: str

    @property
    def reached(self) -> bool:
        return self.code is None


def invoke(argv: list[str]) -> Outcome:
    """``bnmem ARGV`` in this process; any exception but :class:`Reached` propagates (a crash)."""
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            code = main([str(a) for a in argv])
        except Reached:
            code = None
    return Outcome(code, o.getvalue(), e.getvalue())


def files_under(root: Path) -> dict[str, int]:
    """Relative path -> size of every file under ``root``."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def error_line(err: str) -> str:
    """The one ``bnmem: error:`` line of ``err`` (warnings may precede it); fails on anything else."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("bnmem: warning:")]
    assert len(lines) == 1, f"expected one error line, got {len(lines)}:\n{err}"
    assert lines[0].startswith("bnmem: error:"), err
    return lines[0]


def check_outcome(r: Outcome, argv: list[str], before: dict[str, int], after: dict[str, int]) -> None:
    """The fuzzer's property: success or the stub, or exit 2 with one error line and nothing finished-looking
    written by the failed command."""
    case = "bnmem " + " ".join(map(str, argv))
    if r.reached or r.code == 0:
        assert "Traceback" not in r.err, f"{case}\n{r.err}"
        return
    assert r.code == 2, f"{case}: exit {r.code}\n{r.err}"
    try:
        error_line(r.err)
    except AssertionError as e:
        raise AssertionError(f"{case}: {e}") from None
    new = {p for p, size in after.items() if before.get(p) != size}
    looks_done = sorted(p for p in new if Path(p).name in FINISHED)
    assert not looks_done, f"{case}: failed (exit 2) but wrote {looks_done}"


@contextlib.contextmanager
def in_directory(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _reached(*args, **kwargs):
    raise Reached


class _DummyExecutor:
    def close(self) -> None:
        pass


@contextlib.contextmanager
def _reached_cm(*args, **kwargs):
    raise Reached
    yield  # pragma: no cover


@contextlib.contextmanager
def engine_stubs() -> Iterator[pytest.MonkeyPatch]:
    """Training, the study run, the audit's measurements and the dry run's step timing replaced (see module doc).

    Everything before them (flag parsing, config validation, the study's plan, the model and data checks) runs.
    """
    import bnmem.auditing.run
    import bnmem.cli.commands.lens
    import bnmem.executors
    import bnmem.rundir
    import bnmem.study.cost
    import bnmem.study.preflight
    import bnmem.theory

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bnmem.cli.commands.lens, "removed_if_unstarted", _reached_cm)
        mp.setattr(bnmem.rundir, "removed_if_unstarted", _reached_cm)
        mp.setattr(bnmem.theory, "run_theory", _reached)
        mp.setattr(bnmem.study.preflight, "preflight", _reached)
        mp.setattr(bnmem.executors, "get_executor", lambda *a, **k: _DummyExecutor())
        mp.setattr(bnmem.auditing.run, "run_audit", _reached)
        # The dry run times one training step per architecture (torch, seconds): not an input check.
        mp.setattr(bnmem.study.cost, "step_seconds", lambda *a, **k: 1e-4)
        yield mp


SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


def examples(n: int) -> settings:
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None)


# ---------------------------------------------------------------------------------------------- fixtures (imported by the test_fuzz* modules)

TINY_STUDY = {"name": "fz", "data": {"dataset": "digits", "train_size": 120}, "train": {"epochs": 1, "batch_size": 64},
              "norms": ["batch", "none"], "grid": {"seeds": [0], "replicates": 1}, "lenses": {"memorize": {}}}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """Inputs shared by the families: a tiny valid study, a model that fits digits, an image folder with its
    fitting model, junk files."""
    import torch
    from PIL import Image
    from torch import nn

    from bnmem.data.sources import dataset_shape
    from bnmem.models import build_model

    root = tmp_path_factory.mktemp("fuzz-assets")
    study = root / "study.yaml"
    study.write_text(yaml.safe_dump(TINY_STUDY))
    shape, classes = dataset_shape("digits")
    torch.manual_seed(0)
    model = root / "model.pt"
    torch.save(build_model("lenet", shape, classes, "batch"), model)
    (root / "empty.bin").write_bytes(b"")
    (root / "junk.bin").write_bytes(b"\x00\xffnot a model\n" * 7)
    (root / "a_dir").mkdir()
    # An image folder: 3 classes x 6 RGB 8x8 PNGs in one folder (seeded split), and a CNN that fits it.
    pictures = root / "pictures"
    rng = torch.Generator().manual_seed(0)
    for c in range(3):
        (pictures / f"c{c}").mkdir(parents=True)
        for i in range(6):
            pixels = (torch.rand(8, 8, 3, generator=rng) * 255).to(torch.uint8).numpy()
            Image.fromarray(pixels, mode="RGB").save(pictures / f"c{c}" / f"img{i}.png")
    folder_model = root / "folder_model.pt"
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                             nn.Linear(4 * 8 * 8, 3)), folder_model)
    (root / "mislabeled.csv").write_text("file\nc0/img0.png\n")
    return {"root": root, "study": study, "model": model, "pictures": pictures, "folder_model": folder_model}


@pytest.fixture
def stubs():
    with engine_stubs() as mp:
        yield mp


def run_case(argv: list[str], cwd: Path | None = None, watch: Path | None = None):
    """Run ``argv`` in a fresh working directory (default outputs land there); check the property."""
    with tempfile.TemporaryDirectory(prefix="bnmem-fuzz-") as tmp:
        here = Path(tmp) if cwd is None else cwd
        watched = here if watch is None else watch
        with in_directory(here):
            before = files_under(watched)
            r = invoke(argv)
            after = files_under(watched)
        check_outcome(r, argv, before, after)
        return r


