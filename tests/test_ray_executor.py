"""The Ray executor against the local one: same bits, worker deaths retried, driver deaths resumed.

One local Ray instance serves the whole module (starting Ray costs seconds).
Jobs come from :mod:`bnmem.executors._selftest` and :mod:`bnmem.experiments`,
both importable by Ray workers because bnmem is installed in the venv they run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bnmem.errors import BnmemError
from bnmem.executors import get_executor
from bnmem.executors._selftest import PARTIAL_FILE, PID_FILE, job_dir, run_selftest, selftest_job

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    """Environment of the subprocess drivers: quiet Ray, one torch thread by default."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def ray_cluster():
    """One local two-CPU Ray instance for the module; yields its GCS address."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():  # another module's session: start from a known state
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="warning", _node_ip_address="127.0.0.1")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture()
def rex(ray_cluster):
    """A RayExecutor on the module's instance (it reuses the open session; close() leaves it up)."""
    ex = get_executor("ray", progress=False)
    yield ex
    ex.close()


# ----------------------------------------------------------------- availability


def test_ray_stays_optional():
    """``import bnmem`` and the local executor never import ray; asking for ray without it is one clear error."""
    code = (
        "import sys; sys.modules['ray'] = None\n"  # makes `import ray` fail like a missing package
        "import bnmem, bnmem.executors, bnmem.executors.local\n"
        "from bnmem.executors import get_executor\n"
        "get_executor('local').map(len, [])\n"
        "assert 'ray' not in [m for m in sys.modules if sys.modules[m] is not None and m.split('.')[0] == 'ray']\n"
        "try:\n"
        "    get_executor('ray')\n"
        "except bnmem.BnmemError as e:\n"
        "    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ERR ray is not installed; pip install 'bnmem[ray]'" in out.stdout


# ----------------------------------------------------------------- determinism


@pytest.mark.ray
def test_selftest_identical_under_local_and_ray(rex, tmp_path):
    """Same specs, same bits; the job's own thread count wins over Ray's OMP_NUM_THREADS=1."""
    # Two threads: a count Ray would not pick for a 1-CPU task, and one that changes the float bits.
    loc = run_selftest(tmp_path / "local", get_executor("local", progress=False), n_jobs=4, threads=2)
    ray_ = run_selftest(tmp_path / "ray", rex, n_jobs=4, threads=2)
    assert loc["checksum"] == ray_["checksum"]
    for f in ("logits.npy", "keep.npy"):
        assert (tmp_path / "local" / f).read_bytes() == (tmp_path / "ray" / f).read_bytes(), f
    assert json.loads((tmp_path / "local" / "metrics.json").read_text()) == json.loads(
        (tmp_path / "ray" / "metrics.json").read_text())
    # The check has teeth: one thread gives other bits on this job.
    one = selftest_job({"out": str(tmp_path / "one"), "index": 0, "seed": 0, "threads": 1,
                        "keep": np.load(tmp_path / "local" / "keep.npy")[0].astype(int).tolist()})
    two = json.loads((job_dir(tmp_path / "local", 0) / "DONE").read_text())
    assert one["checksum"] != two["checksum"] or os.cpu_count() == 1
    # Inside the Ray worker, torch ran with the job's count although Ray set OMP_NUM_THREADS.
    seen = rex.map(selftest_job, [{"out": str(tmp_path / "probe"), "index": 0, "seed": 0, "threads": 2}])[0]
    assert seen["torch_threads"] == 2 and seen["pid"] != os.getpid()


@pytest.mark.ray
def test_results_come_back_in_spec_order(rex, tmp_path):
    """Later specs finish first (fewer steps), yet summaries follow the specs."""
    specs = [{"out": str(tmp_path), "index": i, "seed": i, "steps": s, "width": 64}
             for i, s in enumerate([200, 1, 100, 1])]
    res = rex.map(selftest_job, specs, desc="order")
    assert [r["index"] for r in res] == [0, 1, 2, 3]
    local = get_executor("local", progress=False).map(selftest_job, specs)  # all DONE now: read back
    assert [r["checksum"] for r in res] == [r["checksum"] for r in local]


@pytest.mark.ray
def test_shadow_chunks_identical_under_local_and_ray(rex, tmp_path):
    """Digits LiRA shadow models (4 models, chunks of 2, 2 epochs): bitwise-equal weights under both executors."""
    torch = pytest.importorskip("torch")
    shadow = pytest.importorskip("bnmem.experiments.shadow")
    from bnmem.experiments.lira_config import LiraConfig

    cfg = LiraConfig.model_validate({
        "data": {"dataset": "digits", "train_size": 200, "label_noise": 0.05},
        "arch": "lenet", "norms": ["batch"], "shadow_models": 4, "chunk_size": 2,
        "train": {"epochs": 2, "threads": 1},
    })
    runs = {}
    for name, ex in (("local", get_executor("local", progress=False)), ("ray", rex)):
        summaries = shadow.train_shadow_models(cfg, "batch", tmp_path / name, ex)
        assert [s["models"] for s in summaries] == [[0, 1], [2, 3]]
        runs[name] = [shadow.load_shadow_state(cfg, tmp_path / name, m) for m in range(4)]
    for a, b in zip(runs["local"], runs["ray"]):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k


# ----------------------------------------------------------------- failures


@pytest.mark.ray
def test_failing_job_is_one_clear_error(rex, tmp_path):
    specs = [{"out": str(tmp_path), "index": i, "seed": i, "steps": 1} for i in range(3)]
    specs[1]["raise"] = "boom in job one"
    with pytest.raises(BnmemError) as info:
        rex.map(selftest_job, specs, desc="failing")
    msg = str(info.value)
    assert "job 2/3 of 'failing'" in msg and "ValueError: boom in job one" in msg and "\n" not in msg
    assert info.value.index == 1 and "boom in job one" in info.value.remote_traceback


@pytest.mark.ray
def test_unsatisfiable_resources_fail_fast(rex, tmp_path):
    """A GPU request on a CPU-only cluster would wait forever in Ray; we refuse at once."""
    t0 = time.perf_counter()
    with pytest.raises(BnmemError, match="lacks GPU"):
        rex.map(selftest_job, [{"out": str(tmp_path), "index": 0, "seed": 0}], resources={"num_gpus": 0.25})
    with pytest.raises(BnmemError, match="fraction below 1"):
        rex.map(selftest_job, [{"out": str(tmp_path), "index": 0, "seed": 0}], resources={"num_gpus": 1.5})
    assert time.perf_counter() - t0 < 10


def _kill_when_pid_file_appears(path: Path, killed: list[int], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            text = path.read_text().strip()
            if text:
                pid = int(text)
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
        time.sleep(0.02)


@pytest.mark.ray
def test_worker_killed_mid_job_is_retried(rex, tmp_path):
    """SIGKILL the worker in the middle of job 1: Ray retries it and nothing is lost."""
    out = tmp_path / "ray"
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_pid_file_appears, args=(job_dir(out, 1) / PID_FILE, killed))
    killer.start()
    specs = [{"out": str(out), "index": i, "seed": i, "hold_first_attempt": 3.0 if i == 1 else 0.0}
             for i in range(3)]
    res = rex.map(selftest_job, specs, desc="kill a worker")
    killer.join()
    assert len(killed) == 1, "the job never reached its kill window"
    assert res[1]["pid"] != killed[0] and not res[1]["skipped"]
    assert not (job_dir(out, 1) / PARTIAL_FILE).exists()
    clean = get_executor("local", progress=False).map(
        selftest_job, [{**s, "out": str(tmp_path / "local"), "hold_first_attempt": 0.0} for s in specs])
    assert [r["checksum"] for r in res] == [r["checksum"] for r in clean]


@pytest.mark.ray
def test_worker_deaths_beyond_max_retries_fail_clearly(ray_cluster, tmp_path):
    """With max_retries=0 the same kill is a JobFailedError naming the job, not a hang."""
    out = tmp_path / "ray"
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_pid_file_appears, args=(job_dir(out, 0) / PID_FILE, killed))
    killer.start()
    ex = get_executor("ray", progress=False, max_retries=0)
    with pytest.raises(BnmemError, match=r"job 1/1 of 'no retries'.*worker died"):
        ex.map(selftest_job, [{"out": str(out), "index": 0, "seed": 0, "hold_first_attempt": 3.0}], desc="no retries")
    killer.join()
    assert killed


