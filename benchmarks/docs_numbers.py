"""Regenerate the numbers README.md and docs/ quote, from the files that runs and benchmarks write.

docs/numbers.json holds each quoted number (as the docs print it) with where it came from, and the
lines of the docs that quote it, as templates (``{key}`` stands for the number). This script reads
the sources it is given, recomputes their numbers, writes docs/numbers.json, and lists every doc line
that no longer matches; tests/test_docs_numbers.py fails while one differs. Run::

    python benchmarks/docs_numbers.py --theory runs/theory/theory.json    # after `bnmem theory --out runs/theory`
    python benchmarks/docs_numbers.py --report-bench report-bench.json    # from benchmarks/bench_report.py --json
    python benchmarks/docs_numbers.py --lira runs/lira                    # a `bnmem lira` run directory
    python benchmarks/docs_numbers.py --demo-bench demo-bench.json        # from benchmarks/bench_demo.py --json
    python benchmarks/docs_numbers.py --attacks-bench attacks.json        # from benchmarks/bench_attacks.py --json
    python benchmarks/docs_numbers.py --gpu-cell cell.json                # from benchmarks/gpu_check.py --only d --json
    python benchmarks/docs_numbers.py --check                             # only list the stale lines

Then edit the listed doc lines (or the templates, when a sentence changes) until --check is clean.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
NUMBERS = ROOT / "docs" / "numbers.json"
KEY = re.compile(r"\{([a-z0-9_.]+)\}")


def fmt(v: float, spec: str) -> str:
    """A number as the docs print it: ``spec`` (``.2f``, ``+.2f``, ``.0%``, ``group`` for a grouped integer)
    with a typographic minus."""
    if spec == "group":
        text = f"{round(v):,}".replace(",", " ")
    else:
        text = format(v, spec)
    return text.replace("-", "−")


# theory.json (counterfactual.by_kind.<kind>) -> key suffix, path, format
THEORY_FIELDS = (
    ("ratio_median", "pooled.ratio.median", ".2f"), ("ratio_q25", "pooled.ratio.q25", ".2f"),
    ("ratio_q75", "pooled.ratio.q75", ".2f"), ("ratio_min", "pooled.ratio.min", "group"),
    ("ratio_max", "pooled.ratio.max", "group"),
    ("seed_median_min", "over_seeds.ratio\\.median.min", ".2f"),
    ("seed_median_median", "over_seeds.ratio\\.median.median", ".2f"),
    ("seed_median_max", "over_seeds.ratio\\.median.max", ".2f"),
    ("fraction_negative", "pooled.fraction_negative", ".2f"),
    ("fraction_negative_pct", "pooled.fraction_negative", ".0%"),
    ("gs2_median", "pooled.gamma_sigma_sq.median", ".0f"), ("gs2_q25", "pooled.gamma_sigma_sq.q25", ".0f"),
    ("gs2_q75", "pooled.gamma_sigma_sq.q75", ".0f"),
    ("over_gs2_median", "pooled.ratio_over_gamma_sigma_sq.median", ".2g"),
    ("over_gs2_q25", "pooled.ratio_over_gamma_sigma_sq.q25", ".2g"),
    ("over_gs2_q75", "pooled.ratio_over_gamma_sigma_sq.q75", ".2f"),
    ("within_factor_2", "pooled.fraction_within_factor_2_of_gamma_sigma_sq", ".3f"),
    ("rel_error", "pooled.median_rel_error_vs_gamma_sigma_sq", ".2f"),
    ("seed_rel_error_min", "over_seeds.median_rel_error_vs_gamma_sigma_sq.min", ".2f"),
    ("seed_rel_error_max", "over_seeds.median_rel_error_vs_gamma_sigma_sq.max", ".2f"),
    ("spearman", "pooled.spearman_ratio_vs_gamma_sigma_sq", "+.2f"),
    ("seed_spearman_min", "over_seeds.spearman_ratio_vs_gamma_sigma_sq.min", "+.2f"),
    ("seed_spearman_max", "over_seeds.spearman_ratio_vs_gamma_sigma_sq.max", "+.2f"),
    ("old_rel_error", "pooled.old_w_only_median_rel_error_vs_gamma_sigma_sq", ".2f"),
    ("seed_old_rel_error_min", "over_seeds.old_w_only_median_rel_error_vs_gamma_sigma_sq.min", ".2f"),
    ("seed_old_rel_error_max", "over_seeds.old_w_only_median_rel_error_vs_gamma_sigma_sq.max", ".2f"),
    ("bn_grows_more", "pooled.descriptive.fraction_bn_grows_margin_more", ".0%"),
    ("bn_margin_grows", "pooled.descriptive.fraction_bn_margin_grows", ".0%"),
    ("plain_margin_grows", "pooled.descriptive.fraction_plain_margin_grows", ".0%"),
    ("rho_median", "pooled.descriptive.rho_median", ".3f"),
    ("first_order_error", "pooled.first_order_median_rel_error", ".2g"),
)


def _path_get(obj: Any, path: str) -> float:
    """``_get`` with ``\\.`` for a dot inside a key (``over_seeds["ratio.median"]``)."""
    parts = [p.replace("\0", ".") for p in path.replace("\\.", "\0").split(".")]
    for part in parts:
        obj = obj[part]
    return float(obj)


def theory_numbers(path: Path) -> dict[str, str]:
    """The counterfactual table of docs/theory.md from a theory.json (``bnmem theory`` with its defaults)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for kind, block in data["counterfactual"]["by_kind"].items():
        for name, where, spec in THEORY_FIELDS:
            v = _path_get(block, where)
            out[f"theory.{kind}.{name}"] = fmt(v * 100, ".1g") + "%" if name == "first_order_error" \
                else fmt(v, spec)
    return out


