"""Statements in README.md, docs/ and studies/ that are not flags or quoted numbers, checked against the code:
counts of layers, arithmetic quoted from an interval, the file names a run writes and the columns of its tables.

Each check reads the code's own declaration (a model's modules, a module's file-name constants, the tidy table's
``COLUMNS``, summary.csv's ``CSV_COLUMNS``) and fails with the doc and line of the statement that disagrees.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _lines(paths: list[Path]):
    for path in paths:
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            yield f"{path.relative_to(ROOT)}:{no}", line


def test_bn_layer_counts_the_docs_give_are_the_models():
    """'ResNet-20 (21 BN layers' / 'LeNet (4 BN layers)': what gamma_sigma_stats measures in the package's model."""
    import torch

    from bnmem.models import build_model

    named = {"ResNet-20": "resnet20", "LeNet": "lenet"}
    pattern = re.compile(r"(ResNet-20|LeNet) \((\d+) BN layers")
    found = []
    for where, line in _lines([*DOCS, *sorted((ROOT / "studies").glob("*.yaml"))]):
        for name, n in pattern.findall(line):
            model = build_model(named[name], (1, 8, 8), 10, "batch")
            count = sum(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
            found.append(where)
            assert int(n) == count, f"{where}: {name} has {count} BN layers, the text says {n}"
    assert found, "no BN layer count found in the docs (the check would check nothing)"


def test_5b_standard_errors_follow_from_the_interval_the_plan_quotes():
    """The plan's '0.015 [−0.023, 0.054] over 5 seeds, about N standard errors below 1': N recomputed from the
    interval (a 95% t-interval over 5 seeds)."""
    from scipy.stats import t

    from bnmem.analysis_plan import render_markdown

    text = render_markdown()
    m = re.search(r"0\.015 \[−0\.023, 0\.054\] over 5 seeds, about (\d+) standard errors below 1", text)
    assert m, "the plan no longer quotes 5b's plan-3.0 slope as this test reads it"
    se = (0.054 - -0.023) / 2 / t.ppf(0.975, 4)
    assert int(m.group(1)) == round((1 - 0.015) / se)
    assert f"about {m.group(1)} standard errors below its prediction" in text  # the changelog says the same


def test_every_flag_a_command_help_names_is_that_commands():
    """An option's help that names --flag names one of the same command (defenses' --seeds help named --n-seeds,
    which a one-seed lens does not have)."""
    import typer

    import bnmem.cli
    from test_docs_flags import FLAG, bnmem_options

    options = bnmem_options()
    root = typer.main.get_command(bnmem.cli.app)
    bad = [f"bnmem {name} {' / '.join(p.opts)}: {flag}" for name, cmd in root.commands.items() for p in cmd.params
           for flag in FLAG.findall(getattr(p, "help", None) or "") if flag not in options[name]]
    assert bad == []


def test_executor_help_says_local_runs_worker_processes():
    """`--executor local` is not 'in this process' when --workers > 1 (bnmem run's default: one per core)."""
    import typer

    import bnmem.cli

    root = typer.main.get_command(bnmem.cli.app)
    for name in ("run", "lira"):
        (p,) = [p for p in root.commands[name].params if "--executor" in p.opts]
        assert "--workers processes" in p.help, (name, p.help)


# --- file names and columns the docs name, against the code's declarations (tests/docs_truth.py) ----------------

def test_every_file_name_the_docs_give_is_one_the_code_declares():
    from docs_truth import declared_files, undeclared_file_mentions

    assert undeclared_file_mentions(declared_files()) == []


def test_a_renamed_file_fails_naming_the_doc_and_line():
    """Plant a rename in the package's source (keep.npy -> keep_matrix.npy everywhere): the docs' mentions of
    keep.npy are reported with their doc and line."""
    from docs_truth import ROOT, SRC, declared_files, mentioned_files, undeclared_file_mentions

    sources = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8").replace('"keep.npy"', '"keep_matrix.npy"')
               for p in sorted(SRC.rglob("*.py"))}
    bad = undeclared_file_mentions(declared_files(sources))
    where = [w for w, name in mentioned_files() if name == "keep.npy"]
    assert where and bad == [f"{w}: keep.npy is not a file name the code writes or reads" for w in where]
    assert any(b.startswith("README.md:") for b in bad)


def test_summary_csv_columns_the_docs_list_are_the_codes():
    from docs_truth import ROOT, column_problems, column_table, summary_csv_item

    from bnmem.report.summary import CSV_COLUMNS

    assert column_problems(summary_csv_item(), CSV_COLUMNS, "summary.csv") == []
    power = column_table(ROOT / "docs" / "results.md", "power columns")
    assert len(power) >= 6 and column_problems(power, CSV_COLUMNS, "summary.csv", complete=False) == []


def test_tidy_columns_the_docs_list_and_read_are_the_codes():
    from docs_truth import ROOT, column_problems, column_table, dataframe_columns_read

    from bnmem.report.tidy import COLUMNS

    table = column_table(ROOT / "docs" / "results.md", "## Columns")
    assert column_problems(table, COLUMNS, "the tidy table") == []
    read = dataframe_columns_read()
    assert read and column_problems(read, COLUMNS, "the tidy table", complete=False) == []


def test_a_renamed_column_fails_naming_the_doc_and_line():
    """ci_low -> ci_lower in summary.csv, unit_id -> unit_index in the tidy table: each doc line naming the old
    name is reported, and the list that lacks the new one."""
    from docs_truth import ROOT, column_problems, column_table, dataframe_columns_read, summary_csv_item

    from bnmem.report.summary import CSV_COLUMNS
    from bnmem.report.tidy import COLUMNS

    renamed = [c.replace("ci_low", "ci_lower") for c in CSV_COLUMNS]
    bad = column_problems(summary_csv_item(), renamed, "summary.csv")
    assert any(re.fullmatch(r"README\.md:\d+: ci_low is not a column of summary\.csv", b) for b in bad), bad
    assert any(b.endswith("summary.csv's column ci_lower is not listed") for b in bad)
    tidy = [c.replace("unit_id", "unit_index") for c in COLUMNS]
    bad = column_problems(column_table(ROOT / "docs" / "results.md", "## Columns"), tidy, "the tidy table")
    bad += column_problems(dataframe_columns_read(), tidy, "the tidy table", complete=False)
    assert any(re.fullmatch(r"docs/results\.md:\d+: unit_id is not a column of the tidy table", b) for b in bad)
    assert any(re.fullmatch(r"README\.md:\d+: unit_id is not a column of the tidy table", b) for b in bad), bad


def test_the_mutation_section_counts_the_modules_make_mutate_mutates():
    """docs/testing.md says how many modules `make mutate` mutates: the length of `[tool.mutmut] only_mutate`."""
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]["only_mutate"]
    said = re.search(r"over the (\d+) modules that `only_mutate` lists", (ROOT / "docs" / "testing.md").read_text(
        encoding="utf-8"))
    assert said is not None and int(said[1]) == len(listed), (said and said[1], len(listed))
