"""What ``--canaries K`` (the one-run audit of the recipe) adds to ``bnmem audit``'s run time, side by side.

The mislabeled-PNG scenario of tests/audit_scenario.py (480 training images, a small BN CNN, 10 epochs of
plain SGD) is audited with 4 shadow copies, alternately without and with ``--canaries K``, ``--rounds``
times each; the median wall time of each and their ratio are printed, with the one-run floor it found.

Run: ``.venv/bin/python benchmarks/bench_audit_one_run.py [--canaries 500] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--canaries", type=int, default=500)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    from audit_scenario import write_scenario

    from bnmem.cli import main as bnmem

    with tempfile.TemporaryDirectory() as tmp:
        s = write_scenario(Path(tmp) / "scenario")
        times: dict[str, list[float]] = {"without": [], "with": []}
        floor = None
        for r in range(a.rounds):
            for name, extra in (("without", []), ("with", ["--canaries", str(a.canaries)])):
                out = Path(tmp) / f"{name}-{r}"
                t = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):  # the report; only the timings are printed
                    code = bnmem(["audit", "--quiet", *s["flags"], "--shadow-models", "4", *extra, "--out", str(out)])
                times[name].append(time.perf_counter() - t)
                assert code == 0, code
                if extra:
                    floor = json.loads((out / "audit.json").read_text())["one_run"]["eps_lb"]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"seconds_without": round(med["without"], 1), "seconds_with": round(med["with"], 1),
                      "ratio": round(med["with"] / med["without"], 2), "canaries": a.canaries,
                      "one_run_eps_lb": floor, "rounds": a.rounds}, indent=1))


if __name__ == "__main__":
    main()