def report_numbers(path: Path) -> dict[str, str]:
    """The demo report's size and render time, from benchmarks/bench_report.py --json."""
    b = json.loads(path.read_text(encoding="utf-8"))
    out = {"report.mb": f"{b['report_mb']:.1f}", "report.images": str(b["distinct_images"])}
    if b.get("load_ms") is not None:
        out["report.load_s"] = f"{b['load_ms'] / 1000:.2f}"
    if b.get("forest_figure_bottom_px") is not None:
        out["report.forest_bottom_px"] = str(b["forest_figure_bottom_px"])
    if b.get("headline_bottom_px") is not None:
        out["report.headline_bottom_px"] = str(b["headline_bottom_px"])
    return out


def lira_disk_numbers(run: Path) -> dict[str, str]:
    """MB per norm of a lira run directory, shadow-model weights (``*.pt``) not counted; and, for its first
    norm, the φ arrays' and the predictions' share."""
    out = {}
    for norm_dir in sorted(p for p in run.iterdir() if p.is_dir()):
        files = [f for f in norm_dir.rglob("*") if f.is_file() and f.suffix != ".pt"]
        if not files:
            continue
        out[f"lira.disk_mb.{norm_dir.name}"] = f"{sum(f.stat().st_size for f in files) / 1e6:.2f}"
        if "lira.phi_mb" not in out:
            phi = sum(f.stat().st_size for f in files if "phi" in f.name)
            out["lira.phi_mb"] = f"{phi / 1e6:.2f}"
            out["lira.pred_mb"] = f"{(norm_dir / 'pred.npy').stat().st_size / 1e6:.2f}"
    return out


def demo_numbers(path: Path) -> dict[str, str]:
    """`make demo`'s wall time and its install part (the slowest round's), from benchmarks/bench_demo.py --json."""
    b = json.loads(path.read_text(encoding="utf-8"))
    total = b["total_s"]
    return {"demo.total": f"{int(total // 60)} min {round(total % 60)} s",
            "demo.install_min": f"{b['install_s'] / 60:.1f}",
            # bench_demo.py --rounds N: total_s is the slowest round's; older files hold one round.
            "demo.rounds": str(len(b.get("rounds", [b])))}


