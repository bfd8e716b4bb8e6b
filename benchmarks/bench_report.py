"""The report of a run directory: its size, what the size is made of, how long it takes to build and to render.

Copies RUN_DIR (the run itself is never written), rebuilds the report from the run's files with
``bnmem report`` (no training), then opens report.html in headless Chromium at 1400×900: the browser's
own timings (first contentful paint, load event), the wall time of a screenshot run (browser start-up
included), and the first-screen checks of the report tests (legend, headline cells that do not fit, the
forest plot and its caption inside the first screen). Needs Debian's chromium for the render part. Run::

    python benchmarks/bench_report.py runs/demo [--shot first-screen.png] [--json report-bench.json]

The last line printed is a JSON summary (also written to --json).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the shared Chromium probe

from chromium_probe import CHROMIUM, FIRST_SCREEN, probe, screenshot  # noqa: E402

from bnmem.report.build import build_report  # noqa: E402

IMG = re.compile(rb'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def composition(html: bytes) -> dict[str, float]:
    """Size of the page and of its embedded images (MB), and how many there are."""
    images = IMG.findall(html)
    return {"report_mb": round(len(html) / 1e6, 2), "images": len(images),
            "images_mb": round(sum(len(i) for i in images) / 1e6, 2),
            "distinct_images": len(set(images))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--shot", type=Path, default=None, help="where to write the first-screen screenshot")
    ap.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        scratch = Path(tmp)
        run = scratch / "run"
        shutil.copytree(args.run_dir, run, ignore=shutil.ignore_patterns("*.pt"))
        t0 = time.perf_counter()
        rep = build_report(run)
        out: dict = {"run": str(args.run_dir), "build_s": round(time.perf_counter() - t0, 1),
                     **composition(rep.html.read_bytes())}
        if CHROMIUM.exists():
            p = probe(rep.html, scratch)
            shot = args.shot or scratch / "shot.png"
            out.update({
                "first_contentful_paint_ms": p["first_contentful_paint_ms"], "load_ms": p["load_ms"],
                "screenshot_wall_s": round(screenshot(rep.html, shot.resolve(), scratch), 2),
                "legend_on_first_screen": bool(p["legend"]) and p["legend"][1] <= FIRST_SCREEN[1],
                "headline_cells_overflowing": p["overflowing"],
                "forest_with_caption_on_first_screen": bool(p["forest_figure"])
                and p["forest_figure"][1] <= FIRST_SCREEN[1],
                "headline_bottom_px": p["headline"] and round(p["headline"][1]),
                "forest_figure_bottom_px": p["forest_figure"] and round(p["forest_figure"][1]),
            })
        else:
            out["render"] = f"not measured: no {CHROMIUM}"
    text = json.dumps(out)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
