"""Studies: one YAML file -> a grid of cells -> jobs -> one run directory (see :mod:`bnmem.study.run` and :mod:`bnmem.study.execute`)."""

from bnmem.study.execute import StudyResult, run_study
from bnmem.study.run import Cell, Job, expand_grid, index_doc, load_study, build_jobs, read_study
from bnmem.study.schema import Study

__all__ = ["Cell", "Job", "Study", "StudyResult", "expand_grid", "index_doc", "load_study", "build_jobs", "read_study",
           "run_study"]
