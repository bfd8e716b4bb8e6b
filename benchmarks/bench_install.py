"""What `make`'s install costs with pip and with uv (tools/venv_install.py), side by side in one run.

Modes, alternating ``--rounds`` times, each in a fresh venv with fresh, empty pip and uv caches (PIP_CACHE_DIR,
UV_CACHE_DIR), so that no mode finds another's downloads or unpacked wheels:

- ``pip``: the install before tools/venv_install.py: ``pip install --upgrade pip``, then
  ``pip install -q --no-compile -e .`` of this checkout;
- ``uv``: `make`'s install now: ``tools/venv_install.py --installer uv -e .`` (installs uv with the venv's pip,
  then ``uv pip install`` with pip's configuration translated);
- ``pip-compile``: pip with its byte-compilation (``--modes pip-compile,pip`` repeats the measurement that made
  `make` pass --no-compile).

Each run times creating the venv, the pip upgrade (pip modes), the install and then the first
``import torch, bnmem.lenses.memorize`` (where an install without byte-compilation pays for compiling what it
imports, once). Prints one line per run with /proc/loadavg before and after it, the ratios against ``uv``, and a JSON
summary as the last line (also written to ``--json FILE``). Run::

    python benchmarks/bench_install.py [--rounds 2] [--modes pip,uv] [--json install-bench.json]

Each venv holds about 5.6 GB; it and its caches are deleted after its run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("pip-compile", "pip", "uv")
FIRST_IMPORT = "import torch, bnmem.lenses.memorize"


def load() -> str:
    """The 1-, 5- and 15-minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds ``cmd`` took; its output is dropped, a failure raises."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
    return time.perf_counter() - t0


def one(mode: str, where: Path) -> dict[str, float]:
    """A fresh venv and caches under ``where``, installed in ``mode``; seconds per step."""
    env = {**os.environ, "PIP_CACHE_DIR": str(where / "pip-cache"), "UV_CACHE_DIR": str(where / "uv-cache")}
    venv = where / "venv"
    py = str(venv / "bin" / "python")
    res = {"venv_s": timed([sys.executable, "-m", "venv", str(venv)], env), "pip_upgrade_s": 0.0}
    if mode == "uv":
        res["install_s"] = timed([py, str(ROOT / "tools" / "venv_install.py"), "--installer", "uv", "-e", "."], env)
    else:
        res["pip_upgrade_s"] = timed([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], env)
        flags = ["--no-compile"] if mode == "pip" else []
        res["install_s"] = timed([py, "-m", "pip", "install", "-q", *flags, "-e", "."], env)
    res["first_import_s"] = timed([py, "-c", FIRST_IMPORT], env)
    res["total_s"] = sum(res.values())
    return res


def summarize(runs: dict[str, list[dict[str, float]]]) -> dict:
    """Medians per mode and each mode's ratio to uv's (install steps, and install plus first import)."""
    med = {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in runs.items() if v}
    setup = {m: r["venv_s"] + r["pip_upgrade_s"] + r["install_s"] for m, r in med.items()}
    out: dict = {"median": med, "setup_s": setup}
    if "uv" in med:
        out["setup_ratio_to_uv"] = {m: setup[m] / setup["uv"] for m in med if m != "uv"}
        out["total_ratio_to_uv"] = {m: med[m]["total_s"] / med["uv"]["total_s"] for m in med if m != "uv"}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="pip,uv", help=f"comma-separated, from {', '.join(MODES)}")
    ap.add_argument("--json", type=Path, help="also write the JSON summary here")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES) or args.rounds < 1:
        sys.exit(f"--modes takes {', '.join(MODES)} and --rounds at least 1")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    loads = []
    for r in range(args.rounds):
        for mode in modes:
            where = Path(tempfile.mkdtemp(prefix=f"bnmem-install-{mode}-"))
            before = load()
            try:
                res = one(mode, where)
            finally:
                shutil.rmtree(where, ignore_errors=True)
            runs[mode].append(res)
            loads.append({"mode": mode, "round": r, "before": before, "after": load()})
            print(f"round {r} {mode}: load {before} -> {loads[-1]['after']};", {k: round(v, 1) for k, v in res.items()},
                  flush=True)
    summary = {**summarize(runs), "runs": runs, "loadavg": loads,
               "nproc": os.cpu_count(), "rounds": args.rounds}
    for name in ("setup_ratio_to_uv", "total_ratio_to_uv"):
        print(name, {m: round(v, 2) for m, v in summary.get(name, {}).items()})
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
