"""The results of a run as one tidy pandas table: ``bnmem.results.load(run_dir)``.

One row per measured number (cell, replicate, lens, norm, seed or target model,
subset, metric, epoch, value) with the cell's conditions as columns; every
column is documented in docs/results.md. ``bnmem export RUN`` writes the same
table as CSV or parquet.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bnmem.report.tidy import COLUMNS

if TYPE_CHECKING:
    import pandas

__all__ = ["COLUMNS", "load"]


def load(run_dir: str | Path, progress: bool = True) -> "pandas.DataFrame":
    """The tidy table of a study, lens or folder-of-lenses run directory.

    ``progress``: a bar over the study's cells on stderr while their results files are read.

    Raises:
        BnmemError: ``run_dir`` is not a directory or holds no bnmem results.
    """
    from bnmem.report.tidy import load as _load

    return _load(run_dir, progress)
