"""``bnmem design STUDY.yaml``: per claim the design's power, the replicates 80% power needs, the study's cost,
and (``--propose``) the smallest design that gives every claim 80% power."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bnmem.cli.app import Set, app

Pilot = Annotated[Optional[Path], typer.Option("--pilot", help="a finished run whose observed spreads (and "
                                               "measured job times) replace the plan's declared planning values")]
Propose = Annotated[Optional[Path], typer.Option("--propose", help="write the smallest design (replicates, the toy "
                                                 "model's seeds) giving every claim 80% power as a study YAML")]


@app.command("design")
def design_command(study: Annotated[Path, typer.Argument(help="study YAML file", show_default=False)],
                   pilot: Pilot = None, propose: Propose = None, set: Set = None,  # noqa: A002 - the flag is --set
                   ) -> None:
    """Power of a study's design per claim, replicates needed for 80%, and its estimated cost."""
    import yaml

    from bnmem.analysis_plan import POWER_TARGET
    from bnmem.design import design_table, evaluate_design, proposal
    from bnmem.errors import BnmemError
    from bnmem.names import INDEX_FILE
    from bnmem.study import load_study
    from bnmem.study.schema import read_study_yaml
    from bnmem.texttable import table

    if pilot is not None and (not str(pilot).strip() or str(pilot) == "." and not (pilot / INDEX_FILE).exists()):
        raise BnmemError(f"--pilot {str(pilot)!r}: give the run directory of a finished study (with {INDEX_FILE})")
    if pilot is not None and not pilot.is_dir():
        raise BnmemError(f"--pilot {pilot}: not a run directory")
    if propose is not None and propose.exists():
        raise BnmemError(f"{propose} exists; choose a new file for the proposed study")
    spec = load_study(study, set)
    rows = evaluate_design(spec, pilot)
    typer.echo(f"study {spec.name}: power of 'reproduced' per claim at the planning effects of the analysis plan "
               f"(docs/analysis-plan.md, 'Power and planning effects'); {POWER_TARGET:.0%} target")
    typer.echo(table(design_table(rows), ["claim", "settings", "n", "power", f"n for {POWER_TARGET:.0%}",
                                          "spreads from"]))
    typer.echo(_cost_text(spec, pilot))
    if propose is None:
        return
    doc = read_study_yaml(study)
    doc.setdefault("name", study.stem)
    proposed, unreachable = proposal(doc, rows)
    text = yaml.safe_dump(proposed, sort_keys=False, allow_unicode=True)
    new = load_study_text(text, propose)
    again = evaluate_design(new, pilot)
    low = [r.cid for r in again if r.power is not None and r.power < POWER_TARGET]
    from bnmem import io

    io.write_text(propose, f"# Proposed by `bnmem design {study}" + (f" --pilot {pilot}" if pilot else "")
                  + f"`: the smallest replicates giving every claim {POWER_TARGET:.0%} power.\n" + text)
    typer.echo(f"wrote {propose}: replicates {proposed['grid']['replicates']}"
               + (f"; claims below {POWER_TARGET:.0%} even so: {', '.join(low + unreachable)}" if low or unreachable
                  else f"; every claim reaches {POWER_TARGET:.0%}"))
    typer.echo(table(design_table(again), ["claim", "settings", "n", "power", f"n for {POWER_TARGET:.0%}",
                                           "spreads from"]))
    typer.echo(_cost_text(new, pilot))


def load_study_text(text: str, path: Path):
    """Validate a study document (written to a scratch file first: load_study reads files)."""
    import tempfile

    from bnmem.study import load_study

    with tempfile.TemporaryDirectory(prefix="bnmem-design-") as tmp:
        scratch = Path(tmp) / path.name
        scratch.write_text(text, encoding="utf-8")
        return load_study(scratch)


def _cost_text(spec, pilot: Path | None) -> str:
    """Jobs and estimated time (calibrated on the pilot's measured job times when given)."""
    from bnmem.study import build_jobs
    from bnmem.study.cost import Calibration, calibrate, cost_lines, estimate_seconds

    cells, jobs = build_jobs(spec)
    cal = Calibration()
    if pilot is not None:
        from bnmem.design import pilot_jobs

        cal = calibrate(pilot, pilot_jobs(pilot))
    return "\n".join([f"cost: {len(cells)} cells, {len(jobs)} jobs", *cost_lines(jobs, estimate_seconds(jobs, cal),
                                                                                  cal.source)])
