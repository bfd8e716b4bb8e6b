"""What `make`'s install costs with and without pip's byte-compilation, side by side in one run.

For each mode (pip's default, then ``--no-compile``, alternating ``--rounds`` times) a fresh venv gets
``pip install -e .`` of this checkout, then the first ``bnmem --version`` and the first ``import torch`` (where a
--no-compile install pays for compiling what it imports, once) are timed. Prints one line per run and the
ratios; the last line is a JSON summary. Run::

    python benchmarks/bench_install.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def one(mode: str, where: Path) -> dict[str, float]:
    """A fresh venv in ``where``, installed in ``mode`` ('compile' or 'no-compile'); seconds per step."""
    flags = ["--no-compile"] if mode == "no-compile" else []
    py = where / "bin" / "python"
    install = timed([sys.executable, "-m", "venv", str(where)])
    install += timed([str(py), "-m", "pip", "install", "-q", *flags, "-e", str(ROOT)])
    return {"install_s": install, "first_version_s": timed([str(where / "bin" / "bnmem"), "--version"]),
            "first_import_torch_s": timed([str(py), "-c", "import torch, bnmem.lenses.memorize"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"compile": [], "no-compile": []}
    with tempfile.TemporaryDirectory(prefix="bnmem-install-") as tmp:
        for r in range(args.rounds):
            for mode in runs:
                res = one(mode, Path(tmp) / f"{mode}-{r}")
                runs[mode].append(res)
                print(mode, {k: round(v, 1) for k, v in res.items()}, flush=True)
    med = {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in runs.items()}
    total = {m: med[m]["install_s"] + med[m]["first_import_torch_s"] for m in med}
    summary = {"median": med, "install_ratio": med["compile"]["install_s"] / med["no-compile"]["install_s"],
               "install_plus_first_import_ratio": total["compile"] / total["no-compile"]}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
