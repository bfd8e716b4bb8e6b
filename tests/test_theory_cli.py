"""`bnmem theory`: the CLI face of bnmem.theory.run_theory."""

import inspect
import json

from bnmem.cli import main


def test_cli_defaults_mirror_run_theory():
    from bnmem.cli.commands.theory import theory
    from bnmem.theory import run_theory

    ours = {k: p.default for k, p in inspect.signature(theory).parameters.items() if k != "out"}
    theirs = {k: p.default for k, p in inspect.signature(run_theory).parameters.items() if k != "out_dir"}
    assert ours == theirs


def test_cli_runs_and_reruns_skip(tmp_path, capsys):
    out = tmp_path / "th"
    args = ["theory", "--steps", "12", "--n-per-class", "6", "--no-plot", "--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    first = capsys.readouterr().out
    doc = json.loads((out / "theory.json").read_text())
    assert doc["config"]["steps"] == 12 and doc["config"]["n_per_class"] == 6
    assert "amplification.predicted_median" in first and not (out / "theory.png").exists()
    assert main(args) == 0
    again = capsys.readouterr().out
    assert "not rerun" in again
    assert again.split("\n", 1)[1] == first  # same summary lines
    assert main([*args[:-3], "--lr", "0.01", "--no-plot", "--out", str(out)]) == 0
    assert "not rerun" not in capsys.readouterr().out  # other settings: simulated again


def test_cli_bad_argument_one_line(tmp_path, capsys):
    code = main(["theory", "--outlier-kind", "weird", "--steps", "2", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "outlier_kind" in err[0]
