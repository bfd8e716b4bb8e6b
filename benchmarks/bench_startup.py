"""The fixed costs of the demo's processes, before and after, side by side: ``bnmem run``'s parent, its worker
processes (and their fork server), and ``bnmem report``.

BEFORE is a ref of this repository (default ``main``), checked out with ``git worktree add`` into a scratch
folder; AFTER is this checkout. Each runs, as a subprocess with its own ``src`` on PYTHONPATH (the same venv):

* ``bnmem run`` of a one-cell study sized to be all start-up (digits, 300 examples, 2 epochs, 2 workers);
* ``bnmem report`` of a copy of RUN_DIR (default: that study's output; the demo's is the case that matters:
  ``--report-run /tmp/demoR``). The report's files are compared between BEFORE and AFTER (the run folder's
  path, which they name, replaced).

Every Python process of a command records its CPU seconds (user + sys) and wall seconds when it exits (a
``sitecustomize`` on PYTHONPATH, also through ``os._exit``, which forked workers end with); the table
sums them per role: parent, fork server, workers (multiprocessing's resource tracker is left out: ~0.05 s).
Run it with the venv's python: the commands are that venv's ``bnmem`` console script.
``--cold`` points PYTHONPYCACHEPREFIX at an empty folder per command, so every module is compiled again, as
after a fresh ``uv`` install (no bytecode). Run::

    python benchmarks/bench_startup.py [--before main] [--repeats 2] [--report-run /tmp/demoR] [--cold]

The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STUDY = """name: startup
data: {dataset: digits, seed: 0, val_fraction: 0.1, train_size: 300}
arch: lenet
train: {optimizer: sgd, lr: 0.05, momentum: 0.9, weight_decay: 5.0e-4, epochs: 2, batch_size: 64, threads: 1}
grid: {norms: [batch, none], seeds: [0], replicates: 1, recipes: [shared], outliers: [{label_noise: 0.05}]}
lenses:
  memorize: {clean: false}
  gradnorms: {at: [1, 2], definitions: [eval, batch], batch_subset: 50, clean: false}
  gamma-sigma: {}
  mitigate: {lambdas: [1.0], fixed_epoch: 1, lira_models: 4, clean: false}
  lira: {shadow_models: 4}
"""

# Written into a folder put first on PYTHONPATH: each process writes "cpu wall role" when it ends.
SITECUSTOMIZE = '''
import os, sys, time
_dir = os.environ.get("BENCH_STARTUP_DIR")
if _dir:
    _t0 = time.time()

    def _role():
        mp = sys.modules.get("multiprocessing")
        if mp is not None and mp.current_process().name != "MainProcess":
            return "worker"
        if "multiprocessing.forkserver" in sys.modules and sys.argv[:1] == ["-c"]:
            return "fork_server"
        if "multiprocessing.resource_tracker" in sys.modules and sys.argv[:1] == ["-c"]:
            return "resource_tracker"
        return "parent"

    def _record():
        t = os.times()
        with open(os.path.join(_dir, f"cpu.{os.getpid()}"), "w") as f:
            f.write(f"{t.user + t.system:.3f} {time.time() - _t0:.3f} {_role()}\\n")

    import atexit
    atexit.register(_record)
    _exit = os._exit

    def _exit_recorded(code):
        try:
            _record()
        finally:
            _exit(code)

    os._exit = _exit_recorded
'''


def run_traced(cmd: list[str], src: Path, site: Path, env_extra: dict[str, str]) -> dict[str, float]:
    """Run ``cmd`` with ``src`` first on the path; wall seconds and CPU seconds per role."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-trace-") as trace:
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{src}", "BENCH_STARTUP_DIR": trace,
               "OMP_NUM_THREADS": "1", **env_extra}
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        time.sleep(1.0)  # a fork server ends once its parent has: let it write its record
        out: dict[str, float] = {"wall_s": wall}
        for rec in Path(trace).glob("cpu.*"):
            cpu, _, r = rec.read_text().split()
            if r != "resource_tracker":  # ~0.05 s
                out[f"{r} cpu_s"] = out.get(f"{r} cpu_s", 0.0) + float(cpu)
                out[f"{r} processes"] = out.get(f"{r} processes", 0) + 1
        return out


