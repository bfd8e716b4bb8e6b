"""Leave-one-out attack evaluation at CIFAR scale: CPU seconds and peak memory, a git ref's code against this tree's.

Synthetic φ with a planted membership signal at (M=256 models, N=50,000
examples, V=18 views; a 10,000-point RMIA population), stored as the query step
stores it (float32 φ + float32 residual, memory-mapped), every default attack,
leave-one-out over all 256 targets, subsets all/outliers/inliers: the lira
lens's evaluation of one CIFAR-10 or CIFAR-100 norm (φ does not depend on the
number of classes). The same φ is evaluated by the code of a git ref (default
``main``: ``git archive``-d into a scratch directory) and by this tree's, each in
a fresh child process (so its peak RSS, VmHWM, is its own), and the two are
compared to the project's tolerance, "equal to rounding": every target's scores
within 1e-12 relative to its largest score, every number of the metrics (ε
bounds and counts included) and every pooled curve point within 1e-9, every
non-numeric entry the same. SHA-256 digests of every score, metric and pooled
curve say, for information, whether the bits are identical too. The compiled
kernels (numba) are compiled once in a fresh cache (its CPU seconds printed as
"cold"), then loaded ("warm"); the measured runs are warm. Run::

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bench_attacks.py              # the full size
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bench_attacks.py --ref REF --phi-dir DIR --json FILE
        # side by side with REF's code; φ kept in DIR for the next run
    OMP_NUM_THREADS=1 python benchmarks/bench_attacks.py --models 32 --examples 2000 --population 1000
    python benchmarks/docs_numbers.py --attacks-bench FILE    # after a full-size run with --json FILE

``--floor`` also times what the numpy-only code could not go below (one read of φ, SciPy's log_ndtr of the
offline attacks, the per-target sorts). Target (issue 49): the full size in <= 30 s of CPU and <= 2 GB peak
RSS. CPU seconds (user + sys of the evaluating process) are the measure: wall time depends on what else the
machine runs. The last line printed is the summary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# Per-target metrics compared between the two codes (every attack and subset).
COMPARED = ("auc", "balanced_acc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "eps_lb")
# Equal to rounding (the project's definition): scores within 1e-12 relative (per target, to its largest score:
# tests/test_streaming.py's assert_scores_close); every metric, ε bound, count and pooled curve point within
# 1e-9, and every non-numeric entry (which term decided a bound) the same.
SCORE_RTOL, METRIC_ATOL = 1e-12, 1e-9


def make_phi(out: Path, m: int, n: int, v: int, p: int, seed: int = 0) -> None:
    """Write phi.npy/phi_lo.npy [m, n, v], population_phi(+_lo) [m, p, v], keep.npy, outliers.npy.

    φ = difficulty + susceptibility·IN + per-model noise + per-view jitter, with
    10% "outliers" (low difficulty, high susceptibility), in blocks of examples.
    """
    from bnmem.attacks import keep_matrix
    from bnmem.attacks.phi import lo_path, split_phi

    rng = np.random.default_rng(seed)
    keep = keep_matrix(m, n, seed)
    np.save(out / "keep.npy", keep)
    outliers = rng.random(n) < 0.1
    np.save(out / "outliers.npy", outliers)
    for name, count, members in (("phi", n, keep), ("population_phi", p, np.zeros((m, p), bool))):
        hi = np.lib.format.open_memmap(out / f"{name}.npy", mode="w+", dtype=np.float32, shape=(m, count, v))
        lo = np.lib.format.open_memmap(lo_path(out / f"{name}.npy"), mode="w+", dtype=np.float32, shape=(m, count, v))
        for a in range(0, count, 2000):
            b = min(count, a + 2000)
            k = b - a
            out_blk = outliers[a:b] if name == "phi" else np.zeros(k, bool)
            diff = rng.normal(3.0, 2.0, k) - 4.0 * out_blk
            susc = rng.exponential(0.5, k) * (1 + 4 * out_blk)
            spread = rng.lognormal(0.0, 0.5, k)
            model = spread[None, :] * rng.normal(0, 1, (m, k))
            phi = (diff[None, :] + susc[None, :] * members[:, a:b] + model)[..., None] + rng.normal(0, 0.2, (m, k, v))
            hi[:, a:b], lo[:, a:b] = split_phi(phi)
        hi.flush()
        lo.flush()
        del hi, lo


def child(root: Path, scores_out: Path) -> dict:
    """One measured evaluation with the code on sys.path; seconds, peak RSS, the per-target metrics, every
    number of the metrics and the pooled curves (the scores are written to ``scores_out``, one .npy per
    attack, after the clock stops). The compiled kernels' compile time is counted when their on-disk cache is
    cold (``compiled_kernels`` says whether they ran)."""
    from bnmem.attacks import ALL, evaluate_stream
    from bnmem.attacks.phi import NpyPhi

    keep = np.load(root / "keep.npy")
    outliers = np.load(root / "outliers.npy")
    phi, pop = NpyPhi(root / "phi.npy"), NpyPhi(root / "population_phi.npy")
    t0, c0 = time.perf_counter(), time.process_time()
    res = evaluate_stream(phi, keep, {"outliers": outliers, "inliers": ~outliers}, ALL, population_phi=pop)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = peak_rss_gb()
    try:
        from bnmem.attacks import kernels
        compiled = kernels.available()
    except ImportError:  # code from before the kernels
        compiled = False
    scores_out.mkdir(parents=True, exist_ok=True)
    for a in ALL:
        np.save(scores_out / f"{a}.npy", np.asarray(res["scores"][a], dtype=np.float64))
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_rss_gb": rss,
        "compiled_kernels": compiled,
        "numbers": numbers(res["metrics"]),
        "pooled": {f"{a}/{s}": [np.asarray(x, float).tolist() for x in res["curves"][a][s]["pooled"]]
                   for a in ALL for s in res["curves"][a]},
        "digests": digests(res),
        "per_target": {a: {s: {k: res["metrics"][a][s][f"{k}_per_target"] for k in COMPARED}
                           for s in res["metrics"][a]} for a in ALL},
        "pooled_points": {a: {s: len(res["curves"][a][s]["pooled"][0]) for s in res["curves"][a]} for a in ALL},
        "auc": {a: res["metrics"][a]["all"]["auc"] for a in ALL},
    }


def compile_seconds() -> dict:
    """CPU seconds to import the kernels and make them ready on a tiny block (compiled, or loaded from numba's
    on-disk cache in NUMBA_CACHE_DIR), and whether they run at all."""
    c0 = time.process_time()
    try:
        from bnmem.attacks import kernels
    except ImportError:
        return {"cpu_seconds": 0.0, "compiled_kernels": False}
    ready = kernels.available()
    if ready:
        from bnmem.attacks import evaluate_stream, keep_matrix

        rng = np.random.default_rng(0)
        evaluate_stream(rng.normal(size=(8, 20, 2)), keep_matrix(8, 20, 0), population_phi=rng.normal(size=(8, 5, 2)))
    return {"cpu_seconds": time.process_time() - c0, "compiled_kernels": ready}


def floor(root: Path, attacks: int = 7, offline: int = 2) -> dict:
    """CPU seconds of what no reorganisation of the evaluation removes while its numbers stay bit for bit:
    one read of φ (float32 pair to float64), scipy's ``log_ndtr`` on the offline attacks' T·N·V arguments
    each (``offline`` of them), and one descending sort of every attack's T per-target score rows of N (what
    every ROC needs: numpy's argsort, as :func:`bnmem.attacks.per_target.roc_summaries` sorts them). The arguments
    are φ standardized per example and view over the models, the rows random normal: sorts and log_ndtr cost
    alike on them."""
    from bnmem.attacks.phi import NpyPhi
    from scipy.special import log_ndtr

    source = NpyPhi(root / "phi.npy")
    m, n, v = source.shape
    block = max(1, (1 << 21) // (m * v))
    read = special = 0.0
    for a in range(0, n, block):
        c0 = time.process_time()
        chunk = source.read(a, min(n, a + block))
        read += time.process_time() - c0
        z = (chunk - chunk.mean(axis=0)) / (chunk.std(axis=0) + 1e-30)
        np.negative(z, out=z)
        for _ in range(offline):
            c0 = time.process_time()
            log_ndtr(z)
            special += time.process_time() - c0
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(m, n))
    c0 = time.process_time()
    for _ in range(attacks):
        np.argsort(np.negative(rows), axis=1)
    sort = time.process_time() - c0
    return {"read_phi": read, "log_ndtr": special, "sorts": sort, "total": read + special + sort}


def numbers(tree, path: str = "") -> dict[str, object]:
    """Every leaf of a metrics tree by its path: numbers as floats, anything else (a deciding term's name,
    a flag) as its string."""
    if isinstance(tree, dict):
        out: dict[str, object] = {}
        for key, value in tree.items():
            out.update(numbers(value, f"{path}/{key}"))
        return out
    if isinstance(tree, (list, tuple, np.ndarray)):
        out = {}
        for i, value in enumerate(tree):
            out.update(numbers(value, f"{path}/{i}"))
        return out
    if isinstance(tree, (bool, np.bool_, str)) or tree is None:
        return {path: str(tree)}
    if isinstance(tree, (int, float, np.integer, np.floating)):
        return {path: float(tree)}
    return {path: str(tree)}


def score_differences(old_dir: Path, new_dir: Path) -> dict[str, dict[str, float]]:
    """Per attack, the two codes' scores compared: ``normwise``, the largest over targets of max |a − b| over
    the target's row relative to the row's largest |a| (the project's tolerance: 1e-12), and ``entrywise``,
    the largest |a − b| / max(|a|, |b|) (an entry near 0 that is a mean of cancelling per-view terms is
    reproduced to the terms' rounding, not its own, so this one is reported, not held to 1e-12)."""
    out = {}
    for path in sorted(old_dir.glob("*.npy")):
        a, b = np.load(path), np.load(new_dir / path.name)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        diff = np.where(same, 0.0, np.abs(a - b))
        with np.errstate(invalid="ignore", divide="ignore"):
            entry = np.where(same, 0.0, diff / np.maximum(np.abs(a), np.abs(b)))
            scale = np.where(np.isfinite(a), np.abs(a), 0.0).max(axis=1)
            norm = diff.max(axis=1) / scale
        norm[diff.max(axis=1) == 0] = 0.0
        out[path.stem] = {"normwise": float(np.nanmax(norm, initial=0.0)),
                          "entrywise": float(np.nanmax(entry, initial=0.0))}
    return out


def metric_differences(old: dict, new: dict) -> tuple[float, list[str]]:
    """The largest |difference| over every number of every metric (ε counts and bounds included) and every
    pooled curve point, and the paths where the two differ in anything but a number's rounding (a string, a
    missing entry, a curve's length)."""
    worst, differ = 0.0, []
    a, b = old["numbers"], new["numbers"]
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, float) and isinstance(y, float):
            if not (x == y or (np.isnan(x) and np.isnan(y))):
                worst = max(worst, abs(x - y))
        elif x != y:
            differ.append(key)
    for key in sorted(set(old["pooled"]) | set(new["pooled"])):
        x, y = old["pooled"].get(key), new["pooled"].get(key)
        if x is None or y is None or [len(c) for c in x] != [len(c) for c in y]:
            differ.append(f"pooled {key}")
            continue
        for cx, cy in zip(x, y):
            if cx:
                worst = max(worst, float(np.max(np.abs(np.asarray(cx) - np.asarray(cy)))))
    return worst, differ


def peak_rss_gb() -> float:
    """This process's peak resident memory in GB: VmHWM, the high-water mark of its own address space. On
    Linux ru_maxrss also keeps the parent's at the fork that started this process (the parent had just
    written φ through memory maps: about 2 GB), so it is read only where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def digests(res: dict) -> dict[str, str]:
    """SHA-256 of every attack's scores (their bytes), of all metrics (every number of every attack and
    subset, ε counts included) and of every pooled curve: equal digests = not one bit changed."""
    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    def plain(x):
        return x.item() if isinstance(x, np.generic) else x.tolist() if isinstance(x, np.ndarray) else str(x)

    out = {f"scores/{a}": sha(np.ascontiguousarray(s).tobytes()) for a, s in res["scores"].items()}
    out["metrics"] = sha(json.dumps(res["metrics"], sort_keys=True, default=plain).encode())
    out["pooled curves"] = sha(b"".join(np.ascontiguousarray(arr).tobytes() for a in res["curves"]
                                        for sub in res["curves"][a] for arr in res["curves"][a][sub]["pooled"]))
    return out


def run_child(src: Path, root: Path, what: str = "--child", scores_out: Path | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    extra = ["--scores-out", str(scores_out)] if scores_out is not None else []
    proc = subprocess.run([sys.executable, __file__, what, "--root", str(root), *extra], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"evaluation with {src} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def largest_difference(old: dict, new: dict) -> dict[str, float]:
    """Per compared metric, the largest |difference| over attacks, subsets and targets (nan = nan counts as 0)."""
    out = {}
    for key in COMPARED:
        a = np.array([old["per_target"][x][s][key] for x in old["per_target"] for s in old["per_target"][x]], float)
        b = np.array([new["per_target"][x][s][key] for x in old["per_target"] for s in old["per_target"][x]], float)
        same_nan = np.isnan(a) & np.isnan(b)
        out[key] = float(np.max(np.where(same_nan, 0.0, np.abs(a - b)), initial=0.0))
    return out


def _phi_dir(args: argparse.Namespace, tmp: Path, size: str) -> Path:
    """The directory holding the synthetic φ: ``--phi-dir`` (reused when it holds this size, written
    otherwise) or a fresh one under ``tmp``. A size stamp is written last, so a half-written directory is
    never reused."""
    data = args.phi_dir if args.phi_dir is not None else tmp / "phi"
    stamp = data / "size.txt"
    if stamp.exists() and stamp.read_text(encoding="utf-8") == size:
        print(f"synthetic φ at {size} reused from {data}", flush=True)
        return data
    data.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    t0 = time.perf_counter()
    make_phi(data, args.models, args.examples, args.views, args.population)
    disk = sum(f.stat().st_size for f in data.iterdir()) / 2**30
    stamp.write_text(size, encoding="utf-8")
    print(f"synthetic φ at {size} written ({disk:.2f} GB on disk) in {time.perf_counter() - t0:.0f} s", flush=True)
    return data


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=256)
    parser.add_argument("--examples", type=int, default=50_000)
    parser.add_argument("--views", type=int, default=18)
    parser.add_argument("--population", type=int, default=10_000)
    parser.add_argument("--ref", default="main", help="the git ref whose code is 'before'")
    parser.add_argument("--skip-ref", action="store_true", help="only this tree's evaluation")
    parser.add_argument("--phi-dir", type=Path,
                        help="reuse the synthetic φ written there by an earlier run of this size (written there "
                             "first when missing); default: a fresh temporary copy")
    parser.add_argument("--json", type=Path,
                        help="also write the summary here (for benchmarks/docs_numbers.py --attacks-bench)")
    parser.add_argument("--floor", action="store_true",
                        help="also measure what no reorganisation removes while every number stays bit for bit (one "
                             "read of φ, scipy's log_ndtr of the offline attacks, the per-target sorts)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-compile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scores-out", type=Path, help=argparse.SUPPRESS)
    return parser


def compare(old: dict, new: dict, score_diff: dict, ref: str) -> tuple[dict, str]:
    """Print how this tree's evaluation differs from ``ref``'s (metrics, scores, bits); the summary's comparison
    fields and the closing line's tail."""
    diff = largest_difference(old, new)
    same_pool = old["pooled_points"] == new["pooled_points"]
    print("largest |difference| per target, every attack and subset: "
          + ", ".join(f"{k} {v:.1e}" for k, v in diff.items())
          + f"; pooled curves {'the same' if same_pool else 'DIFFERENT'} sizes")
    worst, other = metric_differences(old, new)
    worst_score = max((d["normwise"] for d in score_diff.values()), default=0.0)
    equal = worst_score <= SCORE_RTOL and worst <= METRIC_ATOL and not other
    print("largest score difference per attack, per target relative to its largest score (entrywise): "
          + ", ".join(f"{k} {d['normwise']:.1e} ({d['entrywise']:.1e})" for k, d in score_diff.items()))
    print(f"largest |difference| over every metric, ε bound and count and every pooled curve point: {worst:.1e}"
          + (f"; differing otherwise: {', '.join(other[:10])}" if other else ""))
    print(f"equal to rounding (scores {SCORE_RTOL:g} relative per target, metrics {METRIC_ATOL:g}): "
          + ("yes" if equal else "NO"))
    differ = sorted(k for k in new["digests"] if old["digests"].get(k) != new["digests"][k])
    print("bit for bit (SHA-256 of every score, every metric and every pooled curve): "
          + ("identical" if not differ else "different in " + ", ".join(differ)))
    summary = dict(bit_identical=not differ, equal_to_rounding=equal, max_rel_score_diff=score_diff,
                   max_metric_diff=worst, other_differences=other[:20], ref=ref,
                   before_cpu_s=round(old["cpu_seconds"], 1), before_s=round(old["seconds"], 1),
                   before_rss_gb=round(old["peak_rss_gb"], 2),
                   cpu_ratio=round(old["cpu_seconds"] / new["cpu_seconds"], 2), max_abs_diff=diff,
                   pooled_same_size=same_pool)
    tail = (f"; {ref}: {old['cpu_seconds']:.1f} CPU s, {old['peak_rss_gb']:.2f} GB; "
            f"{old['cpu_seconds'] / new['cpu_seconds']:.1f}x less CPU")
    return summary, tail


