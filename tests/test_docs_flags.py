"""Every command-line flag README.md and docs/ name exists, on the command they name it for.

Read from the docs themselves: each code span and each line of a code block (with its ``\\``
continuations) is a segment; in a segment that runs ``bnmem COMMAND``, every ``--flag`` after it must be
an option of that command (as typer builds it, so ``--help`` output and this check agree); a flag in a
segment that names no bnmem command must be an option of some bnmem command. Segments that run another
tool (ray, srun, pytest, Slurm directives...) are not bnmem's to check.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
# Segments that start with another program (its flags are its own).
OTHER_TOOLS = re.compile(r"^\s*(?:\$\s*)?(?:#|head_ip=|(?:ray|srun|sbatch|pytest|python -m pytest|python3? -m pip|pip|"
                         r"make|git|chromium|hostname|apt-get|lint-imports|mutmut|mkdocs|jupyter|python3? (?:benchmarks|tools|tests)/)\b)")  # '#': a shell comment

# Other tools' flags the docs name on their own in prose, with the tool.
FOREIGN = {"--dist": "pytest-xdist"}


def bnmem_options() -> dict[str, set[str]]:
    """Command name -> its option strings (every command of the typer app, and '' -> the app's own)."""
    import typer

    import bnmem.cli
    from bnmem.cli.commands.lens import build_lens_command

    # A generic lens command (defenses) gets its own flags when it runs or shows its help: build each one,
    # as `bnmem NAME --help` does (a no-op for hand-written commands).
    for info in list(bnmem.cli.app.registered_commands):
        if info.name:
            build_lens_command(info.name)
    root = typer.main.get_command(bnmem.cli.app)
    out = {"": {o for p in root.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}}
    for name, cmd in root.commands.items():
        out[name] = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    return out


def segments(text: str) -> list[str]:
    """The code spans and code-block lines (continuations joined) of a markdown text."""
    out, block, fenced = [], [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            block.append(line.strip())
            if not line.rstrip().endswith("\\"):
                out.append(" ".join(block))
                block = []
            continue
        out += re.findall(r"`([^`]+)`", line)
    return out + ([" ".join(block)] if block else [])


def misnamed_flags(text: str, options: dict[str, set[str]]) -> list[str]:
    """'segment: --flag' for each flag the docs name that its command (or every command) lacks."""
    every = set().union(*options.values())
    bad = []
    for seg in segments(text):
        runs = list(re.finditer(r"\bbnmem\s+([a-z][a-z-]*)", seg))
        if not runs:
            if OTHER_TOOLS.match(seg):
                continue
            bad += [f"{seg[:80]}: {f}" for f in FLAG.findall(seg) if f not in every and f not in FOREIGN]
            continue
        for i, run in enumerate(runs):
            end = runs[i + 1].start() if i + 1 < len(runs) else len(seg)
            allowed = options.get(run.group(1), every)  # `bnmem COMMAND` placeholders: any command's
            bad += [f"{seg[:80]}: {f}" for f in FLAG.findall(seg[run.end():end]) if f not in allowed]
    return bad


@pytest.fixture(scope="module")
def options():
    return bnmem_options()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_flag_the_docs_name_exists(doc, options):
    assert misnamed_flags(doc.read_text(encoding="utf-8"), options) == []


def test_the_check_catches_a_flag_on_the_wrong_command(options):
    """A flag another command has, named for one that lacks it, and a flag no command has, are both found."""
    assert misnamed_flags("`bnmem theory --label-noise 0.1`", options) == ["bnmem theory --label-noise 0.1: "
                                                                           "--label-noise"]
    assert misnamed_flags("    bnmem memorize --epochs 3 \\\n        --no-such-flag 1", options) != []
    assert misnamed_flags("`--no-such-flag`", options) != []
    assert misnamed_flags("`ray start --head`", options) == []


def test_gradnorms_default_checkpoints_as_help_and_readme_say():
    """`--at`'s help example and the README's default are what the config derives."""
    import typer

    import bnmem.cli
    from bnmem.lenses.gradnorms import default_checkpoints

    at = next(p for p in typer.main.get_command(bnmem.cli.app).commands["gradnorms"].params if p.name == "at")
    assert f"{','.join(map(str, default_checkpoints(30)))} for 30 epochs" in at.help
    assert default_checkpoints(30) == [1, 2, 3, 30 // 6, 30 // 3, 30]  # "1, 2, 3, epochs/6, epochs/3, last"
    assert "--at defaults to 1, 2, 3, epochs/6, epochs/3, last" in (ROOT / "README.md").read_text(encoding="utf-8")
