"""``bnmem theory``: simulate the one-channel toy model and check the (γ/σ)² amplification."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bnmem.cli.app import Out, app

# The defaults below mirror bnmem.theory.run_theory's (tests/test_theory_cli.py checks
# they agree); they are spelled out so `bnmem --help` does not import torch.


def _scalars(d: dict[str, Any], prefix: str = "") -> list[str]:
    """``section.key: value`` lines for the scalar entries of a nested summary."""
    lines = []
    for k, v in d.items():
        if isinstance(v, dict):
            lines += _scalars(v, f"{prefix}{k}.")
        elif isinstance(v, float):
            lines.append(f"{prefix}{k}: {v:.4g}")
        elif v is None or isinstance(v, (int, str)):
            lines.append(f"{prefix}{k}: {v}")
    return lines


def finished_summary(out: Path, kwargs: dict[str, Any], plot: bool) -> dict[str, Any] | None:
    """The summary of a finished simulation in ``out`` with the same settings, else None."""
    import json

    path = out / "theory.json"
    if not path.exists() or (plot and not (out / "theory.png").exists()):
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    config = doc.get("config", {})
    if any(config.get(k) != v for k, v in kwargs.items()):
        return None
    return doc.get("summary")


@app.command()
def theory(
    out: Out = Path("runs/theory"),
    steps: Annotated[int, typer.Option(help="full-batch gradient-descent steps of each run")] = 400,
    lr: Annotated[float, typer.Option(help="learning rate of every run and of the per-step probes")] = 0.05,
    n_outliers: Annotated[int, typer.Option(help="corrupted training samples (out of 3 x n-per-class)")] = 4,
    seed: Annotated[int, typer.Option(help="seeds data, corruption and initialization")] = 0,
    n_per_class: Annotated[int, typer.Option(help="clean samples per class (3 classes)")] = 20,
    noise: Annotated[float, typer.Option(help="standard deviation of the white noise on every signal")] = 0.3,
    kernel_size: Annotated[int, typer.Option(help="conv kernel length (signals have length 32)")] = 5,
    outlier_kind: Annotated[str, typer.Option(help="flip (wrong label) or ood (noise input, random label)")] = "flip",
    plot: Annotated[bool, typer.Option("--plot/--no-plot", help="also write theory.png")] = True,
) -> None:
    """Toy model (one conv channel + linear classifier, with and without BN): measured vs predicted
    outlier-margin amplification (γ/σ)², and how outliers push γ up. Writes theory.json (+ theory.png)."""
    from bnmem.theory import run_theory

    kwargs = dict(steps=steps, lr=lr, n_outliers=n_outliers, seed=seed, n_per_class=n_per_class, noise=noise,
                  kernel_size=kernel_size, outlier_kind=outlier_kind)
    summary = finished_summary(Path(out), kwargs, plot)
    if summary is not None:
        typer.echo(f"{out}/theory.json already holds this simulation; not rerun")
    else:
        summary = run_theory(out, plot=plot, **kwargs)
    typer.echo("\n".join(_scalars(summary)))
    typer.echo(f"results in {out}/ (theory.json{', theory.png' if plot else ''})")
