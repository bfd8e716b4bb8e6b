"""The one way a figure is written: atomically, format from the file suffix, then closed.

PNGs are written as 64-colour palette images: line plots use few colours, so the
palette keeps them sharp at about a quarter of the bytes of a 32-bit PNG (the
report embeds every figure, and its size is what a reader downloads). A PNG is drawn once: its tight box is
measured, the figure rendered and cropped to the box (``savefig(bbox_inches="tight")`` draws twice), at the
size savefig gives it; savefig is used where content lies outside the canvas or the format is not PNG.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any, Iterator

import matplotlib
import numpy as np

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.layout_engine import PlaceHolderLayoutEngine  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from bnmem.io import write_bytes  # noqa: E402

NORM_COLORS = {"batch": "tab:red", "none": "tab:blue", "group": "tab:green", "layer": "tab:purple"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PALETTE_COLORS = 64  # a plot's line colours and their anti-aliased edges; 256 adds bytes, nothing visible
# zlib level of the palette PNGs. Level 9 (PIL's optimize) took 3.6 s CPU to encode the demo's 55 lens figures,
# level 7 takes 0.7 s; the files grow 8.5% (1.54 -> 1.67 MB; measured on the demo's PNGs). The pixels are the same.
PNG_COMPRESS_LEVEL = 7
# Figures are written at 88 dpi (8-pt text is 10 px): a report page shows them at about that size, and the
# report embeds every one. Before, they were written at 110 dpi as 32-bit PNGs; the report re-encodes those
# at FIGURE_DPI / OLD_DPI of their size.
FIGURE_DPI = 88
OLD_DPI = 110


def compact_png(data: bytes, scale: float = 1.0) -> bytes:
    """``data`` (a PNG) as a palette PNG of at most :data:`PALETTE_COLORS` colours, or ``data`` itself when it
    already is one or the palette version is not smaller.

    Fast octree quantization without dithering: a plot's flat colours and anti-aliased edges stay clean.
    ``scale`` < 1 first shrinks an image that is not a palette PNG yet (box filter: each output pixel the
    mean of the pixels it covers). Deterministic (same bytes in, same bytes out).
    """
    from PIL import Image

    with Image.open(BytesIO(data)) as im:
        if im.mode in ("P", "L", "1"):
            return data
        out = _palette_png(im, scale)
    return out if len(out) < len(data) else data


def _palette_png(im: Any, scale: float = 1.0) -> bytes:
    """The PIL image ``im`` (RGB or RGBA) as palette PNG bytes (see :func:`compact_png`)."""
    from PIL import Image

    rgb = im.convert("RGBA")
    if rgb.getextrema()[3][0] == 255:  # opaque: quantize RGB (the octree's RGBA path is slower)
        rgb = rgb.convert("RGB")
    if scale < 1:
        size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
        rgb = rgb.resize(size, Image.Resampling.BOX)
    pal = rgb.quantize(colors=PALETTE_COLORS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    buf = BytesIO()
    pal.save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return buf.getvalue()


@contextmanager
def ticks_placed_once(fig: Figure) -> Iterator[None]:
    """Within the block, each axis of ``fig`` places its ticks once and reuses them.

    Matplotlib re-places an axis's ticks (locator, formatter, label texts) every time anything measures the
    axis: its tight box, its label's position, each spine's extent, the draw, several times per axis and pass.
    While nothing about the figure changes (one layout pass; the measure and the draw at one dpi) every
    placement gives the same ticks, so the first is kept. Per axis instance (an attribute that shadows the
    method), so other figures are untouched; removed on exit, after which the layout may change.
    """
    # A private matplotlib method: where a release lacks it, the ticks are placed as matplotlib places them.
    axes = [axis for ax in fig.get_axes() for axis in (ax.xaxis, ax.yaxis)
            if callable(getattr(axis, "_update_ticks", None))]
    for axis in axes:
        axis._update_ticks = _placed_once(axis._update_ticks)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for axis in axes:
            vars(axis).pop("_update_ticks", None)


def _placed_once(update: Any) -> Any:
    """``update`` (an axis's tick placement) called on the first call only; its ticks returned every time."""
    placed: list[Any] = []

    def once() -> Any:
        if not placed:
            placed.append(update())
        return placed[0]

    return once


def tight_layout(fig: Figure, dpi: int = FIGURE_DPI) -> None:
    """``fig.tight_layout()`` measured at ``dpi``, the resolution :func:`save_figure` draws ``fig`` at.

    Laid out at the saving dpi, the layout's measurements and the saved drawing share one renderer (its text
    and mathtext caches are per renderer; the figure's default 100 dpi would need a second one), and text is
    measured as it is drawn. Each axis places its ticks once for the pass (:func:`ticks_placed_once`).
    """
    fig.dpi = dpi
    with ticks_placed_once(fig):
        fig.tight_layout()


def _tight_png(fig: Figure, dpi: int) -> bytes | Bbox:
    """``fig`` drawn once at ``dpi`` and cropped to its tight bounding box, padded as ``savefig`` pads it (with
    the figure's background where the padding reaches past the canvas), as a palette PNG; when the box
    itself reaches outside the figure (a title placed above it), the padded box in inches, for ``savefig``
    to draw what lies there.

    ``savefig(bbox_inches="tight")`` draws the figure twice (once, without rendering, to measure; once to
    render); measuring the box directly and cropping the one rendering gives the same picture, up to a
    sub-pixel shift.
    """
    from matplotlib.colors import to_rgba
    from PIL import Image

    canvas = fig.canvas
    old_dpi = fig.dpi
    fig.dpi = dpi  # what savefig does for the time it draws
    try:
        # Measured before drawing, as tight_layout measures: a box outside the canvas costs no wasted draw.
        with ticks_placed_once(fig):  # the measure and the draw see the same figure at the same dpi
            box = fig.get_tightbbox(canvas.get_renderer())
            x0, y0, x1, y1 = (box.extents * dpi).tolist()
            width, height = fig.bbox.width, fig.bbox.height
            if x0 < 0 or y0 < 0 or x1 > width or y1 > height:
                return box.padded(matplotlib.rcParams["savefig.pad_inches"])
            canvas.draw()
        rgba = np.array(canvas.buffer_rgba())
    finally:
        fig.dpi = old_dpi
    height, width = rgba.shape[:2]
    pad = matplotlib.rcParams["savefig.pad_inches"] * dpi
    # savefig's canvas is the padded box truncated to whole pixels: the same size here, the same image size.
    left, bottom = math.floor(x0 - pad), height - math.floor(y0 - pad)
    right, top = left + int(x1 - x0 + 2 * pad), bottom - int(y1 - y0 + 2 * pad)
    background = np.round(np.array(to_rgba(fig.get_facecolor())) * 255).astype(np.uint8)
    out = np.empty((bottom - top, right - left, 4), np.uint8)
    out[...] = background
    src = rgba[max(top, 0):min(bottom, height), max(left, 0):min(right, width)]
    r0, c0 = max(top, 0) - top, max(left, 0) - left
    out[r0:r0 + src.shape[0], c0:c0 + src.shape[1]] = src
    return _palette_png(Image.fromarray(out))


def save_figure(fig: Figure, path: str | Path, dpi: int = FIGURE_DPI) -> None:
    """Save ``fig`` atomically (the format follows ``path``'s suffix; PNG by default, as a palette PNG) and
    release it.

    Figures made with ``pyplot`` are closed; figures made with ``Figure()`` directly
    (thread-safe, no global state) need no closing.
    """
    import matplotlib.pyplot as plt

    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    if fig.canvas is None or fig.canvas.__class__.__name__ == "FigureCanvasBase":
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    engine = fig.get_layout_engine()
    # A layout engine that runs at draw time (constrained) must run before the box is measured: savefig's way.
    laid_out = engine is None or isinstance(engine, PlaceHolderLayoutEngine)
    rgba = hasattr(fig.canvas, "buffer_rgba")  # an Agg canvas: its rendering can be cropped
    data = _tight_png(fig, dpi) if fmt == "png" and laid_out and rgba else "tight"
    if not isinstance(data, bytes):  # not a PNG, or content outside the canvas: data is the box to save
        if laid_out:
            # tight_layout leaves a placeholder engine, which makes savefig draw once more to measure; the box
            # is measured already, and the figure is released right after.
            fig.set_layout_engine(None)
        buf = BytesIO()
        fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches=data)
        data = compact_png(buf.getvalue()) if fmt == "png" else buf.getvalue()
    write_bytes(path, data)  # atomically
    if plt.fignum_exists(getattr(fig, "number", -1)):
        plt.close(fig)
