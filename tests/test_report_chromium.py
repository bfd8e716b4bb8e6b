"""Render report.html once in headless Chromium: the page draws and the claim rows reach the DOM.

Needs Debian's ``chromium`` at /usr/bin/chromium (``apt-get install chromium``);
skipped without it. The browser gets every flag that keeps it offline and
stateless, so the test also shows the report needs nothing from a network.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from waiting import HANG_GUARD_S

from bnmem.report.build import build_report

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.chromium,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A report of a real (tiny) memorize run and toy-model simulation."""
    from bnmem.config import DataConfig, TrainConfig
    from bnmem.lenses.memorize import MemorizeConfig, run_memorize
    from bnmem.theory import TheoryConfig, run_theory

    root = tmp_path_factory.mktemp("render")
    cfg = MemorizeConfig(data=DataConfig(dataset="digits", label_noise=0.1, train_size=200), norms=["batch", "none"],
                         seeds=[0, 1], train=TrainConfig(epochs=2, lr=0.05))
    run_memorize(cfg, root / "memorize", progress=False)
    run_theory(TheoryConfig(steps=20), root / "theory")
    return build_report(root), root


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_screenshot_is_not_blank(report, tmp_path):
    import matplotlib.image as mpimg

    rep, _ = report
    shot = tmp_path / "shot.png"
    res = _chromium([f"--screenshot={shot}", "--window-size=1280,2000", rep.html.resolve().as_uri()],
                    tmp_path / "profile")
    assert shot.exists(), res.stderr[-2000:]
    assert shot.stat().st_size > 20_000
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2000, 1280)
    gray = img[..., :3].mean(axis=2)
    assert gray.std() > 0.05  # text, tables and badges, not a blank page
    # the coloured status badges are drawn: some clearly green or red pixels
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    coloured = (np.abs(r - g) > 0.15) | (np.abs(g - b) > 0.15)
    assert coloured.mean() > 0.001


def test_rendered_dom_has_every_claim_row(report, tmp_path):
    rep, _ = report
    res = _chromium(["--dump-dom", rep.html.resolve().as_uri()], tmp_path / "profile")
    dom = res.stdout
    assert "<table" in dom, res.stderr[-2000:]
    for claim in rep.claims:
        assert f'data-claim="{claim.id}" data-status="{claim.status}"' in dom
    assert dom.count('<tr class="claim"') == len(rep.claims)
    assert "data:image/png;base64," in dom


LAYOUT_SCRIPT = """<script>
window.addEventListener('load', () => {
  const box = id => { const e = document.getElementById(id); if (!e) return null;
                      const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.width, r.height]; };
  const order = [...document.querySelectorAll('section[id], details[id]')].map(e => e.id);
  const open = [...document.querySelectorAll('details')].filter(d => d.open).map(d => d.id);
  const pre = document.createElement('pre'); pre.id = 'layout-probe';
  pre.textContent = JSON.stringify({headline: box('headline'), forest: box('forest-plot'), order, open,
                                    viewport: [innerWidth, innerHeight]});
  document.body.appendChild(pre);
});
</script>"""


def test_first_screen_is_headline_then_forest_and_details_are_folded(report, tmp_path):
    """At 1400x900 the headline and the whole forest plot are on the first screen; the page goes headline,
    forest plot, lens figures, then the details (conditions, checklist...) closed."""
    import json
    import re

    import matplotlib.image as mpimg

    rep, _ = report
    # A copy with a layout probe appended (the report itself has no scripts; test_report checks that).
    probe = tmp_path / "probe.html"
    probe.write_text(rep.html.read_text(encoding="utf-8").replace("</body>", LAYOUT_SCRIPT + "</body>"),
                     encoding="utf-8")
    res = _chromium(["--window-size=1400,900", "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                    tmp_path / "profile")
    m = re.search(r'<pre id="layout-probe">(.*?)</pre>', res.stdout, flags=re.S)
    assert m, res.stderr[-2000:]
    layout = json.loads(m.group(1).replace("&quot;", '"'))
    height = layout["viewport"][1]
    assert layout["headline"][1] <= layout["forest"][0] + 1  # headline above the forest plot
    assert 0 < layout["forest"][0] and layout["forest"][1] <= height and layout["forest"][3] > 100
    order = layout["order"]
    first_lens = order.index("memorization")
    assert order.index("headline") < order.index("forest") < first_lens < order.index("details")
    for sid in ("conditions", "checklist", "robustness", "plan", "method"):
        assert order.index(sid) > order.index("details"), sid
    assert layout["open"] == []
    # the forest plot is drawn where the probe says: status colours inside its box on the first screen
    shot = tmp_path / "first.png"
    _chromium([f"--screenshot={shot}", "--window-size=1400,900", rep.html.resolve().as_uri()], tmp_path / "p2")
    img = mpimg.imread(shot)[..., :3]
    assert img.shape[:2] == (900, 1400)
    top, bottom = int(layout["forest"][0]), int(layout["forest"][1])
    region = img[top:bottom]
    r, g, b = region[..., 0], region[..., 1], region[..., 2]
    assert ((np.abs(r - g) > 0.15) | (np.abs(g - b) > 0.15)).mean() > 0.002