# ----------------------------------------------------------------- driver killed, then resumed


def _wait_for(pred, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"driver exited early ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.mark.ray
@pytest.mark.parametrize("resume_with", ["local", "ray"])
def test_killed_driver_resumes(ray_cluster, rex, tmp_path, resume_with):
    """A Ray driver SIGKILLed after its first DONE: the rerun runs only what is missing, same bits."""
    out = tmp_path / "killed"
    n = 6
    # --hold keeps each job's first attempt busy long enough for the kill to land mid-run.
    cmd = [sys.executable, "-m", "bnmem.executors._selftest", "--out", str(out), "--jobs", str(n),
           "--executor", "ray", "--ray-address", ray_cluster, "--hold", "1.5"]
    proc = subprocess.Popen(cmd, env=_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: any(job_dir(out, i).joinpath("DONE").exists() for i in range(n)), 120, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Ray kills a dead driver's tasks; wait until no job is left mid-flight, so the
    # finished set (and its mtimes) cannot change under the rerun.
    time.sleep(1.0)
    done = [i for i in range(n) if job_dir(out, i).joinpath("DONE").exists()]
    assert 0 < len(done) < n, done
    mtimes = {i: job_dir(out, i).joinpath("logits.npy").stat().st_mtime_ns for i in done}

    ex = rex if resume_with == "ray" else get_executor("local", progress=False)
    res = run_selftest(out, ex, n_jobs=n)
    assert res["ran"] == [i for i in range(n) if i not in done]
    for i in done:
        assert job_dir(out, i).joinpath("logits.npy").stat().st_mtime_ns == mtimes[i], i
    clean = run_selftest(tmp_path / "clean", get_executor("local", progress=False), n_jobs=n)
    assert res["checksum"] == clean["checksum"]
    assert (out / "logits.npy").read_bytes() == (tmp_path / "clean" / "logits.npy").read_bytes()
    # The cluster the killed driver had connected to still serves jobs.
    assert rex.map(selftest_job, [{"out": str(tmp_path / "alive"), "index": 0, "seed": 0, "steps": 1}])
