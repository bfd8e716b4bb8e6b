"""The study jobs' malloc setting: freed blocks stay in the process (no page faults to get them back)."""

from __future__ import annotations

import ctypes.util
import resource
import sys

import pytest
import torch

from bnmem import allocator
from bnmem.study import run as study_run

GLIBC = sys.platform.startswith("linux") and "musl" not in (ctypes.util.find_library("c") or "")


def _faults_to_touch(nbytes: int) -> int:
    """Minor page faults taken to allocate and fill a fresh tensor of ``nbytes``."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(nbytes // 4, dtype=torch.float32)
    t.fill_(1.0)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del t
    return faults


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_freed_blocks_are_reused_without_page_faults():
    """48 MB blocks (above glibc's largest dynamic mmap threshold, 32 MB: by default each one is a fresh mmap,
    faulted in page by page) allocated and freed 20 times: once a few freed ones have merged into a free run
    large enough (torch's 64-byte alignment asks a little more than the block), the rest come back unfaulted."""
    assert allocator.keep_freed_memory() is True
    assert allocator.keep_freed_memory() is True  # once per process; later calls change nothing
    size = 48 * 2**20
    pages = size // resource.getpagesize()
    faults = [_faults_to_touch(size) for _ in range(20)]
    assert sum(faults[10:]) < pages, faults  # by default: 10 x pages


def test_every_study_job_sets_it(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(study_run, "keep_freed_memory", lambda: calls.append(1))
    monkeypatch.setattr(study_run.registry, "get", lambda name: (_ for _ in ()).throw(RuntimeError("no lens")))
    from bnmem.lenses.work import LensWork

    work = LensWork("memorize", None, tmp_path / "x")  # unfinished; its lens fails to load
    result = study_run.run_job(study_run.Job("x", "memorize", "x", work=work))
    assert calls == [1] and result["status"] == "failed"
    # a lira cell's work: its recipe, training and query jobs (each the engine's function after the setting)
    from bnmem.shadow import work as shadow_work

    monkeypatch.setattr(shadow_work, "keep_freed_memory", lambda: calls.append(2))
    for fn in (shadow_work.select_recipe_job, shadow_work.train_chunk_job, shadow_work.query_chunk_job):
        with pytest.raises(AttributeError):  # no chunk (or work): the engine's job fails after the setting
            fn(None)
    assert calls == [1, 2, 2, 2]
