"""save_figure's one-draw PNG path shows what ``savefig(bbox_inches="tight")`` shows (the oracle), and the
ROC panels' fixed log ticks are the decades of the panel."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure
from PIL import Image

from bnmem.figures.save import _tight_png, save_figure


def _figure(suptitle_y: float = 0.98) -> Figure:
    fig = Figure(figsize=(5, 3))
    for i in range(2):
        ax = fig.add_subplot(1, 2, i + 1)
        ax.plot(np.linspace(0, 1, 50), np.linspace(0, 1, 50) ** (i + 1), label=f"curve {i}")
        ax.set(xlabel="x label", ylabel="y label", title=f"panel {i}")
        ax.legend()
    fig.suptitle("a title", y=suptitle_y)
    fig.tight_layout()
    return fig


def _oracle(fig: Figure, dpi: int) -> np.ndarray:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    buf.seek(0)
    return np.asarray(Image.open(buf).convert("L"), dtype=np.float64)


def _ink_box(grey: np.ndarray) -> tuple[int, int, int, int]:
    """Rows and columns of the first and last non-white pixel."""
    rows, cols = np.nonzero(grey < 250)
    return rows.min(), rows.max(), cols.min(), cols.max()


def test_one_draw_png_matches_savefig_tight():
    fig = _figure()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    ours = np.asarray(Image.open(io.BytesIO(_tight_png(fig, 88))).convert("L"), dtype=np.float64)
    ref = _oracle(_figure(), 88)
    assert ours.shape == ref.shape  # the same image size as savefig's
    # The same ink at the same place, up to a pixel of sub-pixel shift.
    assert all(abs(a - b) <= 1 for a, b in zip(_ink_box(ours), _ink_box(ref)))
    h, w = min(ours.shape[0], ref.shape[0]), min(ours.shape[1], ref.shape[1])
    ink_ours, ink_ref = (ours[:h, :w] < 128).sum(), (ref[:h, :w] < 128).sum()
    assert abs(ink_ours - ink_ref) <= 0.05 * ink_ref


def test_content_outside_the_figure_falls_back_to_savefig(tmp_path):
    fig = _figure(suptitle_y=1.15)  # the title above the canvas: only savefig can grow the image
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    assert not isinstance(_tight_png(fig, 88), bytes)
    save_figure(fig, tmp_path / "f.png", dpi=88)
    saved = np.asarray(Image.open(tmp_path / "f.png").convert("L"), dtype=np.float64)
    assert saved.shape == _oracle(_figure(suptitle_y=1.15), 88).shape


def test_roc_panels_tick_every_decade_and_nothing_else():
    from bnmem.figures.roc import DECADES, _draw_panel

    fig = Figure()
    ax = fig.add_subplot(1, 1, 1)
    _draw_panel(ax, {"a": ([0.0, 1e-3, 1.0], [0.0, 1e-2, 1.0])}, "t")
    for axis in (ax.xaxis, ax.yaxis):
        assert axis.get_scale() == "log"
        np.testing.assert_array_equal(axis.get_majorticklocs(), DECADES)
        assert len(axis.get_minorticklocs()) == 0
    np.testing.assert_allclose(DECADES, [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0])


def test_a_constrained_layout_figure_is_saved_as_savefig_saves_it(tmp_path):
    def make() -> Figure:
        fig = Figure(figsize=(5, 3), layout="constrained")
        for i in range(2):
            fig.add_subplot(1, 2, i + 1).set(xlabel="x label", title=f"panel {i}")
        return fig

    save_figure(make(), tmp_path / "c.png", dpi=88)
    saved = np.asarray(Image.open(tmp_path / "c.png").convert("L"), dtype=np.float64)
    assert saved.shape == _oracle(make(), 88).shape


def _busy_figure(dpi: int) -> Figure:
    """Log and linear axes, shared y, a twin axis, mathtext tick labels, a suptitle: what the lens figures use."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(7, 3), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3, sharey=True)
    x = np.geomspace(1e-4, 10, 60)
    for i, ax in enumerate(axes):
        ax.step(x, np.linspace(0, 1, 60) ** (i + 1), where="post", label=f"curve {i}")
        ax.set(title=f"panel {i}", xlabel="‖∇θ loss_i‖₂")
        ax.grid(alpha=0.3)
    axes[0].set_xscale("log")
    axes[1].loglog(x, x)
    axes[2].twinx().plot([0, 1], [3, 5], "--")
    axes[0].legend(fontsize=7)
    fig.suptitle("a title")
    return fig


def _laid_out_and_drawn(fig: Figure, once: bool) -> tuple[np.ndarray, np.ndarray]:
    """tight_layout, the tight box and the rendering of ``fig``, with or without ticks placed once per pass."""
    import contextlib

    from bnmem.figures.save import ticks_placed_once

    block = ticks_placed_once if once else (lambda fig: contextlib.nullcontext())
    with block(fig):
        fig.tight_layout()
    with block(fig):
        box = fig.get_tightbbox(fig.canvas.get_renderer()).extents
        fig.canvas.draw()
    return box, np.array(fig.canvas.buffer_rgba())


def test_ticks_placed_once_lay_out_and_draw_what_matplotlib_does():
    """The oracle: matplotlib placing every axis's ticks at every measurement. Same layout, box and pixels."""
    box_ref, px_ref = _laid_out_and_drawn(_busy_figure(88), once=False)
    box, px = _laid_out_and_drawn(_busy_figure(88), once=True)
    np.testing.assert_array_equal(box, box_ref)
    np.testing.assert_array_equal(px, px_ref)


def test_ticks_placed_once_places_each_axis_once_and_forgets_on_exit(monkeypatch):
    import matplotlib.axis

    from bnmem.figures.save import ticks_placed_once

    calls = []
    original = matplotlib.axis.Axis._update_ticks
    monkeypatch.setattr(matplotlib.axis.Axis, "_update_ticks", lambda self: calls.append(self) or original(self))
    fig = _busy_figure(88)
    with ticks_placed_once(fig):
        fig.tight_layout()
    n_axes = 2 * len(fig.get_axes())
    assert 0 < len(calls) <= n_axes and len(set(map(id, calls))) == len(calls)
    placed = len(calls)
    ax = fig.get_axes()[1]
    ax.set_xlim(1, 2)  # after the block, every placement is matplotlib's again: a change is seen
    ax.xaxis._update_ticks()
    ax.xaxis._update_ticks()
    assert len(calls) == placed + 2
    assert not any("_update_ticks" in vars(axis) for a in fig.get_axes() for axis in (a.xaxis, a.yaxis))


def test_tight_layout_lays_out_at_the_saving_dpi():
    from bnmem.figures.save import FIGURE_DPI, tight_layout

    ref = _busy_figure(FIGURE_DPI)
    ref.tight_layout()
    fig = _busy_figure(100)  # matplotlib's default dpi
    tight_layout(fig)
    assert fig.dpi == FIGURE_DPI
    assert vars(fig.subplotpars) == vars(ref.subplotpars)
