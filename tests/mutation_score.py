"""Print the mutation score per module from mutmut's results (used by `make mutate`).

Reads ``mutmut results --all true`` ("<module>.x_<function>__mutmut_<k>: <status>" per line)
and prints, per module, killed / tested and the survivors by name. Exit status 0 always:
the score is a report, not a gate.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*(?P<name>[\w.]+?)\.x[_ǁ](?P<fn>\S+?)__mutmut_\d+: (?P<status>.+)$")
KILLED = {"killed", "timeout", "caught by type check"}


def main() -> int:
    mutmut = Path(sys.executable).with_name("mutmut")
    out = subprocess.run([str(mutmut), "results", "--all", "true"], capture_output=True, text=True).stdout
    counts: dict[str, Counter] = defaultdict(Counter)
    survivors: dict[str, list[str]] = defaultdict(list)
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        status = m["status"].strip()
        counts[m["name"]][status] += 1
        if status in ("survived", "no tests"):
            survivors[m["name"]].append(line.strip().split(":")[0])
    if not counts:
        print("no mutmut results (run `mutmut run` first)")
        return 0
    total_k = total_t = 0
    print(f"{'module':34s} {'killed':>7s} {'tested':>7s} {'score':>7s}  other")
    for mod in sorted(counts):
        c = counts[mod]
        killed = sum(v for k, v in c.items() if k in KILLED)
        tested = killed + c["survived"] + c["no tests"]
        total_k, total_t = total_k + killed, total_t + tested
        other = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k not in KILLED)
        print(f"{mod:34s} {killed:7d} {tested:7d} {100 * killed / max(tested, 1):6.1f}%  {other}")
    print(f"{'total':34s} {total_k:7d} {total_t:7d} {100 * total_k / max(total_t, 1):6.1f}%")
    for mod in sorted(survivors):
        print(f"\n{mod}: " + " ".join(n.rsplit('.', 1)[-1] for n in survivors[mod]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
