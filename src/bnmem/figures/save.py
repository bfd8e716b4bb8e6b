"""The one way a figure is written: atomically, format from the file suffix, then closed.

PNGs are written as 256-colour palette images: line plots use few colours, so the
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
PALETTE_COLORS = 256


def compact_png(data: bytes) -> bytes:
    """``data`` (a PNG) as a palette PNG of at most 256 colours, or ``data`` itself when it already is one or
    the palette version is not smaller.

    Fast octree quantization without dithering: a plot's flat colours and anti-aliased edges stay clean.
    Deterministic (same bytes in, same bytes out).
    """
    from PIL import Image

    with Image.open(BytesIO(data)) as im:
        if im.mode in ("P", "L", "1"):
            return data
        rgb = im.convert("RGBA")
        if rgb.getextrema()[3][0] == 255:  # opaque: quantize RGB (the octree's RGBA path is slower)
            rgb = rgb.convert("RGB")
        pal = rgb.quantize(colors=PALETTE_COLORS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    buf = BytesIO()
    pal.save(buf, format="PNG", compress_level=9)
    out = buf.getvalue()
    return out if len(out) < len(data) else data


def save_figure(fig: Figure, path: str | Path, dpi: int = 110) -> None:
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
