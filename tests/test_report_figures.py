"""The report's figure captions describe the figures the lenses draw: each fixed-layout figure is drawn
here on small inputs, its panel grid read from the figure itself, and the caption must name that grid.
Clean data (no corrupted subset) draws no empty memorization panel."""

from __future__ import annotations

import numpy as np
import pytest

from bnmem.names import GAMMA_SIGMA, MEMORIZE, MITIGATE, THEORY
from bnmem.report import views
from bnmem.report.views import layout_words, view_of

# The panel grid each fixed-layout figure's caption (its lens's report view) describes.
FIGURE_LAYOUTS = {MEMORIZE: views.MEMORIZE_LAYOUT, GAMMA_SIGMA: views.GAMMA_SIGMA_LAYOUT,
                  THEORY: views.THEORY_LAYOUT, MITIGATE: views.MITIGATE_LAYOUT}


def grid(fig) -> tuple[int, int]:
    """(rows, columns) of the figure's panels; twin axes share their host's cell."""
    cells = {(s.rowspan.start, s.colspan.start) for ax in fig.axes if (s := ax.get_subplotspec()) is not None}
    geometry = {ax.get_subplotspec().get_gridspec().get_geometry() for ax in fig.axes}
    assert len(geometry) == 1
    rows, cols = geometry.pop()
    assert len(cells) == rows * cols  # no empty cell in the grid
    return rows, cols


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plotting functions save, captured instead of written."""
    figs = []
    import bnmem.figures.memorization as mem
    import bnmem.figures.privacy_utility as pu
    import bnmem.figures.save as save
    import bnmem.figures.theory as th

    for module in (mem, pu, th, save):
        monkeypatch.setattr(module, "save_figure", lambda fig, path, dpi=110: figs.append(fig))
    return figs


def caption(kind: str) -> str:
    return view_of(kind).caption


def memorize_metrics(corrupted: bool) -> dict:
    curve = [0.1, 0.5, 0.9]
    seed = {"noisy_acc": curve if corrupted else [None] * 3, "ood_acc": [None] * 3, "test_acc": curve,
            "clean_acc": curve}
    return {norm: {"per_seed": {"0": seed, "1": seed}} for norm in ("batch", "none")}


def test_memorization_caption_and_panels(drawn, tmp_path):
    from bnmem.figures.memorization import plot_memorization

    plot_memorization(memorize_metrics(True), tmp_path / "m.png")
    plot_memorization(memorize_metrics(False), tmp_path / "c.png")
    corrupted, clean = drawn
    assert grid(corrupted) == FIGURE_LAYOUTS[MEMORIZE]
    assert caption(MEMORIZE).startswith(layout_words(*grid(corrupted)))
    assert grid(clean) == (1, 1)  # clean data: the accuracy panel only
    assert [ax.get_title() for ax in clean.axes] == ["clean train / test accuracy (clean data: no corrupted subset)"]
    assert "only the right panel" in caption(MEMORIZE)


def test_gamma_sigma_caption_and_panels(monkeypatch, drawn, tmp_path):
    from bnmem.figures.gamma_sigma import plot_gamma_sigma

    layers, epochs = ["norm1", "norm2"], [1, 2]
    curve = {"median_ratio": [1.1, 1.3], "frac_above_1": [0.6, 0.7]}
    result = {"layers": layers, "epochs": epochs,
              "curves": {m: {lay: curve for lay in layers} for m in ("running", "batch")},
              "per_seed": {"0": {"final": {"running": {"layers": {lay: {"ratio": [0.9, 1.2, 1.4]} for lay in layers}}}}}}
    plot_gamma_sigma(result, tmp_path / "g.png")
    assert grid(drawn[0]) == FIGURE_LAYOUTS[GAMMA_SIGMA]
    assert caption(GAMMA_SIGMA).startswith(layout_words(*FIGURE_LAYOUTS[GAMMA_SIGMA]))


def mitigate_result(corrupted: bool, lira: bool) -> dict:
    def stat(v):
        return {"mean": v, "min": v, "max": v}

    out = {"variants": ["batch", "batch+gs1", "none"], "conditions": {"fixed_epoch": 2, "lira_models": 4},
           "selection": {"variant": "batch+gs1"}}
    for n, norm, lam in (("batch", "batch", 0.0), ("batch+gs1", "batch", 1.0), ("none", "none", 0.0)):
        mem = 0.5 if corrupted else None
        v = {"norm": norm, "gs_reg": lam, "mean": {"noisy_acc": [mem, mem, mem]},
             "fixed_epoch": {"test_acc": stat(0.9), "noisy_acc": stat(mem)},
             "final": {"test_acc": stat(0.9), "noisy_acc": stat(mem)}}
        if lira:
            v["lira"] = {"attacks": {"online": {"all": {"auc": 0.6}}, "rmia": {"all": {"auc": 0.58}}}}
        out[n] = v
    return out


def test_mitigate_caption_and_panels(drawn, tmp_path):
    from bnmem.figures.privacy_utility import plot_privacy_utility

    for corrupted, lira in ((True, True), (True, False), (False, True)):
        plot_privacy_utility(mitigate_result(corrupted, lira), tmp_path / "p.png", "noisy_acc")
    full, no_lira, clean = (grid(f) for f in drawn)
    assert full == FIGURE_LAYOUTS[MITIGATE] and caption(MITIGATE).startswith(layout_words(*full))
    assert no_lira == (1, 2) and "(two without LiRA)" in caption(MITIGATE)
    assert clean == (1, 1) and "the two memorization panels are left out" in caption(MITIGATE)


def test_theory_caption_and_panels(drawn, tmp_path):
    from bnmem.theory import TheoryConfig, run_theory

    run_theory(TheoryConfig(steps=12, counterfactual_seeds=2), tmp_path)
    fig = drawn[-1]
    assert grid(fig) == FIGURE_LAYOUTS[THEORY]
    text = caption(THEORY)
    assert text.startswith(layout_words(*grid(fig)))
    # every panel's subject is described: the two claim-5b panels by name
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == np.prod(FIGURE_LAYOUTS[THEORY])
    assert text.count("claim 5b") == sum("claim 5b" in t for t in titles) == 2
    assert "Top row" in text and "Bottom row" in text


def test_claim_display_units_and_ranges():
    """Claim 3 reads in AUC points as the paper states it; a fraction's interval stays inside [0, 1] on the page
    and in the forest plot; the numbers behind them (summary.csv) keep the plan's unit."""
    import math

    from bnmem.analysis_plan import DIRECTION_ONLY, INCONCLUSIVE, REPRODUCED
    from bnmem.report.claims.core import Evaluation, new_claim
    from bnmem.report.forest import claim_rows, split_verdicts

    c3 = new_claim("3a", "lira", "{:+.1f}", scale=100, suffix="points")
    c3.evaluations.append(Evaluation("digits (3 replicates): batch − none", 0.125, 0.081, 0.169, REPRODUCED))
    assert c3.fmt(0.125) == "+12.5 points"
    assert c3.effect_text(0.125, 0.081, 0.169) == "+12.5 [+8.1, +16.9] points"
    assert c3.row()["effect"] == 0.125  # summary.csv: AUC units
    row = claim_rows(c3)[0]
    assert (row.value, row.low, row.high) == pytest.approx((12.5, 8.1, 16.9))
    c4 = new_claim("4", "gamma_sigma", "{:.2f}", bounds=(0.0, 1.0))
    c4.evaluations.append(Evaluation("digits (3 replicates)", 0.75, -0.21, 1.71, INCONCLUSIVE))
    assert c4.ci_text(-0.21, 1.71) == "[0.00, 1.00]"
    assert c4.row()["ci_low"] == -0.21  # the computed interval is kept; only its display is clipped
    row = claim_rows(c4)[0]
    assert (row.low, row.high) == (0.0, 1.0)
    # a split claim's per-setting text (the headline's and summary.md's cell) clips too: claim 6's cut is at most all
    c6 = new_claim("6", "mitigate", "{:.0%}", bounds=(-math.inf, 1.0))
    c6.evaluations += [Evaluation("digits · flipped labels (3 replicates)", 0.76, 0.47, 1.05, DIRECTION_ONLY),
                       Evaluation("digits · OOD inputs (3 replicates)", 0.9, 0.8, 0.97, REPRODUCED)]
    split = split_verdicts(c6, compact=True)
    assert "76% [47%, 100%]" in split and "105%" not in split, split


