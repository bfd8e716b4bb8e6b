"""Numbers as text: the one formatter for the tables commands print, the report and the audit.

A missing number (None, NaN, ±inf, or anything that is not a number) prints as
``missing``: :data:`DASH` in the plain-text tables commands print (the default),
:data:`EM_DASH` in the HTML and markdown report.
"""

from __future__ import annotations

import math
from typing import Any

DASH = "-"  # a missing number in the plain-text tables commands print
EM_DASH = "—"  # a missing number in the HTML / markdown report


def finite(v: Any) -> float | None:
    """``v`` as a float, or None for None, NaN, ±inf and non-numbers (JSON results hold all of them)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def fmt(v: Any, spec: str = ".3f", *, missing: str = DASH) -> str:
    """``v`` in the format ``spec`` (``".3f"``, ``".4g"``, ``"+.3f"``...), or ``missing``."""
    f = finite(v)
    return missing if f is None else format(f, spec)


def pct(v: Any, digits: int = 1, *, suffix: str = "%", missing: str = DASH) -> str:
    """A fraction as a percentage with ``digits`` decimals (0.123 → '12.3%'), or ``missing``.

    ``suffix=""`` leaves the '%' out (a column whose header says the unit).
    """
    f = finite(v)
    return missing if f is None else f"{100 * f:.{digits}f}{suffix}"


def interval(mean: Any, low: Any, high: Any, spec: str = ".3f", *, scale: float = 1.0,
             missing: str = DASH) -> str:
    """'mean [low, high]', each number times ``scale`` in the format ``spec``.

    ``missing`` alone when the mean is missing; a missing bound prints as ``missing`` in its place.
    """
    if finite(mean) is None:
        return missing
    scaled = [None if finite(v) is None else scale * v for v in (mean, low, high)]
    m, lo, hi = (fmt(v, spec, missing=missing) for v in scaled)
    return f"{m} [{lo}, {hi}]"


def mean_pm(s: dict[str, Any] | None, digits: int = 3, *, scale: float = 1.0, missing: str = DASH) -> str:
    """A summary ``{"mean", "ci"}`` as 'mean ±half-width of ci' (just the mean without a ci), or ``missing``."""
    if s is None or finite(s.get("mean")) is None:
        return missing
    text = f"{scale * s['mean']:.{digits}f}"
    if s.get("ci"):
        text += f" ±{scale * (s['ci'][1] - s['ci'][0]) / 2:.{digits}f}"
    return text


def eps_value(v: Any, digits: int = 2, *, missing: str = DASH) -> str:
    """A privacy ε with ``digits`` decimals, except where that would misread it: a positive ε that rounds to
    zero in two significant digits (0.0032, 1e-07; never '0.00', which reads as no leakage at all), an
    infinite one as '∞' (no guarantee); ``missing`` for None and NaN."""
    f = finite(v)
    if f is None:
        try:
            return "∞" if float(v) == math.inf else missing
        except (TypeError, ValueError):
            return missing
    text = format(f, f".{digits}f")
    return format(f, ".2g") if f > 0 and float(text) == 0 else text


def count_text(n: int) -> str:
    """A count in sensible units: 950, 24k, 6.4k, 11.2M, 1.3G."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            v = n / div
            text = f"{v:.1f}" if v < 100 else f"{v:.0f}"
            return text.removesuffix(".0") + unit
    return str(n)
