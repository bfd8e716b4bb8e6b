"""The Ray executor against the local one: same bits, worker deaths retried, driver deaths resumed.

One local Ray instance serves the whole module (starting Ray costs seconds).
Jobs come from :mod:`bnmem.executors._selftest` and :mod:`bnmem.lenses`,
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
from waiting import HANG_GUARD_S, guarded, wait_until

from bnmem.errors import BnmemError
from bnmem.executors import get_executor
from bnmem.executors._selftest import PARTIAL_FILE, PID_FILE, job_dir, run_selftest, selftest_job

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    """Environment of the subprocess drivers: no Ray usage stats, unbuffered output."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def ray_cluster():
    """One local two-CPU Ray instance for the module; yields its GCS address."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():  # another module's session: start from a known state
        ray.shutdown()

    def started() -> bool:
        # Ray gives its raylet a fixed 30 s to register (ray._private.node); on a loaded machine that
        # can pass. Not ours to change: start again until it comes up (the hang guard bounds the retries).
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                     logging_level="warning", _node_ip_address="127.0.0.1")
            return True
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception for this
            if "timed out during startup" not in str(e):
                raise
            ray.shutdown()
            return False

    wait_until(started, "a local Ray instance started", poll_s=1.0)
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
    """``import bnmem``, the CLI and the local executor never import ray; asking for ray without it is one clear error."""
    code = (
        "import sys\n"
        "import bnmem, bnmem.cli, bnmem.executors.local\n"
        "from bnmem.executors import get_executor\n"
        "get_executor('local').map(len, [[1], [2]])\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'ray'], 'ray was imported'\n"
        "sys.modules['ray'] = None  # from here on `import ray` fails as if it were not installed\n"
        "try:\n"
        "    get_executor('ray')\n"
        "except bnmem.BnmemError as e:\n"
        "    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    assert "ERR ray is not installed; pip install 'bnmem[ray]'" in out.stdout


@pytest.mark.ray
def test_unreachable_address_is_one_clear_error_at_once():
    """ray.init alone would retry an address nobody listens on for minutes."""
    pytest.importorskip("ray")
    # Not a timing check: "at once" means before ray.init, whose retries are what would take minutes.
    code = (
        "import ray\n"
        "from bnmem.executors import get_executor\n"
        "def no_init(*args, **kwargs):\n"
        "    raise AssertionError('ray.init was called')\n"
        "ray.init = no_init\n"
        "try:\n"
        "    get_executor('ray', address='127.0.0.1:1').start()\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    # A fresh interpreter: in this one the module's Ray session may be open, and an open session is reused.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=HANG_GUARD_S)
    line = out.stdout.strip()
    assert line.startswith("BnmemError "), (out.stdout, out.stderr[-2000:])
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in line and "ray start --head" in line


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


def _lira_config():
    from bnmem.lenses.lira import LiraConfig

    return LiraConfig.model_validate({
        "data": {"dataset": "digits", "train_size": 200, "label_noise": 0.05},
        "arch": "lenet", "norms": ["batch", "none"], "shadow_models": 4, "chunk_size": 2,
        "train": {"epochs": 2, "threads": 1},
    })


@pytest.mark.ray
def test_a_job_graph_runs_on_ray_level_by_level(rex, tmp_path):
    """A study's graph on Ray (the executors' default run_graph: its jobs are ``partial(guarded, job)``, not
    functions): b's jobs are listed only once a has finished, and each job's bits are the local ones."""
    from bnmem.executors.graph import Task

    first = {"out": str(tmp_path / "ray"), "index": 0, "seed": 0, "steps": 2}
    listed = []

    def after_a():
        listed.append(job_dir(tmp_path / "ray", 0).joinpath("DONE").exists())
        return [{**first, "index": 1, "seed": 1}]

    res = rex.run_graph([Task("a", selftest_job, [first]), Task("b", selftest_job, after_a, deps=("a",))])
    assert listed == [True] and [res["a"][0]["index"], res["b"][0]["index"]] == [0, 1]
    local = get_executor("local", progress=False).map(
        selftest_job, [{**first, "out": str(tmp_path / "local")}, {**first, "out": str(tmp_path / "local"),
                                                                    "index": 1, "seed": 1}])
    assert [r["checksum"] for r in local] == [res["a"][0]["checksum"], res["b"][0]["checksum"]]


@pytest.mark.ray
def test_lira_identical_under_local_and_ray_despite_a_killed_worker(ray_cluster, rex, tmp_path):
    """Digits LiRA (200 examples, 4 shadow models in chunks of 2, 2 epochs, two norms): the Ray run,
    with one shadow-chunk worker SIGKILLed mid-training, gives the local run's bits."""
    from bnmem.lenses.lira import run_lira

    cfg = _lira_config()
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_first_task_worker, args=(ray_cluster, "train_shadow_chunk", killed, stop))
    killer.start()
    try:
        ray_metrics = run_lira(cfg, tmp_path / "ray", rex, progress=False)
    finally:
        stop.set()
        killer.join()
    assert killed, "no shadow-chunk worker was caught running"
    local_metrics = run_lira(cfg, tmp_path / "local", get_executor("local", progress=False), progress=False)
    assert json.dumps(ray_metrics, sort_keys=True) == json.dumps(local_metrics, sort_keys=True)
    assert (tmp_path / "ray" / "metrics.json").read_bytes() == (tmp_path / "local" / "metrics.json").read_bytes()
    for norm in cfg.norms:
        for f in ("phi.npy", "population_phi.npy", "keep.npy", "labels.npy", "is_noisy.npy"):
            assert (tmp_path / "ray" / norm / f).read_bytes() == (tmp_path / "local" / norm / f).read_bytes(), (norm, f)


