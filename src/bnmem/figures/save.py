"""The one way a figure is written: atomically, format from the file suffix, then closed.

PNGs are written as 64-colour palette images: line plots use few colours, so the
palette keeps them sharp at about a quarter of the bytes of a 32-bit PNG (the
report embeds every figure, and its size is what a reader downloads).
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from bnmem.io import write_bytes  # noqa: E402

NORM_COLORS = {"batch": "tab:red", "none": "tab:blue", "group": "tab:green", "layer": "tab:purple"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PALETTE_COLORS = 64  # a plot's line colours and their anti-aliased edges; 256 adds bytes, nothing visible
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
        rgb = im.convert("RGBA")
        if rgb.getextrema()[3][0] == 255:  # opaque: quantize RGB (the octree's RGBA path is slower)
            rgb = rgb.convert("RGB")
        if scale < 1:
            size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
            rgb = rgb.resize(size, Image.Resampling.BOX)
        pal = rgb.quantize(colors=PALETTE_COLORS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    buf = BytesIO()
    pal.save(buf, format="PNG", optimize=True)
    out = buf.getvalue()
    return out if len(out) < len(data) else data


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
    buf = BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
    data = compact_png(buf.getvalue()) if fmt == "png" else buf.getvalue()
    write_bytes(path, data)  # atomically
    if plt.fignum_exists(getattr(fig, "number", -1)):
        plt.close(fig)
