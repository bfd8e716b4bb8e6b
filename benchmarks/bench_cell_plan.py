"""One typed plan per cell (issue 37): ``bnmem run --dry-run`` and a small lira study, BEFORE and AFTER side by
side, with the run's result files compared byte for byte.

BEFORE is a ref of this repository (default ``main``) checked out with ``git worktree add`` into a scratch
folder; AFTER is this checkout. Each command runs as a subprocess with its own ``src`` on PYTHONPATH (the same
venv), traced as ``bench_startup.py`` does (CPU seconds of every Python process, by role: parent, fork server,
workers; and wall seconds):

* ``bnmem run STUDY --dry-run``;
* ``bnmem run STUDY --workers 1`` and ``--workers 2`` of a two-cell study (digits, 300 examples, 2 epochs;
  a shared-recipe and a per-norm cell; memorize, gamma-sigma and lira with 4 shadow models in chunks of 2
  queried under 2 views), each into a fresh folder.

The repeats alternate BEFORE and AFTER, so a load that comes and goes weighs on both; medians are printed.
Every AFTER run's json/npy/npz/pt/csv files (not DONE, environment.json) must equal BEFORE's. Run::

    python benchmarks/bench_cell_plan.py [--before main] [--repeats 1]

The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_startup import _median, before_and_after, interleaved, print_side_by_side, run_traced  # noqa: E402

STUDY = """name: cellplan
data: {dataset: digits, seed: 0, val_fraction: 0.1, train_size: 300}
arch: lenet
train: {optimizer: sgd, lr: 0.05, momentum: 0.9, weight_decay: 5.0e-4, epochs: 2, batch_size: 64, threads: 1}
grid: {norms: [batch, none], seeds: [0], replicates: 1, recipes: [shared, per-norm], outliers: [{label_noise: 0.05}]}
lenses:
  memorize: {clean: false}
  gamma-sigma: {}
  lira: {shadow_models: 4, chunk_size: 2, views: [identity, shift]}
  rmia: null
"""
RESULT_SUFFIXES = (".json", ".npy", ".npz", ".pt", ".csv")
NOT_RESULTS = ("DONE", "environment.json")


def result_hashes(root: Path) -> dict[str, str]:
    """SHA-256 of every result file under ``root`` (what a run computed, not when or where)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in RESULT_SUFFIXES and p.name not in NOT_RESULTS
            and not p.name.startswith(".")}


def measure(label: str, src: Path, site: Path, scratch: Path, i: int) -> dict:
    """The dry run and the two runs with ``src``: traced seconds, and the runs' result hashes."""
    bnmem = str(Path(sys.executable).with_name("bnmem"))
    study = str(scratch / "cellplan.yaml")
    out: dict = {"dry-run": run_traced([bnmem, "run", study, "--dry-run"], src, site, {})}
    for w in (1, 2):
        folder = scratch / f"run-{label}-w{w}-{i}"
        out[f"run w{w}"] = run_traced([bnmem, "run", study, "--out", str(folder), "--workers", str(w), "--quiet"],
                                      src, site, {})
        out[f"hashes w{w}"] = result_hashes(folder)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="main", help="git ref measured as BEFORE (default: main)")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    with before_and_after(args.before, "cellplan.yaml", STUDY) as (scratch, site, before_src):
        samples = interleaved(args.repeats, before_src, lambda label, src, i: measure(label, src, site, scratch, i))
    commands = ("dry-run", "run w1", "run w2")
    result: dict = {k: {c: _median([x[c] for x in v]) for c in commands} for k, v in samples.items()}
    identical = {}
    for w in (1, 2):
        b, a = samples["before"][0][f"hashes w{w}"], samples["after"][0][f"hashes w{w}"]
        identical[f"w{w}"] = {"files": len(a), "same_names": a.keys() == b.keys(),
                              "differ": sorted(k for k in a if k in b and a[k] != b[k])}
    result["identical"] = identical
    print_side_by_side(result, commands, 30)
    print("result files identical:", identical)
    print(json.dumps({**result, "before_ref": args.before, "repeats": args.repeats}))


if __name__ == "__main__":
    main()
