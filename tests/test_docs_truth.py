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