def _rgba_plot_png(tmp_path) -> bytes:
    """A 32-bit PNG of a line plot, as an older bnmem wrote them (matplotlib's own savefig at 110 dpi)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    x = np.linspace(0, 10, 400)
    for k, c in enumerate(("tab:red", "tab:blue", "tab:green")):
        ax.plot(x, np.sin(x + k), color=c, label=str(k))
        ax.fill_between(x, np.sin(x + k) - 0.2, np.sin(x + k) + 0.2, color=c, alpha=0.15)
    ax.legend()
    fig.savefig(tmp_path / "old.png", dpi=110)
    plt.close(fig)
    return (tmp_path / "old.png").read_bytes()


def test_compact_png_keeps_the_picture_in_fewer_bytes(tmp_path):
    """The palette PNG decodes to nearly the same pixels (oracle: the original, pixel by pixel), is smaller,
    deterministic, and left alone when it already is a palette PNG; a scale shrinks it by that factor."""
    import io

    from PIL import Image

    from bnmem.figures.save import PALETTE_COLORS, compact_png

    old = _rgba_plot_png(tmp_path)
    new = compact_png(old)
    assert new == compact_png(old) and len(new) < len(old) / 2
    a = np.asarray(Image.open(io.BytesIO(old)).convert("RGB"), dtype=float)
    im = Image.open(io.BytesIO(new))
    assert im.mode == "P" and len(im.getcolors()) <= PALETTE_COLORS
    b = np.asarray(im.convert("RGB"), dtype=float)
    assert a.shape == b.shape and np.abs(a - b).mean() < 2.0 and np.abs(a - b).max() < 80
    assert compact_png(new) == new
    small = Image.open(io.BytesIO(compact_png(old, scale=0.8)))
    assert small.size == (round(a.shape[1] * 0.8), round(a.shape[0] * 0.8))


def test_report_embeds_each_distinct_figure_once(tmp_path):
    """Two lens folders holding the same figure: the page embeds it once and links the second to it."""
    from bnmem.report.html import Embedder

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "fig.png").write_bytes(_rgba_plot_png(tmp_path))
    embed = Embedder()
    first, _ = embed.figure(tmp_path / "a" / "fig.png", "fig-a", "a", "fig.png")
    second, _ = embed.figure(tmp_path / "b" / "fig.png", "fig-b", "b", "fig.png")
    assert first.count("data:image/png;base64,") == 1 and 'id="fig-a"' in first
    assert "data:image" not in second and 'href="#fig-a"' in second
    assert embed.figure(tmp_path / "missing.png", "x", "x", "x") is None


def _forest_boxes(ncols: int):
    """The demo's forest plot (tests/data/demo_first_screen.json) drawn in ``ncols`` columns: (figure width px,
    legend box, every panel's box with its tick and axis labels, every title's box)."""
    import copy

    import first_screen_fixture
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from bnmem.figures.forest import forest_figure
    from bnmem.report.forest import STATUS_COLORS, shared_replicates

    panels = copy.deepcopy(first_screen_fixture.load()["panels"])
    note = shared_replicates(panels)
    fig = forest_figure(panels, STATUS_COLORS, ncols=ncols, note=note)
    renderer = FigureCanvasAgg(fig).get_renderer()
    return (fig.bbox.width, fig.legends[0].get_window_extent(renderer),
            [ax.get_tightbbox(renderer) for ax in fig.axes], [t.get_window_extent(renderer) for t in fig.texts])


def test_forest_legend_sits_in_free_room_without_covering_a_panel():
    """In the report's five columns the demo's legend goes under the column of panels with the most room, inside
    that column and over no panel, tick label or title; in one column there is no such room and it goes under
    every panel."""
    width, legend, axes, titles = _forest_boxes(5)
    col = width / 5
    k = int(legend.x0 // col)
    assert legend.x1 <= (k + 1) * col  # inside one column
    assert legend.y0 < 0.05 * legend.height + 5  # at the bottom of the figure
    assert not any(legend.overlaps(box) for box in axes + titles)
    width, legend, axes, _ = _forest_boxes(1)
    assert legend.y1 <= min(box.y0 for box in axes) + 1 and legend.width > width / 2  # one row under the panels
