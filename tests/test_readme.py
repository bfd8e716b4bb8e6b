"""Every shell command and Python snippet of README.md runs, read from the README itself.

The blocks are extracted by ``tests/readme_blocks.py`` and run at tiny sizes: each command's sizes
are shrunk by :func:`shrink` (epochs, seeds, shadow models, training-set size; the demo study through
``--set``; a dry run's timed steps at a small batch), which changes how long it runs, not what it does.
A block that cannot run here is marked in the README with ``<!-- readme-test: skip REASON -->``;
:data:`MAX_SKIPPED` keeps that list short.
The "Extending bnmem" block runs in ``tests/test_extending.py``.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readme_blocks import README, Block, blocks, commands  # noqa: E402

ROOT = README.parent
MAX_SKIPPED = 5
LENS_COMMANDS = ("memorize", "lira", "gradnorms", "gamma-sigma", "mitigate")
# The demo study at tiny size (one replicate, two outlier settings, few epochs and models).
DEMO_SETS = ["train.epochs=2", "grid.replicates=1", "grid.seeds=[0]", "data.train_size=150",
             "grid.outliers=[{label_noise: 0.1}, {}]", "lenses.lira.shadow_models=6",  # matched_fit: >= 6
             "lenses.mitigate.lira_models=0", "lenses.mitigate.fixed_epoch=1", "lenses.mitigate.lambdas=[1.0]",
             "lenses.gradnorms.at=[1, 2]", "lenses.gradnorms.batch_subset=60", "lenses.theory.steps=20"]
DRY_RUN_BATCH = 8


def shrink(cmd: str) -> list[str]:
    """A README command as argv for ``bnmem.cli.main`` at tiny size (optional ``[...]`` parts dropped)."""
    cmd = re.sub(r"\s*\[[^\]]*\]", "", cmd)
    cmd = re.sub(r"--epochs \d+", "--epochs 1", cmd)
    cmd = re.sub(r"--n-seeds \d+", "--n-seeds 2", cmd)
    cmd = re.sub(r"--shadow-models \d+", "--shadow-models 4", cmd)
    cmd = re.sub(r"--lambdas [\d.,]+", "--lambdas 1", cmd)
    cmd = cmd.replace(" studies/", f" {ROOT}/studies/")
    argv = shlex.split(cmd)
    assert argv[0] == "bnmem", cmd
    argv = argv[1:]
    if argv[0] in LENS_COMMANDS:
        argv += ["--train-size", "120"] + ([] if "--epochs" in argv else ["--epochs", "1"])
        if argv[0] == "mitigate":
            argv += ["--fixed-epoch", "1"]
    elif argv[0] == "theory":
        argv += ["--steps", "20"]
    elif argv[0] == "audit":
        argv += ["--max-examples", "100"]
    elif argv[0] == "run" and "--dry-run" not in argv and argv[1].endswith("demo.yaml"):
        argv += [x for s in DEMO_SETS for x in ("--set", s)] + ["--quiet"]
    elif argv[0] == "run":
        # A dry run times a few SGD steps of each architecture at the study's batch size (CIFAR-10's 256 takes
        # ResNet-18 minutes on one CPU thread); a small batch times the same steps and plans the same jobs.
        argv += ["--set", f"train.batch_size={DRY_RUN_BATCH}"]
    return argv


def audit_namespace() -> dict:
    """What the README's Python audit snippet names: a model and digits tensors."""
    from bnmem.config import DataConfig, ModelConfig
    from bnmem.data import load_dataset
    from bnmem.train import seeded_model

    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, train_size=120, seed=0))
    return {"model": seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0).eval(),
            "x_train": ds.x_train, "y_train": ds.y_train, "x_test": ds.x_test[:200], "y_test": ds.y_test[:200],
            "known_mislabeled": ds.is_noisy}


def shrink_python(text: str) -> str:
    return re.sub(r"shadow_models=\d+", "shadow_models=4", re.sub(r'"epochs": \d+', '"epochs": 1', text))


