"""How close `bnmem design --pilot RUN`'s time estimate comes to what a finished run took: the estimate of a study
calibrated on a run of it, against the worker-seconds the run recorded; the calibration as it was before lira's
chunks and a confirmatory pilot's seeds were counted, beside it.

*Observed* worker-seconds: the seconds of every job of the run (its ``DONE``'s ``seconds``: the sum of what each
job took where it ran, :func:`bnmem.study.run.run_job`) plus those of every task the jobs' cell plans gave the
graph (:meth:`~bnmem.lenses.registry.CellWork.task_seconds`: a lira cell's shadow-model training chunks, timed by
their ``DONE`` markers). The lira query chunks record no seconds and are in neither column.

*Estimate*: :func:`bnmem.study.cost.estimate_seconds` of the study's jobs (default: the run's own study), calibrated
on the run (:func:`bnmem.study.cost.calibrate` of :func:`bnmem.design.pilot_jobs`), one local worker.
*Before*: the calibration as it was: each job timed by its own ``DONE`` only (a lira cell's chunks left out), and
the pilot's jobs planned with the study's declared seeds (a confirmatory pilot's shared-training runs, under
derived seeds, not found: that kind kept its declared factor, times a step time measured under the load of the
moment, so this column moves with the machine's load).

Per job kind it prints the estimate beside what the run's markers recorded for that kind. Shared-training jobs
leave no marker of their own: their runs' ``seed<k>/DONE`` record the training seconds only (the grouped network's
per-epoch hooks and the hand-out to each lens excluded), so that kind is calibrated short; the line
``shared-training, whole jobs`` gives what those jobs took, as the run's total less every marked job's seconds
(exact for a run finished in one attempt; a resumed run's total counts only its last attempt).

Measured on the decisive study (studies/decisive.yaml, 2,136 jobs; its run of 2026-12-06, one attempt, 2 local
workers, 6,488 s wall) on the shared 2-core machine: observed 12,814 worker-seconds (10,210 s of jobs + 2,605 s
of lira training chunks: 99% of 2 workers x the wall time); estimate 11,226 s (ratio 0.876); before 9,235 s
(0.721; 2.57 h against 3.56 h). What remains is shared training's hooks: 728 s calibrated against 2,398 s taken.

Usage::

    .venv/bin/python benchmarks/bench_cost_calibration.py RUN_DIR [STUDY.yaml]

The last line reads ``observed=S estimate=E ratio=R before=B before_ratio=RB``.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from bnmem import io
from bnmem.design import pilot_jobs, pilot_study
from bnmem.study import build_jobs, load_study
from bnmem.study import cost


def before(run: Path) -> cost.Calibration:
    """The calibration as it was: each job's own DONE only, the pilot planned with the study's declared seeds."""
    whole = cost.recorded_seconds
    cost.recorded_seconds = lambda work: work.seconds_taken()
    try:
        return cost.calibrate(run, build_jobs(pilot_study(run))[1])
    finally:
        cost.recorded_seconds = whole


def main(argv: list[str]) -> None:
    run = Path(argv[0])
    study = load_study(argv[1]) if len(argv) > 1 else pilot_study(run)
    jobs = build_jobs(study)[1]
    ran = pilot_jobs(run)
    cal = cost.calibrate(run, ran)
    est = cost.estimate_seconds(jobs, cal)
    old = cost.estimate_seconds(jobs, before(run))

    job_seconds = float(io.read_json(run / io.DONE)["seconds"])
    recorded: dict[str, float] = defaultdict(float)
    tasks = marked = 0.0
    for j in ran:
        work = j.work.at(run)
        t = work.task_seconds() or 0.0
        tasks += t
        own = work.seconds_taken() or 0.0
        recorded[j.lens] += own + t
        marked += own if work.marked else 0.0
    observed = job_seconds + tasks
    by_kind: dict[str, float] = defaultdict(float)
    by_kind_old: dict[str, float] = defaultdict(float)
    for j in jobs:
        by_kind[j.lens] += est[j.id]
        by_kind_old[j.lens] += old[j.id]
    print(cal.source)
    print(f"{'kind':<28}{'before':>10}{'estimate':>10}{'recorded':>10}")
    for kind in sorted(by_kind):
        print(f"{kind:<28}{by_kind_old[kind]:>10.0f}{by_kind[kind]:>10.0f}{recorded.get(kind, 0.0):>10.0f}")
    print(f"{'shared-training, whole jobs':<28}{'':>10}{'':>10}{job_seconds - marked:>10.0f}")
    total, total_old = sum(est.values()), sum(old.values())
    print(f"observed: {job_seconds:.0f} s of jobs + {tasks:.0f} s of their tasks = {observed:.0f} s "
          f"({observed / 3600:.2f} h); estimate {total / 3600:.2f} h, before {total_old / 3600:.2f} h")
    print(f"observed={observed:.0f} estimate={total:.0f} ratio={total / observed:.3f} before={total_old:.0f} "
          f"before_ratio={total_old / observed:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
