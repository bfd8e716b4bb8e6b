"""Plain fixed-width text tables, for the summaries commands print."""

from __future__ import annotations


def fmt(v: float | None, digits: int = 3) -> str:
    """A number with ``digits`` decimals; '-' for a missing one."""
    return "-" if v is None else f"{v:.{digits}f}"


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain fixed-width text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def count_text(n: int) -> str:
    """A count in sensible units: 950, 24k, 6.4k, 11.2M, 1.3G."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            v = n / div
            text = f"{v:.1f}" if v < 100 else f"{v:.0f}"
            return text.removesuffix(".0") + unit
    return str(n)