def run_block(block: Block) -> None:
    from bnmem.cli import main

    if block.lang == "sh":
        for cmd in commands(block):
            argv = shrink(cmd)
            assert main(argv) == 0, f"README.md line {block.line}: {cmd}\n  ran as: bnmem {' '.join(argv)}"
    elif block.lang == "yaml":
        from bnmem.study import load_study, build_jobs

        Path("readme_study.yaml").write_text(block.text, encoding="utf-8")
        cells, jobs = build_jobs(load_study("readme_study.yaml"))
        assert cells and jobs, f"README.md line {block.line}: the example study plans no job"
    elif block.lang == "python":
        namespace = audit_namespace() if "bnmem.audit(" in block.text else {}
        exec(compile(shrink_python(block.text), f"README.md line {block.line}", "exec"), namespace)
    else:
        raise AssertionError(f"README.md line {block.line}: a {block.lang!r} block the README test cannot run")


def test_skipped_blocks_are_few_and_say_why():
    skipped = [b for b in blocks() if b.skipped]
    assert len(skipped) <= MAX_SKIPPED, [b.line for b in skipped]
    assert all(b.reason for b in skipped)


def test_every_readme_block_runs(tmp_path, monkeypatch, capsys):
    import torch

    from bnmem.config import ModelConfig
    from bnmem.data import load_dataset
    from bnmem.config import DataConfig
    from bnmem.train import seeded_model

    monkeypatch.chdir(tmp_path)
    ds = load_dataset(DataConfig(dataset="digits"))
    torch.save(seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0), tmp_path / "MODEL.pt")
    ran = []
    for block in blocks():
        if block.skipped or block.marker in ("extending", "audit-gate"):  # tests/test_extending.py, test_audit_gate.py
            continue
        run_block(block)
        ran.append(block.line)
    assert len(ran) >= 10
    out = capsys.readouterr().out
    assert "results in" in out and "claims differ" in out  # bnmem run, bnmem compare
    assert Path("runs/demo/results.csv").is_file() and Path("runs/demo/report.html").is_file()


def test_summary_csv_columns_are_the_readme_s():
    """Every column of summary.csv is named in the README's summary.csv item, and nothing else is."""
    from bnmem.report.summary import CSV_COLUMNS

    text = README.read_text(encoding="utf-8")
    item = re.search(r"^- `summary\.csv`:(.*?)(?=^- |^\s*$)", text, flags=re.M | re.S)
    assert item, "README.md must describe summary.csv in a list item"
    named = {n.strip() for tok in re.findall(r"`([^`]*)`", item.group(1)) for n in tok.split(",")}
    named = {n for n in named if re.fullmatch(r"[a-z_0-9]+", n)}
    assert named == set(CSV_COLUMNS)


def test_demo_study_in_readme_matches_the_file():
    """The README's description of the demo (its lenses, settings, replicates) is the study's."""
    demo = yaml.safe_load((ROOT / "studies" / "demo.yaml").read_text(encoding="utf-8"))
    text = README.read_text(encoding="utf-8")
    n_cells = len(demo["grid"]["outliers"]) * demo["grid"]["replicates"] * len(demo["grid"]["recipes"])
    assert f"{n_cells} cells" in text
    assert "defenses" not in demo["lenses"] and "(not defenses" in text
    setup = text[text.index("## Set-up"):text.index("## Commands")]
    assert [lens for lens in demo["lenses"] if lens != "rmia" and lens not in setup] == []


DOCS = [README, *sorted(p for p in (ROOT / "docs").glob("*.md")
                        if p.name not in ("architecture.md", "analysis-plan.md"))]  # those two have their own tests


def _resolves(dotted: str) -> bool:
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            if not hasattr(obj, p):
                return False
            obj = getattr(obj, p)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_named_code_and_files_exist(doc):
    """Every `bnmem.x.y` the doc names resolves, and every repository path it names exists."""
    text = doc.read_text(encoding="utf-8")
    names = set(re.findall(r"`(bnmem(?:\.[A-Za-z_]\w*)+)", text))
    assert [n for n in sorted(names) if not _resolves(n)] == []
    paths = set(re.findall(r"(?<![\w/.])((?:src/bnmem|bnmem|tests|benchmarks|docs|studies|tools)/[\w/.-]+\.(?:py|md|yaml))",
                           text))
    placeholder = re.compile(r"/[A-Z]+\.\w+$")  # e.g. bnmem/cli/commands/NAME.py
    missing = [p for p in sorted(paths) if not placeholder.search(p)
               and not (ROOT / p).exists() and not (ROOT / "src" / p).exists()]
    assert missing == []