def measure(label: str, src: Path, site: Path, args: argparse.Namespace, scratch: Path, i: int) -> dict:
    """One ``bnmem run`` and one ``bnmem report`` with ``src``: their traced seconds."""
    bnmem = str(Path(sys.executable).with_name("bnmem"))  # the console script `make demo` runs
    cold = {"PYTHONPYCACHEPREFIX": str(scratch / f"pyc-{label}-{i}")} if args.cold else {}
    out = scratch / f"run-{label}-{i}"
    run = run_traced([bnmem, "run", str(scratch / "startup.yaml"), "--out", str(out), "--workers", "2", "--quiet"],
                     src, site, cold)
    rep = scratch / f"report-{label}"
    shutil.rmtree(rep, ignore_errors=True)
    shutil.copytree(args.report_run or out, rep, ignore=shutil.ignore_patterns("*.pt"))
    for name in ("report.html", "summary.md", "summary.csv"):
        (rep / name).unlink(missing_ok=True)
    return {"run": run, "report": run_traced([bnmem, "report", str(rep)], src, site, cold), "report_dir": rep}


@contextlib.contextmanager
def before_and_after(ref: str, study_file: str, study: str) -> Iterator[tuple[Path, Path, Path]]:
    """A scratch folder with ``study`` written to ``study_file``, the tracing ``sitecustomize`` in ``site/``
    and ``ref`` checked out as BEFORE (``git worktree add``; removed on exit), both ``src`` folders compiled
    first (so timing starts warm): yields (scratch, site, BEFORE's src)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{Path(study_file).stem}-") as tmp:
        scratch = Path(tmp)
        (scratch / study_file).write_text(study)
        site = scratch / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        before = scratch / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), ref],
                       check=True, capture_output=True)
        try:
            for src in (before / "src", ROOT / "src"):  # both warm: bnmem's own bytecode compiled before timing
                subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True)
            yield scratch, site, before / "src"
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False)


def interleaved(repeats: int, before_src: Path, measure: Callable[[str, Path, int], dict]) -> dict[str, list[dict]]:
    """``measure(label, src, i)`` for BEFORE then AFTER, ``repeats`` times: a busy minute falls on both."""
    samples: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(repeats):
        samples["before"].append(measure("before", before_src, i))
        samples["after"].append(measure("after", ROOT / "src", i))
    return samples


def print_side_by_side(result: dict, commands: tuple[str, ...], width: int) -> None:
    """BEFORE and AFTER side by side (``result[side][command]``: seconds by key), per command and role, with
    each command's CPU seconds summed over its processes."""
    print(f"{'':{width}} {'before':>8} {'after':>8}")
    for cmd in commands:
        b, a = result["before"][cmd], result["after"][cmd]
        for key in sorted(set(b) | set(a)):
            print(f"{cmd + ': ' + key:{width}} {b.get(key, 0):8.2f} {a.get(key, 0):8.2f}")
        cpu = [sum(v for k, v in side.items() if k.endswith("cpu_s")) for side in (b, a)]
        print(f"{cmd + ': all processes cpu_s':{width}} {cpu[0]:8.2f} {cpu[1]:8.2f}")


def _median(samples: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for s in samples for k in s})
    return {k: round(statistics.median(s.get(k, 0.0) for s in samples), 2) for k in keys}


def same_report(a: Path, b: Path) -> dict[str, bool]:
    """Whether the report's files are byte-identical once each names the same run folder."""
    out = {}
    for name in ("report.html", "summary.md", "summary.csv"):
        x = (a / name).read_bytes().replace(str(a).encode(), b"RUN")
        y = (b / name).read_bytes().replace(str(b).encode(), b"RUN")
        out[name] = x == y
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="main", help="git ref measured as BEFORE (default: main)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--report-run", type=Path, default=None, help="run directory whose report is rebuilt "
                    "(copied; default: the benchmark study's output)")
    ap.add_argument("--cold", action="store_true", help="no bytecode: every module compiled again per command")
    args = ap.parse_args()
    with before_and_after(args.before, "startup.yaml", STUDY) as (scratch, site, before_src):
        samples = interleaved(args.repeats, before_src,
                              lambda label, src, i: measure(label, src, site, args, scratch, i))
        result: dict = {k: {"run": _median([x["run"] for x in v]), "report": _median([x["report"] for x in v]),
                            "report_dir": str(v[-1]["report_dir"])} for k, v in samples.items()}
        result["report_identical"] = same_report(Path(result["before"]["report_dir"]),
                                                 Path(result["after"]["report_dir"]))
    print_table(result)
    print(json.dumps({**result, "before_ref": args.before, "cold": args.cold, "repeats": args.repeats}))


def print_table(result: dict) -> None:
    """BEFORE and AFTER side by side, per command and role."""
    print_side_by_side(result, ("run", "report"), 34)
    print("report files identical:", result["report_identical"])


if __name__ == "__main__":
    main()
