"""A first audit against reruns into the same folder (copies reused): issue 27's scenario, CPU, one thread.

The scenario of ``tests/audit_scenario.py`` (480 PNG training files, 30 mislabeled, a BN CNN trained in plain
PyTorch) is audited with M shadow copies into a fresh folder, then, into the same folder:

* the same audit with another gate (``--fail-at moderate``): every copy reused;
* the same audit with ``--canaries``: every copy reused, one one-run copy trained;
* the same audit with 2M copies: the first M reused, M trained.

Each run's wall seconds and how many copies it trained (read from ``audit.json``'s cost) are printed beside
the first run's, with their ratio.

Run: ``.venv/bin/python benchmarks/bench_audit_reuse.py [--copies 8] [--dir /tmp/bench-reuse]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def audit(flags: list[str], out: Path) -> tuple[float, dict]:
    from bnmem.cli import main

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["audit", "--quiet", *flags, "--out", str(out)])
    seconds = time.perf_counter() - t0
    assert code in (0, 3, 4), code
    return seconds, json.loads((out / "audit.json").read_text())["membership"]["cost"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-audit-reuse"))
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from audit_scenario import write_scenario

    shutil.rmtree(args.dir, ignore_errors=True)
    scenario = write_scenario(args.dir)
    base = [*scenario["flags"], "--max-examples", "100", "--top-k", "10"]
    out, m = args.dir / "audit", str(args.copies)
    runs = [("first audit", [*base, "--shadow-models", m]),
            ("rerun, another gate", [*base, "--shadow-models", m, "--fail-at", "moderate"]),
            ("rerun, --canaries 100", [*base, "--shadow-models", m, "--canaries", "100"]),
            (f"rerun, {2 * args.copies} copies", [*base, "--shadow-models", str(2 * args.copies)])]
    first = None
    print(f"{'run':<24} {'seconds':>8} {'x first':>8} {'trained':>8} {'reused':>7}")
    for name, flags in runs:
        seconds, cost = audit(flags, out)
        first = first or seconds
        print(f"{name:<24} {seconds:8.1f} {seconds / first:8.2f} {cost['trained']:8d} {cost['reused']:7d}")


if __name__ == "__main__":
    main()
