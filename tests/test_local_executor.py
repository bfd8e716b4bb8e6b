"""The local executor: in-process and with worker processes give the same bits."""

import dataclasses
import os
import subprocess
import sys

import pytest

from bnmem.errors import BnmemError
from bnmem.executors import get_executor
from bnmem.executors._selftest import run_selftest


def test_worker_processes_match_in_process(tmp_path):
    one = run_selftest(tmp_path / "one", get_executor("local", progress=False), n_jobs=4, steps=10)
    two = run_selftest(tmp_path / "two", get_executor("local", progress=False, workers=2), n_jobs=4, steps=10)
    assert sorted(two["ran"]) == [0, 1, 2, 3]
    assert one["checksum"] == two["checksum"]
    # a rerun submits nothing
    again = run_selftest(tmp_path / "two", get_executor("local", progress=False, workers=2), n_jobs=4, steps=10)
    assert again["ran"] == [] and again["checksum"] == one["checksum"]


def _boom(spec):
    if spec["i"] == 1:
        raise ValueError("job 1 failed")
    return {"i": spec["i"]}


def test_results_in_spec_order_and_errors_surface():
    ex = get_executor("local", progress=False, workers=2)
    assert ex.map(_square, [{"x": i} for i in range(5)]) == [{"y": i * i} for i in range(5)]
    with pytest.raises(ValueError, match="job 1 failed"):
        ex.map(_boom, [{"i": i} for i in range(3)])


def _square(spec):
    return {"y": spec["x"] ** 2}


def test_bad_worker_count():
    with pytest.raises(BnmemError, match="--workers must be at least 1"):
        get_executor("local", workers=0)


@dataclasses.dataclass(frozen=True)
class _Job:
    i: int
    progress: bool = True


def _progress_of(spec):
    return {"progress": spec.progress if isinstance(spec, _Job) else spec.get("progress")}


def test_worker_children_are_quiet():
    """With worker processes the children draw no per-model bars (they would overwrite the job bar and each
    other): their specs (dicts or dataclasses, as a shadow chunk) arrive with progress off; in-process jobs
    keep what they were given."""
    specs = [{"progress": True, "i": 0}, _Job(1), {"progress": True, "i": 2}]
    assert get_executor("local", progress=False, workers=2).map(_progress_of, specs) == [{"progress": False}] * 3
    assert get_executor("local", progress=False, workers=1).map(_progress_of, specs) == [{"progress": True}] * 3
    assert specs[0]["progress"] is True and specs[1].progress is True  # the caller's specs are not modified


def test_quiet_leaves_a_spec_without_progress_alone():
    from bnmem.executors.base import quiet

    assert quiet(_Job(0)) == _Job(0, progress=False) and type(quiet(_Job(0))) is _Job
    no_bar = {"i": 1}
    assert quiet(no_bar) is no_bar and quiet(dataclasses.replace) is dataclasses.replace


def _pid(spec):
    import os

    return {"pid": os.getpid()}


def test_workers_are_kept_between_maps_until_close():
    """A study maps once per stage: the second map reuses the first one's worker processes (no second start-up);
    close stops them, and a later map starts new ones."""
    import os

    ex = get_executor("local", progress=False, workers=2)
    try:
        first = {r["pid"] for r in ex.map(_pid, [{}] * 6)}
        second = {r["pid"] for r in ex.map(_pid, [{}] * 6)}
        assert os.getpid() not in first and second <= first
        ex.close()
        third = {r["pid"] for r in ex.map(_pid, [{}] * 6)}
        assert third.isdisjoint(first)
    finally:
        ex.close()


def test_preloaded_workers_match_spawned_ones(tmp_path):
    """Workers forked from a fork server that preloaded torch give the bits of spawned ones."""
    spawned = run_selftest(tmp_path / "spawn", get_executor("local", progress=False, workers=2), n_jobs=4, steps=10)
    ex = get_executor("local", progress=False, workers=2, preload=("torch",))
    try:
        forked = run_selftest(tmp_path / "fork", ex, n_jobs=4, steps=10)
        assert ex._context.get_start_method() == "forkserver"
    finally:
        ex.close()
    assert sorted(forked["ran"]) == [0, 1, 2, 3] and forked["checksum"] == spawned["checksum"]


_THREADS = """
import os, sys
def threads():
    return len(os.listdir("/proc/self/task"))
import numpy, scipy.special  # the BLAS pools: their at-fork handlers stop them before a fork
base = threads()
from bnmem.study.graph import WORKER_PRELOAD
for name in WORKER_PRELOAD:
    __import__(name)
late = sorted(m for m in ("sklearn", "pandas", "pyarrow") if m in sys.modules)
print(base, threads(), ",".join(late))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_study_preload_starts_no_thread():
    """What the fork server imports for a study starts no thread a fork would break (nothing besides the BLAS
    pools; not sklearn, whose pandas and pyarrow start jemalloc's background thread)."""
    out = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True, check=True)
    base, after, late = (out.stdout.split() + [""])[:3]
    assert int(after) == int(base) and late == "", out.stdout


def test_an_unused_fork_server_is_stopped_at_close():
    """A study that fails its checks closes its executor before any job: the server's imports stop with it."""
    from multiprocessing import forkserver

    ex = get_executor("local", progress=False, workers=2, preload=("torch",))
    pid = forkserver._forkserver._forkserver_pid
    assert pid is not None
    ex.close()
    assert forkserver._forkserver._forkserver_pid is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: no such child any more


def test_the_fork_server_ignores_ctrl_c_while_it_imports_and_its_workers_do_not():
    """A Ctrl-C in bnmem run's first seconds prints no traceback from the server's imports (its preload starts
    with Ctrl-C off); the workers forked from it get Python's handler back, as spawned ones have."""
    from multiprocessing import forkserver

    from bnmem.executors._selftest import interrupt_handler

    ex = get_executor("local", progress=False, workers=2, preload=("torch",))
    try:
        modules = forkserver._forkserver._preload_modules
        assert modules[0] == "bnmem.executors._interrupt_off" and modules[-1] == "bnmem.executors._interrupt_on"
        out = ex.map(interrupt_handler, [{"id": i} for i in range(2)])
    finally:
        ex.close()
    assert [r["handler"] for r in out] == ["default", "default"]


def test_workers_are_spawned_off_linux(monkeypatch):
    """The fork server is for Linux only (on macOS a process with Accelerate loaded is not fork-safe)."""
    from bnmem.executors import local

    monkeypatch.setattr(local.sys, "platform", "darwin")
    assert local.start_context(("torch",)).get_start_method() == "spawn"
