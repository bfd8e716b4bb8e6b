"""Job graphs: the graph runner's order, concurrency and failures; a study's graph run by worker processes equals
the same graph run level by level in one process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bnmem.executors import get_executor
from bnmem.executors.graph import JobGraph, Task

# --- jobs (module-level: spawned workers import them) ----------------------------------------------


def _log(spec, event: str) -> None:
    # One O_APPEND write per line: the log's line order is the order in which events happened, across processes.
    fd = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{event} {spec['name']}\n".encode())
    finally:
        os.close(fd)


def _logged(spec):
    """Log start, optionally wait for another job to start (or give up after a hang guard), log end."""
    _log(spec, "start")
    overlap = None
    if spec.get("wait_for"):
        # Waits on the event (the other job's start line); the guard only keeps a broken runner from hanging.
        guard = time.monotonic() + 120
        while overlap is None:
            lines = Path(spec["log"]).read_text().splitlines()
            if f"start {spec['wait_for']}" in lines:
                overlap = True
            elif time.monotonic() > guard:
                overlap = False
            else:
                time.sleep(0.01)
    if spec.get("raise"):
        raise ValueError(spec["raise"])
    time.sleep(spec.get("sleep", 0.0))
    _log(spec, "end")
    return {"name": spec["name"], "pid": os.getpid(), "overlap": overlap}


def _interrupt(spec):
    Path(spec["pids"], str(os.getpid())).touch()
    if spec.get("interrupt"):
        time.sleep(0.2)
        raise KeyboardInterrupt
    time.sleep(spec.get("sleep", 0.0))
    return {"pid": os.getpid()}


def _events(log: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in log.read_text().splitlines()]


def _task(log: Path, name: str, deps=(), after=(), cost=1.0, **spec) -> Task:
    return Task(name, _logged, [{"log": str(log), "name": name, **spec}], deps=tuple(deps), after=tuple(after),
                cost=cost)


def _diamond(log: Path) -> list[Task]:
    """a -> b, c -> d (d needs b and c), e runs after a; f is independent."""
    return [_task(log, "a", sleep=0.2), _task(log, "b", deps=["a"]), _task(log, "c", deps=["a"], sleep=0.2),
            _task(log, "d", deps=["b", "c"]), _task(log, "e", after=["a"]), _task(log, "f", sleep=0.1)]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_task_starts_only_after_what_it_needs_finished(tmp_path, workers):
    log = tmp_path / "log"
    tasks = _diamond(log)
    ex = get_executor("local", progress=False, workers=workers)
    try:
        results = ex.run_graph(tasks)
    finally:
        ex.close()
    events = _events(log)
    assert sorted(results) == sorted(t.id for t in tasks)
    assert all(r[0]["name"] == tid for tid, r in results.items())
    where = {e: i for i, e in enumerate(events)}
    assert len(where) == 2 * len(tasks)  # each started and ended once
    for t in tasks:
        for d in (*t.deps, *t.after):
            assert where[("end", d)] < where[("start", t.id)], (d, t.id)


def test_independent_tasks_run_at_once(tmp_path):
    """Two ready tasks, each waiting for the other to start: both see the other's start only if they overlap."""
    log = tmp_path / "log"
    tasks = [_task(log, "x", wait_for="y"), _task(log, "y", wait_for="x")]
    ex = get_executor("local", progress=False, workers=2)
    try:
        results = ex.run_graph(tasks)
    finally:
        ex.close()
    assert [results[t][0]["overlap"] for t in ("x", "y")] == [True, True]
    assert results["x"][0]["pid"] != results["y"][0]["pid"]


def test_the_costliest_ready_tasks_start_first(tmp_path):
    """With two workers the two costliest of four ready tasks start first: each waits until the other has
    started, so no other task can start before both have (a worker frees only when one of them ends)."""
    log = tmp_path / "log"
    tasks = [_task(log, "c1", cost=1.0), _task(log, "c4", cost=4.0, wait_for="c3"),
             _task(log, "c2", cost=2.0), _task(log, "c3", cost=3.0, wait_for="c4")]
    ex = get_executor("local", progress=False, workers=2)
    try:
        results = ex.run_graph(tasks)
    finally:
        ex.close()
    starts = [name for event, name in _events(log) if event == "start"]
    assert set(starts[:2]) == {"c4", "c3"} and results["c4"][0]["overlap"] and results["c3"][0]["overlap"]
    graph = JobGraph(tasks)  # the order the runner takes ready jobs in: by cost
    assert [graph.pop()[0] for _ in range(4)] == ["c4", "c3", "c2", "c1"]


