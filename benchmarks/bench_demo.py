"""`make demo` from a fresh clone, timed in two parts: creating the virtualenv and installing, then the rest.

Clones the repository (its committed HEAD) into a temporary folder and runs the Makefile's own steps there,
so the numbers are what a newcomer's first run costs on this machine. pip and uv get fresh, empty cache
folders (a new machine has none; a warm uv cache installs in seconds). Wall times depend on what else the
machine runs; the load average before and after is printed with them. Run::

    python benchmarks/bench_demo.py [--json demo-bench.json] [--keep DIR] [--rounds N]

The last line printed is a JSON summary (also written to --json; benchmarks/docs_numbers.py --demo-bench
reads it into the numbers the README quotes). With ``--rounds N`` it times N fresh clones one after
another and the summary is the slowest of them (each round is listed under ``rounds``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """Run ``cmd`` in ``cwd`` (output passed through); its wall seconds. Fails loudly if it fails."""
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, env=env)
    return time.perf_counter() - t0


def one_round(clone: Path, tmp: Path) -> dict:
    """Clone, install and run the demo once in ``clone`` with fresh caches under ``tmp``; its timings."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {**os.environ, "UV_CACHE_DIR": str(tmp / "uv-cache"), "PIP_CACHE_DIR": str(tmp / "pip-cache")}
    load_before = os.getloadavg()[0]
    install = timed(["make", ".venv/.installed"], clone, env)  # the demo target's prerequisite
    demo = timed(["make", "demo"], clone, env)  # then the study and its report, as the Makefile runs them
    return {"install_s": round(install, 1), "study_and_report_s": round(demo, 1),
            "total_s": round(install + demo, 1), "load_before": round(load_before, 1),
            "load_after": round(os.getloadavg()[0], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None,
                    help="clone here and keep it (default: a temporary folder; with --rounds, the last round's)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="fresh clones timed one after another; the summary is the slowest (default 1)")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    rounds = []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
            last = i == args.rounds - 1
            clone = args.keep if (args.keep and last) else Path(tmp) / "bnmem"
            rounds.append(one_round(clone, Path(tmp)))
            print(json.dumps({"round": i + 1, **rounds[-1]}), flush=True)
    # The slowest round is the figure to quote: a newcomer's machine is not always quiet.
    out = {**max(rounds, key=lambda r: r["total_s"]), "cpus": os.cpu_count(), "rounds": rounds,
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip()}
    text = json.dumps(out)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
