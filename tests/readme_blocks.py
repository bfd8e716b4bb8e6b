"""The code blocks of README.md, as the README test and the extending test read them.

A block is a fenced block (```lang) or an indented one (4 spaces after a blank line). The comment
``<!-- readme-test: skip REASON -->`` on the line before a block marks one that cannot run in the test
suite (it installs software, starts a cluster or needs files a reader brings); ``<!-- readme-test: NAME -->``
names a block so a test can find it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = re.compile(r"<!--\s*readme-test:\s*(\S+)\s*(.*?)\s*-->")


@dataclass
class Block:
    """One code block: its language (``sh`` for indented blocks), text, first line number and marker."""

    lang: str
    text: str
    line: int
    marker: str = ""
    reason: str = ""

    @property
    def skipped(self) -> bool:
        return self.marker == "skip"


def blocks(path: Path = README) -> list[Block]:
    """Every code block of the README, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i, marker, reason = 0, "", ""
    while i < len(lines):
        line = lines[i]
        m = MARKER.search(line)
        if m:
            marker, reason = m.group(1), m.group(2)
            i += 1
            continue
        if line.startswith("```"):
            lang, start, body = line[3:].strip() or "text", i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append(Block(lang, "\n".join(body), start + 1, marker, reason))
            marker, reason = "", ""
        elif line.startswith("    ") and (i == 0 or not lines[i - 1].strip()) and line.strip():
            start, body = i, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            while body and not body[-1].strip():
                body.pop()
            text = "\n".join(body)
            lang = "python" if re.match(r"(import|from) \w", text) else "sh"
            out.append(Block(lang, text, start + 1, marker, reason))
            marker, reason = "", ""
            continue
        elif line.strip():
            marker, reason = "", ""  # a marker applies to the very next block only
        i += 1
    return out


def named(name: str) -> Block:
    """The block marked ``<!-- readme-test: NAME -->``."""
    found = [b for b in blocks() if b.marker == name]
    if len(found) != 1:
        raise LookupError(f"README.md has {len(found)} blocks marked {name!r}")
    return found[0]


def commands(block: Block) -> list[str]:
    """The shell commands of a block: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block.text)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out
