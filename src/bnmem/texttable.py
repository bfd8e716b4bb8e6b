"""Plain fixed-width text tables, for the summaries commands print (numbers: :mod:`bnmem.formatting`)."""

from __future__ import annotations


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain fixed-width text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
