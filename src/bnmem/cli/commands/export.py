"""``bnmem export RUN``: the run's results as one tidy table (CSV or parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bnmem.cli.app import Quiet, app

RunDir = Annotated[Path, typer.Argument(help="a study run directory (with index.json) or one lens's run directory")]
Format = Annotated[str, typer.Option("--format", help="csv, or parquet (needs pyarrow: the parquet extra of bnmem)")]
ExportOut = Annotated[Optional[Path], typer.Option("--out", help="file to write (default: RUN_DIR/results.<format>)")]


FORMATS = ("csv", "parquet")
# Where the table goes without --out, per format (inside the run directory).
DEFAULT_FILES = {"csv": "results.csv", "parquet": "results.parquet"}


def check_format(fmt: str) -> None:
    """Raise BnmemError unless ``fmt`` is one of :data:`FORMATS`."""
    if fmt not in FORMATS:
        from bnmem.errors import BnmemError

        raise BnmemError(f"--format {fmt!r}: expected csv or parquet")


def table_bytes(df, fmt: str) -> bytes:
    """The DataFrame as CSV (UTF-8, no index) or parquet bytes."""
    from bnmem.errors import BnmemError

    check_format(fmt)
    if fmt == "csv":
        return df.to_csv(index=False, lineterminator="\n").encode("utf-8")
    import io as _io  # parquet, the only other format

    try:
        import pyarrow  # noqa: F401
    except ImportError as e:
        raise BnmemError("--format parquet needs pyarrow: pip install 'bnmem[parquet]'") from e
    buf = _io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


@app.command()
def export(run_dir: RunDir, format: Format = "csv", out: ExportOut = None,  # noqa: A002 - the flag
           quiet: Quiet = False) -> None:
    """Write every per-seed / per-target number of a run as one tidy table (columns: docs/results.md)."""
    from bnmem import io
    from bnmem.results import load

    check_format(format)  # before the slow load
    df = load(run_dir, progress=not quiet)
    path = out or Path(run_dir) / DEFAULT_FILES[format]
    io.write_bytes(path, table_bytes(df, format))
    typer.echo(f"{path}: {len(df)} rows, {len(df.columns)} columns ({', '.join(df.columns)})")