def test_rank_counts_the_chain_behind_a_task():
    """A cheap task that a long chain waits for outranks a costlier task nothing waits for (upward rank)."""
    tasks = [Task("head", _logged, [{}], cost=1.0), Task("tail", _logged, [{}], deps=("head",), cost=10.0),
             Task("lone", _logged, [{}], cost=5.0)]
    graph = JobGraph(tasks)
    assert graph.rank == {"head": 11.0, "tail": 10.0, "lone": 5.0}
    assert [graph.pop()[0], graph.pop()[0], graph.pop()] == ["head", "lone", None]  # tail waits for head


def test_graph_refuses_unknown_needs_and_cycles():
    with pytest.raises(ValueError, match="unknown task"):
        JobGraph([Task("a", _logged, [{}], deps=("zz",))])
    with pytest.raises(ValueError, match="cycle"):
        JobGraph([Task("a", _logged, [{}], deps=("b",)), Task("b", _logged, [{}], after=("a",))])


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_task_skips_only_what_needs_it(tmp_path, workers):
    """a fails: b (needs a) and d (needs b) are skipped; e (only after a), c's and f's tasks still run."""
    log = tmp_path / "log"
    tasks = [_task(log, "a", **{"raise": "a broke"}), _task(log, "b", deps=["a"]), _task(log, "d", deps=["b"]),
             _task(log, "e", after=["a"]), _task(log, "f")]
    ex = get_executor("local", progress=False, workers=workers)
    try:
        results = ex.run_graph(tasks)
    finally:
        ex.close()
    assert results["a"][0]["status"] == "failed" and "ValueError: a broke" in results["a"][0]["error"]
    assert results["b"][0]["status"] == "blocked" and results["d"][0]["status"] == "blocked"
    assert results["e"][0]["name"] == "e" and results["f"][0]["name"] == "f"
    started = {name for event, name in _events(log) if event == "start"}
    assert started == {"a", "e", "f"}


def test_lazy_specs_are_listed_when_the_task_is_ready(tmp_path):
    """A task's specs may be a callable: it is called only after the task's needs have finished."""
    log = tmp_path / "log"
    seen = []

    def listing():
        seen.append([name for event, name in _events(log) if event == "end"])
        return [{"log": str(log), "name": f"chunk{i}"} for i in range(3)]

    tasks = [_task(log, "first", sleep=0.1), Task("chunks", _logged, listing, deps=("first",)),
             Task("empty", _logged, lambda: [], deps=("first",)), _task(log, "last", deps=["chunks", "empty"])]
    ex = get_executor("local", progress=False, workers=2)
    try:
        results = ex.run_graph(tasks)
    finally:
        ex.close()
    assert seen == [["first"]]
    assert [r["name"] for r in results["chunks"]] == ["chunk0", "chunk1", "chunk2"] and results["empty"] == []
    where = {e: i for i, e in enumerate(_events(log))}
    assert all(where[("end", f"chunk{i}")] < where[("start", "last")] for i in range(3))


def test_an_interrupted_graph_leaves_no_workers(tmp_path):
    """A KeyboardInterrupt (here raised in a job) stops the graph and every worker process."""
    ex = get_executor("local", progress=False, workers=2)
    pids = tmp_path / "pids"
    pids.mkdir()
    tasks = [Task("slow", _interrupt, [{"sleep": 0.5, "pids": str(pids)}] * 3),
             Task("boom", _interrupt, [{"interrupt": True, "pids": str(pids)}])]
    with pytest.raises(KeyboardInterrupt):
        ex.run_graph(tasks)
    assert ex._pool is None
    workers = [int(p.name) for p in pids.iterdir()]
    assert workers and os.getpid() not in workers
    for pid in workers:
        with pytest.raises(ProcessLookupError):  # exited and reaped
            os.kill(pid, 0)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stop_summary_starts_no_further_job(tmp_path, workers):
    """A summary ``stop`` flags (a full disk) ends the graph: what is running finishes, nothing else starts."""
    log = tmp_path / "log"
    tasks = [_task(log, "full", cost=9.0, sleep=0.2), _task(log, "later", deps=["full"]),
             _task(log, "other", cost=0.0), _task(log, "after-other", deps=["other"], sleep=0.5)]
    ex = get_executor("local", progress=False, workers=workers)
    try:
        results = ex.run_graph(tasks, stop=lambda s: s.get("name") == "full")
    finally:
        ex.close()
    started = [name for event, name in _events(log) if event == "start"]
    assert "full" in results and "later" not in results and "later" not in started
    assert set(results) == set(started) - {"after-other"} | ({"after-other"} & set(results))


# --- a study through the graph -----------------------------------------------------------------------

