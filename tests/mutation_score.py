"""Print the mutation score per module from mutmut's results (used by `make mutate`).

Reads ``mutmut results --all true`` ("<module>.x_<function>__mutmut_<k>: <status>" per line)
and prints, per module, killed / tested and the survivors by name. Exit status 0 always:
the score is a report, not a gate.

``--reset-stale-cache`` (run by `make mutate` before mutmut) removes ``mutants/`` when the
``[tool.mutmut]`` table of pyproject.toml changed since the folder was made. mutmut 3.8 reuses
``mutants/`` incrementally and does not notice a module added to ``only_mutate``: the module's
plain copy already there counts as "unmodified" (never mutated), and once it is mutated the test
map collected before is kept (its config fingerprint leaves ``only_mutate`` out and no test is
new), so every mutant of the module reads "no tests" although tests call it (issue 39: all 211
mutants of ``bnmem.study.confirmatory``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tomllib
import sys
from collections import Counter, defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*(?P<name>[\w.]+?)\.x[_ǁ](?P<fn>\S+?)__mutmut_\d+: (?P<status>.+)$")
KILLED = {"killed", "timeout", "caught by type check"}


STAMP = Path("mutants") / ".bnmem-mutmut-config"


def reset_stale_cache(pyproject: Path = Path("pyproject.toml")) -> bool:
    """Remove ``mutants/`` when ``[tool.mutmut]`` differs from the table it was made with; True when removed."""
    table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("mutmut", {})
    digest = hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()
    old = STAMP.read_text().strip() if STAMP.exists() else None
    removed = False
    if STAMP.parent.exists() and old != digest:
        print("mutants/ was made with another [tool.mutmut] table (or by hand): removed, so every module is "
              "mutated and its tests are mapped afresh")
        shutil.rmtree(STAMP.parent)
        removed = True
    STAMP.parent.mkdir(exist_ok=True)
    STAMP.write_text(digest + "\n")
    return removed


def main() -> int:
    if "--reset-stale-cache" in sys.argv[1:]:
        reset_stale_cache()
        return 0
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