@pytest.mark.ray
def test_lira_command_takes_the_ray_executor(ray_cluster, tmp_path, capsys):
    """``bnmem lira --executor ray --ray-address ...`` gives the bits of ``--executor local``."""
    from bnmem.cli import main

    args = ["lira", "--dataset", "digits", "--train-size", "120", "--norms", "batch", "--shadow-models", "4",
            "--chunk-size", "2", "--epochs", "1", "--views", "identity", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "ray"), "--executor", "ray", "--ray-address", ray_cluster]) == 0
    assert main([*args, "--out", str(tmp_path / "local")]) == 0
    for f in ("phi.npy", "keep.npy"):
        assert (tmp_path / "ray" / "batch" / f).read_bytes() == (tmp_path / "local" / "batch" / f).read_bytes()
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "x"), "--ray-address", ray_cluster]) == 2
    assert "--ray-address and --gpus-per-job need --executor ray" in capsys.readouterr().err


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
    """A GPU request on a CPU-only cluster would wait forever in Ray; we refuse (an error, not a wait:
    the hang guard ends the test if it waits)."""
    spec = {"out": str(tmp_path), "index": 0, "seed": 0}
    with pytest.raises(BnmemError, match="lacks GPU"):
        guarded(lambda: rex.map(selftest_job, [spec], resources={"num_gpus": 0.25}), "the GPU request's refusal")
    with pytest.raises(BnmemError, match="fraction below 1"):
        guarded(lambda: rex.map(selftest_job, [spec], resources={"num_gpus": 1.5}), "the GPU request's refusal")


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process we can read (Linux /proc)."""
    table = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            ppid = int(next(ln for ln in (d / "status").read_text().splitlines() if ln.startswith("PPid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        table[int(d.name)] = (ppid, cmd)
    return table


def _task_workers(gcs_address: str, title_part: str) -> list[int]:
    """PIDs of this cluster's workers whose process title (``ray::<task name>``) contains ``title_part``.

    Only children of the raylet of *our* cluster count: other Ray clusters on the
    machine are never touched.
    """
    table = _proc_table()
    raylets = {pid for pid, (_, cmd) in table.items() if cmd.split(" ")[0].endswith("raylet") and gcs_address in cmd}
    return [pid for pid, (ppid, cmd) in table.items()
            if ppid in raylets and cmd.startswith("ray::") and title_part in cmd]


def _kill_first_task_worker(gcs_address: str, title_part: str, killed: list[int], stop: threading.Event) -> None:
    while not stop.is_set():
        pids = _task_workers(gcs_address, title_part)
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
            return
        time.sleep(0.01)


def _kill_when_pid_file_appears(path: Path, killed: list[int]) -> None:
    """SIGKILL the worker named in ``path`` once the file appears (the job holds until then)."""
    wait_until(lambda: path.exists() and bool(path.read_text().strip()), f"{path} was written")
    pid = int(path.read_text().strip())
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


@pytest.mark.ray
def test_worker_killed_mid_job_is_retried(rex, tmp_path):
    """SIGKILL the worker in the middle of job 1: Ray retries it and nothing is lost."""
    out = tmp_path / "ray"
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_pid_file_appears, args=(job_dir(out, 1) / PID_FILE, killed))
    killer.start()
    # Job 1's first attempt holds until the kill (the hang guard bounds it), so the kill lands on a busy machine too.
    specs = [{"out": str(out), "index": i, "seed": i, "hold_first_attempt": HANG_GUARD_S if i == 1 else 0.0}
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
        ex.map(selftest_job, [{"out": str(out), "index": 0, "seed": 0, "hold_first_attempt": HANG_GUARD_S}],
               desc="no retries")
    killer.join()
    assert killed


# ----------------------------------------------------------------- driver killed, then resumed


def _kill_after(cmd: list[str], first_done) -> None:
    """Start ``cmd`` and SIGKILL it as soon as ``first_done()`` is true (however long a busy machine takes)."""
    proc = subprocess.Popen(cmd, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(first_done, "the driver's first finished job", proc=proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.ray
def test_killed_ray_driver_resumes_on_ray(ray_cluster, rex, tmp_path):
    """A Ray driver SIGKILLed after its first DONE; a new Ray driver finishes only what is missing."""
    out, n = tmp_path / "killed", 6
    # --hold keeps each job's first attempt busy long enough for the kill to land mid-run.
    _kill_after([sys.executable, "-m", "bnmem.executors._selftest", "--out", str(out), "--jobs", str(n),
                 "--executor", "ray", "--ray-address", ray_cluster, "--hold", "1.5"],
                lambda: any(job_dir(out, i).joinpath("DONE").exists() for i in range(n)))
    done = [i for i in range(n) if job_dir(out, i).joinpath("DONE").exists()]
    mtimes = {i: job_dir(out, i).joinpath("logits.npy").stat().st_mtime_ns for i in done}
    assert 0 < len(done) < n, done

    res = run_selftest(out, rex, n_jobs=n)
    # A task of the dead driver may still finish on its own (Ray reaps it
    # asynchronously); then it is not rerun either. Nothing finished is redone.
    assert res["ran"] and set(res["ran"]) <= set(range(n)) - set(done)
    for i in done:
        assert job_dir(out, i).joinpath("logits.npy").stat().st_mtime_ns == mtimes[i], i
    clean = run_selftest(tmp_path / "clean", get_executor("local", progress=False), n_jobs=n)
    assert res["checksum"] == clean["checksum"]
    assert (out / "logits.npy").read_bytes() == (tmp_path / "clean" / "logits.npy").read_bytes()
    # The cluster the killed driver had connected to still serves jobs (connect != own).
    assert rex.map(selftest_job, [{"out": str(tmp_path / "alive"), "index": 0, "seed": 0, "steps": 1}])


STUDY = """\
name: raykill
data: {dataset: digits, train_size: 200}
train: {epochs: 2, batch_size: 32, threads: 1}
grid: {norms: [batch, none], seeds: [0], outliers: [{label_noise: 0.05}]}
lenses:
  memorize: {}
  lira: {shadow_models: 4, chunk_size: 2}
