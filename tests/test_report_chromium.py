"""Render report.html once in headless Chromium: the page draws and the claim rows reach the DOM.

Needs Debian's ``chromium`` at /usr/bin/chromium (``apt-get install chromium``);
skipped without it. The browser gets every flag that keeps it offline and
stateless, so the test also shows the report needs nothing from a network.
"""

from __future__ import annotations

import numpy as np
import pytest

from bnmem.report.build import build_report

from chromium_probe import CHROMIUM, FIRST_SCREEN, chromium, probe, screenshot

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


def test_screenshot_is_not_blank(report, tmp_path):
    import matplotlib.image as mpimg

    rep, _ = report
    shot = tmp_path / "shot.png"
    res = chromium([f"--screenshot={shot}", "--window-size=1280,2000", rep.html.resolve().as_uri()],
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
    res = chromium(["--dump-dom", rep.html.resolve().as_uri()], tmp_path / "profile")
    dom = res.stdout
    assert "<table" in dom, res.stderr[-2000:]
    for claim in rep.claims:
        assert f'data-claim="{claim.id}" data-status="{claim.status}"' in dom
    assert dom.count('<tr class="claim"') == len(rep.claims)
    assert "data:image/png;base64," in dom


def test_first_screen_is_legend_headline_then_forest_and_details_are_folded(report, tmp_path):
    """At 1400x900 the status legend, every headline cell in full (no cell's text overflows its box or ends in
    an ellipsis) and the whole forest plot with its caption are on the first screen; the page goes headline,
    forest plot, lens figures, then the details (conditions, checklist...) closed."""
    import matplotlib.image as mpimg

    from bnmem.report.forest import STATUS_COLORS, forest_panels

    rep, _ = report
    layout = probe(rep.html, tmp_path)
    height = FIRST_SCREEN[1]  # the screenshot's height (the probe's window has browser chrome of its own)
    assert layout["legend"] and layout["legend"][1] <= layout["headline"][0] + 1  # legend above the headline
    assert layout["overflowing"] == []
    assert layout["headline"][1] <= layout["forest"][0] + 1  # headline above the forest plot
    assert 0 < layout["forest"][0] and layout["forest"][1] - layout["forest"][0] > 100
    assert layout["forest_figure"][1] <= height  # the plot and its caption end on the first screen
    order = layout["order"]
    first_lens = order.index("memorization")
    assert order.index("headline") < order.index("forest") < first_lens < order.index("details")
    for sid in ("conditions", "checklist", "robustness", "plan", "method"):
        assert order.index(sid) > order.index("details"), sid
    assert layout["open"] == []
    # the legend and the forest plot are drawn where the probe says: status colours inside their boxes
    shot = tmp_path / "first.png"
    screenshot(rep.html, shot, tmp_path)
    img = mpimg.imread(shot)[..., :3]
    assert img.shape[:2] == (900, 1400)
    top, bottom = int(layout["legend"][0]), int(layout["legend"][1])
    r, g, b = img[top:bottom, ..., 0], img[top:bottom, ..., 1], img[top:bottom, ..., 2]
    assert ((np.abs(r - g) > 0.15) | (np.abs(g - b) > 0.15)).mean() > 0.002  # the legend's coloured badges
    # every status the forest plot draws a row in has its colour inside the probe's forest box
    drawn = {row.status for panel in forest_panels(rep.claims) for row in panel.rows if row.value is not None}
    assert drawn  # the tiny run decides some claims (the toy-model checks at least)
    forest = img[int(layout["forest"][0]):int(layout["forest"][1])]
    for status in drawn:
        rgb = np.array([int(STATUS_COLORS[status][i:i + 2], 16) / 255 for i in (1, 3, 5)])
        assert (np.abs(forest - rgb).max(axis=2) < 0.08).sum() >= 20, status


@pytest.fixture(scope="module")
def demo_page(report, tmp_path_factory):
    """The report page whose first screen is drawn from the demo's headline rows, forest panels and statuses
    (tests/data/demo_first_screen.json, captured from a demo run by tests/first_screen_fixture.py): the demo's
    claims (all of the plan's) with their longest texts, which a tiny test run cannot reach; (page, scratch)."""
    import first_screen_fixture

    from bnmem.analysis_plan import PLAN
    from bnmem.report import headline, html
    from bnmem.report.build import build_report
    from bnmem.report.forest import draw_forest

    demo = first_screen_fixture.load()
    # a fixture captured under an older plan (other claims) is stale: regenerate it from a demo of this plan
    assert [h["id"] for h in demo["headline_rows"]] == list(PLAN) and any(h["split"] for h in demo["headline_rows"])
    scratch = tmp_path_factory.mktemp("demo-screen")

    def demo_forest(claims):
        return draw_forest(demo["panels"], scratch / "forest.png").read_bytes()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(headline, "headline_rows", lambda claims, state="": demo["headline_rows"])
        mp.setattr(headline, "forest_png", demo_forest)
        mp.setattr(html, "shown_statuses", lambda claims: set(demo["shown"]))
        page = build_report(report[1], scratch / "out").html
    assert page.read_text(encoding="utf-8").count('<tr class="headline"') == len(PLAN)
    return page, scratch


@pytest.fixture(scope="module")
def demo_layout(demo_page):
    """The probe's record of the demo page at 1400x900."""
    return probe(*demo_page)


def test_the_demos_headline_cells_fit(demo_layout):
    """At 1400x900 every headline cell of the demo shows in full (the longest statuses wrap inside their
    column), legend above the headline above the forest plot."""
    assert demo_layout["overflowing"] == []
    assert demo_layout["legend"][1] <= demo_layout["headline"][0] + 1 <= demo_layout["forest"][0] + 2


def test_the_demos_forest_plot_is_on_the_first_screen(demo_layout):
    """At 1400x900 the demo's whole headline and, under it, its whole forest plot with its caption are on the
    first screen."""
    assert demo_layout["headline"][1] <= demo_layout["forest"][0] + 1, (demo_layout["headline"], demo_layout["forest"])
    assert demo_layout["forest_figure"][1] <= FIRST_SCREEN[1], demo_layout["forest_figure"]


def test_the_demos_headline_reads_on_a_phone(demo_page, tmp_path):
    """In a phone-wide window (500 px, Chromium's narrowest) every headline cell of the demo still shows in full
    and the table stays inside the page: each claim is a block of labelled lines instead of ten squeezed
    columns (which cut the plan column's words)."""
    layout = probe(demo_page[0], tmp_path, size=(500, 1000))
    assert layout["viewport"][0] <= 520
    assert layout["overflowing"] == []
    assert layout["headline"][3] <= layout["viewport"][0]