def attacks_numbers(path: Path) -> dict[str, str]:
    """The CIFAR-scale attack evaluation's CPU seconds and peak RSS, this tree's and (when measured side by
    side) the reference's, from benchmarks/bench_attacks.py --json."""
    b = json.loads(path.read_text(encoding="utf-8"))
    out = {"attacks.after_cpu_s": f"{b['after_cpu_s']:.1f}", "attacks.after_gb": f"{b['after_rss_gb']:.2f}",
           "attacks.load": f"{b['load_avg'][0]:.1f}–{b['load_avg'][1]:.1f}"}
    if "before_cpu_s" in b:
        out.update({"attacks.before_cpu_s": f"{b['before_cpu_s']:.1f}",
                    "attacks.before_gb": f"{b['before_rss_gb']:.2f}",
                    "attacks.cpu_ratio": f"{b['cpu_ratio']:.1f}"})
    if "equal_to_rounding" in b:  # since the compiled kernels: equal to rounding, not bit for bit
        out.update({"attacks.equal": "yes" if b["equal_to_rounding"] else "NO",
                    "attacks.score_diff": f"{max(d['normwise'] for d in b['max_rel_score_diff'].values()):.0e}",
                    "attacks.metric_diff": f"{b['max_metric_diff']:.0e}" if b["max_metric_diff"] else "0"})
    if "compile_cpu_s" in b:
        out.update({"attacks.compile_cold_s": f"{b['compile_cpu_s']['cold']:.0f}",
                    "attacks.compile_warm_s": f"{b['compile_cpu_s']['warm']:.1f}"})
    return out


def gpu_cell_numbers(path: Path) -> dict[str, str]:
    """The CIFAR-10 LiRA cell on a GPU (benchmarks/gpu_check.py check (d)): seconds per shadow model."""
    b = json.loads(path.read_text(encoding="utf-8"))
    epoch = b["train_s_per_shadow_model_epoch"]
    return {"gpu.device": b["device"], "gpu.torch": b["torch"].split("+")[0], "gpu.epochs": str(b["epochs"]),
            "gpu.models": str(b["shadow_models_per_norm"]), "gpu.cell_s": f"{b['cell_wall_s']:.0f}",
            "gpu.batch_epoch_s": f"{epoch['batch']:.2f}", "gpu.none_epoch_s": f"{epoch['none']:.2f}",
            "gpu.all_in_s": f"{b['all_in_s_per_shadow_model']:.1f}"}


SOURCES: dict[str, tuple[Callable[[Path], dict[str, str]], str]] = {
    "theory": (theory_numbers, "bnmem theory --out runs/theory (the defaults)"),
    "report_bench": (report_numbers, "python benchmarks/bench_report.py runs/demo --json FILE"),
    "lira": (lira_disk_numbers, "bnmem lira --dataset digits --shadow-models 16 --views identity,shift --epochs 1"),
    "demo_bench": (demo_numbers, "python benchmarks/bench_demo.py --json FILE (a fresh clone, make demo)"),
    "attacks_bench": (attacks_numbers, "OMP_NUM_THREADS=1 python benchmarks/bench_attacks.py --ref REF --phi-dir DIR "
                                       "--json FILE (M=256 N=50000 V=18 P=10000, REF side by side)"),
    "gpu_cell": (gpu_cell_numbers, "python benchmarks/gpu_check.py --device cuda --only d --json FILE (one NVIDIA "
                                   "H200 lent through the device tool, 2026-12-04)"),
}


def load() -> dict[str, Any]:
    return json.loads(NUMBERS.read_text(encoding="utf-8"))


def render(template: str, numbers: dict[str, dict[str, str]]) -> str:
    """A quote template with every ``{key}`` replaced by its number (KeyError for an unknown key)."""
    return KEY.sub(lambda m: numbers[m.group(1)]["value"], template)


def stale(data: dict[str, Any]) -> list[str]:
    """Each quote whose rendered text is not in its doc, as 'doc: expected text'."""
    out = []
    for q in data["quotes"]:
        text = (ROOT / q["doc"]).read_text(encoding="utf-8")
        line = render(q["text"], data["numbers"])
        if line not in text:
            out.append(f"{q['doc']}: {line}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in SOURCES:
        ap.add_argument(f"--{name.replace('_', '-')}", type=Path, default=None)
    ap.add_argument("--check", action="store_true", help="write nothing; list the stale doc lines")
    args = ap.parse_args()
    data = load()
    if not args.check:
        from bnmem import __version__

        today = datetime.date.today().isoformat()
        for name, (extract, command) in SOURCES.items():
            src = getattr(args, name)
            if src is None:
                continue
            for key, value in extract(src).items():
                data["numbers"][key] = {"value": value, "source": f"{command}: {src.name}",
                                        "version": __version__, "date": today}
        NUMBERS.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    bad = stale(data)
    print("\n".join(bad) if bad else "every quoted number matches docs/numbers.json")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