"""


@pytest.mark.ray
def test_killed_study_driver_resumes_locally(ray_cluster, tmp_path):
    """``bnmem run --executor ray`` SIGKILLed after the first shadow chunk's DONE; resuming with the
    local executor redoes nothing finished and ends with the bits of an uninterrupted run."""
    from bnmem.study import load_study, run_study

    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    out = tmp_path / "killed"
    chunks = lambda: sorted(out.glob("*/lira/*/shadow/*/DONE"))  # noqa: E731
    _kill_after([sys.executable, "-m", "bnmem.cli", "run", str(study), "--out", str(out), "--quiet",
                 "--executor", "ray", "--ray-address", ray_cluster], lambda: bool(chunks()))
    assert not (out / "DONE").exists()
    finished = [d.parent for d in chunks()]
    assert 0 < len(finished) < 4
    # Everything a finished chunk wrote, with its mtime: none of it may be redone.
    before = {p: p.stat().st_mtime_ns for d in finished for p in d.iterdir()}

    run_study(load_study(study), out, executor=get_executor("local", progress=False), progress=False)
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert (out / "DONE").exists()

    clean = tmp_path / "clean"
    run_study(load_study(study), clean, executor=get_executor("local", progress=False), progress=False)
    results = sorted(p.relative_to(clean) for p in clean.rglob("*")
                     if p.suffix in (".npy", ".pt") or p.name == "metrics.json")
    assert any(p.name == "phi.npy" for p in results) and any(p.suffix == ".pt" for p in results)
    for rel in results:
        assert (out / rel).read_bytes() == (clean / rel).read_bytes(), rel


@pytest.mark.ray
def test_ray_started_by_the_executor_is_shut_down_by_close(ray_cluster, tmp_path):
    """address=None starts a private Ray (not the one already running here) and close() stops it."""
    code = (
        "import json, ray\n"
        "from bnmem.executors import get_executor\n"
        "from bnmem.executors._selftest import selftest_job\n"
        "ex = get_executor('ray', progress=False)\n"
        f"res = ex.map(selftest_job, [{{'out': {str(tmp_path)!r}, 'index': 0, 'seed': 0, 'steps': 2}}])\n"
        "addr = ray.get_runtime_context().gcs_address\n"
        "ex.close()\n"
        "print(json.dumps({'addr': addr, 'up': ray.is_initialized(), 'checksum': res[0]['checksum']}))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], env=_env(), cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert run.returncode == 0, run.stderr[-3000:]
    info = json.loads(run.stdout.strip().splitlines()[-1])
    assert info["addr"] != ray_cluster and not info["up"]
    assert not [cmd for _, cmd in _proc_table().values() if info["addr"] in cmd]
    spec = {"out": str(tmp_path / "local"), "index": 0, "seed": 0, "steps": 2}
    assert info["checksum"] == selftest_job(spec)["checksum"]