def main() -> None:
    args = _parser().parse_args()
    if args.child:
        print(json.dumps(child(args.root, args.scores_out)))
        return
    if args.child_compile:
        print(json.dumps(compile_seconds()))
        return
    if args.child_floor:
        print(json.dumps(floor(args.root)))
        return
    sys.path.insert(0, str(ROOT / "src"))
    load_start = os.getloadavg()[0]
    size = f"M={args.models} N={args.examples} V={args.views} P={args.population}"
    with tempfile.TemporaryDirectory(prefix="bench_attacks_") as tmp:
        data = _phi_dir(args, Path(tmp), size)
        old = None
        if not args.skip_ref:
            ref = Path(tmp) / "ref"
            ref.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.ref, "src"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(ref)], input=archive, check=True)
            os.environ["NUMBA_CACHE_DIR"] = str(Path(tmp) / "numba_cache")
            run_child(ref / "src", data, "--child-compile")  # a ref with kernels is measured warm too
            old = run_child(ref / "src", data, scores_out=Path(tmp) / "scores_ref")
            print(f"{args.ref}: {old['cpu_seconds']:.1f} CPU s ({old['seconds']:.1f} s wall), "
                  f"peak RSS {old['peak_rss_gb']:.2f} GB", flush=True)
        # numba's on-disk cache in a fresh directory: compiled cold once, then loaded by the measured run
        os.environ["NUMBA_CACHE_DIR"] = str(Path(tmp) / "numba_cache")
        cold = run_child(ROOT / "src", data, "--child-compile")
        warm = run_child(ROOT / "src", data, "--child-compile")
        if cold["compiled_kernels"]:
            print(f"compiled kernels: {cold['cpu_seconds']:.1f} CPU s to import and compile (cold cache), "
                  f"{warm['cpu_seconds']:.1f} CPU s to import and load (warm); the measured run below is warm",
                  flush=True)
        new = run_child(ROOT / "src", data, scores_out=Path(tmp) / "scores_new")
        print(f"this tree: {new['cpu_seconds']:.1f} CPU s ({new['seconds']:.1f} s wall), "
              f"peak RSS {new['peak_rss_gb']:.2f} GB"
              + ("" if new["compiled_kernels"] else " (plain numpy: numba absent or BNMEM_NO_NUMBA)"), flush=True)
        if old is not None:
            score_diff = score_differences(Path(tmp) / "scores_ref", Path(tmp) / "scores_new")
        low = run_child(ROOT / "src", data, "--child-floor") if args.floor else None
    if low is not None:
        print(f"floor at this size (what this code spends on what no reorganisation removes while every "
              f"number stays bit for bit): {low['total']:.1f} CPU s = one read of φ "
              f"{low['read_phi']:.1f} + log_ndtr of the 2 offline attacks {low['log_ndtr']:.1f} + the 7 attacks' "
              f"per-target sorts {low['sorts']:.1f}; this tree spends {new['cpu_seconds'] - low['total']:.1f} CPU s "
              "on everything else", flush=True)
    print("mean AUC (all examples): " + ", ".join(f"{a} {v:.3f}" for a, v in new["auc"].items()))
    ok = new["cpu_seconds"] <= 30 and new["peak_rss_gb"] <= 2
    summary = {"size": size, "after_cpu_s": round(new["cpu_seconds"], 1), "after_s": round(new["seconds"], 1),
               "after_rss_gb": round(new["peak_rss_gb"], 2), "within_30s_2gb": ok}
    line = (f"bench_attacks: {size}, 7 attacks x 3 subsets, leave-one-out over {args.models} targets: this tree "
            f"{new['cpu_seconds']:.1f} CPU s, {new['peak_rss_gb']:.2f} GB peak RSS "
            f"({'within' if ok else 'OUTSIDE'} 30 s / 2 GB)")
    if cold["compiled_kernels"]:
        summary["compile_cpu_s"] = {"cold": round(cold["cpu_seconds"], 1), "warm": round(warm["cpu_seconds"], 1),
                                    "measured_run": "warm"}
    summary["compiled_kernels"] = new["compiled_kernels"]
    if old is not None:
        more, tail = compare(old, new, score_diff, args.ref)
        summary.update(more)
        line += tail
    if low is not None:
        summary["floor_cpu_s"] = {k: round(x, 1) for k, x in low.items()}
    summary["load_avg"] = [round(load_start, 1), round(os.getloadavg()[0], 1)]  # 1-min load at start and end
    print(line)
    print(json.dumps(summary))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