SMALL = {
    "name": "small",
    "data": {"dataset": "digits", "train_size": 200, "val_fraction": 0.1},
    "train": {"epochs": 2, "batch_size": 32},
    # one shared-recipe cell (shared runs, every lens) and one per-norm cell (lira's recipe phase, memorize)
    "grid": {"norms": ["batch", "none"], "seeds": [0], "outliers": [{"label_noise": 0.05}],
             "recipes": ["shared", "per-norm"]},
    "lenses": {"memorize": {}, "gradnorms": {"at": [1, 2]}, "gamma-sigma": {}, "lira": {"shadow_models": 4},
               "rmia": None, "theory": {"steps": 20, "plot": False}},
}
RESULT_SUFFIXES = (".json", ".npy", ".npz", ".pt", ".csv")
NOT_RESULTS = ("DONE", "environment.json")  # when, where and how long, not what was computed


def _result_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in RESULT_SUFFIXES and p.name not in NOT_RESULTS
            and not p.name.startswith(".")}


def test_study_graph_edges():
    """Stage-1 lenses run after their cell's shared runs; lira's phases chain; theory needs nothing."""
    from bnmem.study import Study, build_jobs
    from bnmem.shadow.work import phase_task_id
    from bnmem.study.graph import study_tasks

    _, jobs = build_jobs(Study.model_validate(SMALL))
    tasks = {t.id: t for t in study_tasks(jobs, [j.at(Path("/x")) for j in jobs])}
    cell, per = "digits-lenet-flip0.05", "digits-lenet-flip0.05-pernorm"
    shared = (f"{cell}/_shared/batch", f"{cell}/_shared/none")
    assert tasks["theory"].deps == tasks["theory"].after == ()
    for lens in ("memorize", "gradnorms"):
        assert set(tasks[f"{cell}/{lens}"].after) == set(shared), lens
    assert tasks[f"{cell}/gamma-sigma"].after == (f"{cell}/_shared/batch",)  # BN only
    # a per-norm cell shares no run; it reads its setting's recipe selection (memorize, lira's first phase)
    selection = f"{per}/_recipe"
    assert tasks[f"{per}/memorize"].after == (selection,)
    assert tasks[phase_task_id(f"{per}/lira", "recipe")].after == (selection,)
    assert tasks[selection].deps == tasks[selection].after == () and tasks[selection].cost > 0
    for c in (cell, per):
        recipe, train, query = (phase_task_id(f"{c}/lira", p) for p in ("recipe", "train", "query"))
        assert tasks[train].deps == (recipe,) and tasks[query].deps == (train,)
        assert tasks[f"{c}/lira"].after == (query,)
    # the study's selection job selects: no lira recipe task carries a cost of its own
    assert tasks[phase_task_id(f"{per}/lira", "recipe")].cost == 0
    assert tasks[phase_task_id(f"{cell}/lira", "recipe")].cost == 0


def test_a_study_through_the_graph_equals_stage_by_stage(tmp_path):
    """Worker processes (forked from `bnmem run`'s fork server) run the study's graph, each job as soon as it is
    ready; one worker runs it level by level: the same bytes. A job that
    fails in the graph (theory: a file stands where its folder goes) is reported as stage by stage, the others
    finish, and the rerun runs only it."""
    from bnmem import io
    from bnmem.errors import BnmemError
    from bnmem.study import Study, run_study

    study = Study.model_validate(SMALL)
    stage = run_study(study, tmp_path / "stage", progress=False)
    out = tmp_path / "graph"
    out.mkdir()
    (out / "theory").write_text("in the way")
    from bnmem.study.graph import WORKER_PRELOAD

    # as `bnmem run` makes it: the workers fork from a server that preloaded torch and the job modules
    ex = get_executor("local", progress=False, workers=2, preload=WORKER_PRELOAD)
    try:
        with pytest.raises(BnmemError, match=rf"^1 of {len(stage.jobs)} jobs failed \(first: theory: .*rerun"):
            run_study(study, out, executor=ex, progress=False)
        assert not io.is_done(out)
        assert all(io.is_done(out / rel) for c in io.read_json(out / "index.json")["cells"]
                   for rel in c["lenses"].values())
        (out / "theory").unlink()
        graph = run_study(study, out, executor=ex, progress=False)
    finally:
        ex.close()
    assert sorted(j["id"] for j in graph.jobs) == sorted(j["id"] for j in stage.jobs)
    assert {j["id"] for j in graph.jobs if j["status"] == "done"} == {"theory"}  # the rest was finished
    assert io.is_done(out)
    got, want = _result_files(out), _result_files(tmp_path / "stage")
    assert got.keys() == want.keys() and len(got) > 50
    assert [k for k in got if got[k] != want[k]] == []
