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
