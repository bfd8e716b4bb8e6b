"""`make demo` from a fresh clone, timed in two parts: creating the virtualenv and installing, then the rest.

Clones the repository (its committed HEAD) into a temporary folder and runs the Makefile's own steps there,
so the numbers are what a newcomer's first run costs on this machine. pip and uv get fresh, empty cache
folders (a new machine has none; a warm uv cache installs in seconds). Wall times depend on what else the
machine runs; the load average before and after is printed with them. Run::

    python benchmarks/bench_demo.py [--json demo-bench.json] [--keep DIR]

The last line printed is a JSON summary (also written to --json; benchmarks/docs_numbers.py --demo-bench
reads it into the numbers the README quotes).
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="clone here and keep it (default: a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        clone = args.keep or Path(tmp) / "bnmem"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {**os.environ, "UV_CACHE_DIR": str(Path(tmp) / "uv-cache"), "PIP_CACHE_DIR": str(Path(tmp) / "pip-cache")}
        load_before = os.getloadavg()[0]
        install = timed(["make", ".venv/.installed"], clone, env)  # the demo target's prerequisite
        demo = timed(["make", "demo"], clone, env)  # then the study and its report, as the Makefile runs them
        out = {"install_s": round(install, 1), "study_and_report_s": round(demo, 1),
               "total_s": round(install + demo, 1), "cpus": os.cpu_count(),
               "load_before": round(load_before, 1), "load_after": round(os.getloadavg()[0], 1),
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True,
                                        text=True).stdout.strip()}
    text = json.dumps(out)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
