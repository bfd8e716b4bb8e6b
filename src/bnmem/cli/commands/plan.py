"""``bnmem plan``: the analysis plan as markdown and the SHA-256 of its full text (publish it before running)."""

from __future__ import annotations

from typing import Annotated

import typer

from bnmem.cli.app import app

MarkdownOnly = Annotated[bool, typer.Option("--markdown-only", help="print only the markdown (docs/analysis-plan.md)")]
HashOnly = Annotated[bool, typer.Option("--hash-only", help="print only 'plan <version> sha256 <hex>'")]


@app.command("plan")
def plan_command(markdown_only: MarkdownOnly = False, hash_only: HashOnly = False) -> None:
    """Print the analysis plan (markdown) and the SHA-256 of its full content, as study.json records it."""
    from bnmem.analysis_plan import PLAN_VERSION, plan_sha256, render_markdown

    line = f"plan {PLAN_VERSION} sha256 {plan_sha256()}"
    if hash_only:
        typer.echo(line)
        return
    typer.echo(render_markdown(), nl=False)
    if not markdown_only:
        typer.echo(f"\n{line}")
