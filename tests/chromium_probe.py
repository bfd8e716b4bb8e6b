"""Open a report in headless Chromium and measure what a reader sees first (shared by the Chromium tests and
benchmarks/bench_report.py).

A copy of the page gets a small script that, after the load event, writes a JSON record into the DOM: the
viewport, the boxes of the legend, the headline table and the forest plot (with its caption), every headline
cell whose text does not fit its box or is cut with an ellipsis, and the browser's own timings. The report
itself carries no scripts; only the probe copy does.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

try:  # the suite's hang guard (tests/waiting.py); the benchmarks import this module without tests/ on the path
    from waiting import HANG_GUARD_S
except ImportError:
    HANG_GUARD_S = 3600.0

CHROMIUM = Path("/usr/bin/chromium")
FIRST_SCREEN = (1400, 900)  # what "the first screen" means in the report's tests (a laptop's browser window)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

PROBE = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const box = sel => { const e = document.querySelector(sel); if (!e) return null;
                       const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const overflowing = [...document.querySelectorAll('table.headline td')].filter(td => {
    const s = getComputedStyle(td);
    return td.scrollWidth > td.clientWidth + 1 || td.scrollHeight > td.clientHeight + 1
           || s.textOverflow === 'ellipsis';
  }).map(td => td.textContent.slice(0, 60));
  const nav = performance.getEntriesByType('navigation')[0] || {};
  const paint = Object.fromEntries(performance.getEntriesByType('paint').map(p => [p.name, p.startTime]));
  const pre = document.createElement('pre'); pre.id = 'layout-probe';
  pre.textContent = JSON.stringify({
    viewport: [innerWidth, innerHeight], legend: box('#legend'), headline: box('table.headline'),
    forest: box('#forest-plot'), forest_figure: box('figure.forest'), overflowing,
    order: [...document.querySelectorAll('section[id], details[id]')].map(e => e.id),
    open: [...document.querySelectorAll('details')].filter(d => d.open).map(d => d.id),
    dom_content_loaded_ms: nav.domContentLoadedEventEnd, load_ms: nav.loadEventStart,
    first_contentful_paint_ms: paint['first-contentful-paint'] ?? null,
    images: document.images.length});
  document.body.appendChild(pre);
}, 0));
</script>"""


def chromium(args: list[str], profile: Path, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess:
    """Run headless Chromium with flags that keep it offline and stateless."""
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout)


def probe(html: Path, scratch: Path, size: tuple[int, int] = FIRST_SCREEN) -> dict:
    """The probe's record of ``html`` opened at ``size`` (a copy with the probe script goes to ``scratch``)."""
    copy = scratch / "probe.html"
    copy.write_text(html.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    res = chromium([f"--window-size={size[0]},{size[1]}", "--dump-dom", copy.as_uri()], scratch / "profile-probe")
    m = re.search(r'<pre id="layout-probe">(.*?)</pre>', res.stdout, flags=re.S)
    if not m:
        raise RuntimeError("no layout probe in the DOM: " + res.stderr[-2000:])
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


def screenshot(html: Path, shot: Path, scratch: Path, size: tuple[int, int] = FIRST_SCREEN) -> float:
    """Write a screenshot of ``html`` at ``size`` to ``shot``; returns the browser's wall seconds (start-up
    included)."""
    t0 = time.perf_counter()
    chromium([f"--screenshot={shot}", f"--window-size={size[0]},{size[1]}", html.resolve().as_uri()],
             scratch / "profile-shot")
    return time.perf_counter() - t0
