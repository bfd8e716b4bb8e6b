"""The one way a figure is written: atomically, format from the file suffix, then closed."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from bnmem.io import atomic_path  # noqa: E402

NORM_COLORS = {"batch": "tab:red", "none": "tab:blue", "group": "tab:green", "layer": "tab:purple"}


def save_figure(fig: Figure, path: str | Path, dpi: int = 110) -> None:
    """Save ``fig`` atomically (the format follows ``path``'s suffix; PNG by default) and release it.

    Figures made with ``pyplot`` are closed; figures made with ``Figure()`` directly
    (thread-safe, no global state) need no closing.
    """
    import matplotlib.pyplot as plt

    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    if fig.canvas is None or fig.canvas.__class__.__name__ == "FigureCanvasBase":
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    # The temporary name ends in .tmp, so the format must be given explicitly.
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight")
    if plt.fignum_exists(getattr(fig, "number", -1)):
        plt.close(fig)
