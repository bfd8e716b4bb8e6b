"""`bnmem theory`: the CLI face of bnmem.theory.run_theory, configured by TheoryConfig."""

import inspect
import json

from bnmem.cli import main


def test_cli_defaults_are_the_config_defaults():
    from bnmem.cli.commands.theory import theory
    from bnmem.theory import TheoryConfig

    flags = {k: p.default for k, p in inspect.signature(theory).parameters.items() if k not in ("out", "quiet")}
    fields = TheoryConfig.model_fields
    assert flags and all(fields[k].default == v for k, v in flags.items())


def test_cli_runs_and_reruns_skip(tmp_path, capsys):
    out = tmp_path / "th"
    args = ["theory", "--steps", "12", "--n-per-class", "6", "--counterfactual-seeds", "1", "--no-plot", "--quiet",
            "--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    first = capsys.readouterr().out
    doc = json.loads((out / "theory.json").read_text())
    assert doc["config"]["steps"] == 12 and doc["config"]["n_per_class"] == 6
    assert doc["lens"] == "theory" and doc["schema_version"] == 1
    assert "amplification.predicted_median" in first and not (out / "theory.png").exists()
    assert "claim_5a.role: derivation check" in first and "claim_5b.flip.ratio_median" in first
    assert main(args) == 0
    again = capsys.readouterr().out
    assert "not rerun" in again
    assert again.split("\n", 1)[1] == first  # same summary lines
    assert main([*args[:-2], "--lr", "0.01", "--out", str(out)]) == 0
    assert "not rerun" not in capsys.readouterr().out  # other settings: simulated again


def test_cli_bad_argument_one_line(tmp_path, capsys):
    code = main(["theory", "--outlier-kind", "weird", "--steps", "2", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "outlier_kind" in err[0]
    assert not (tmp_path / "x").exists()  # validated before the folder is touched


def test_summary_prints_no_python_none():
    """A step never reached reads 'not reached', another missing number '—', never Python's None."""
    from bnmem.lenses.theory import summary

    text = summary({"summary": {"gamma": {"higher_with_outliers_from_step": None, "x": 0.5},
                                "margins": {"bn_first_step_all_outliers_fit": None, "other": None}}})
    assert "None" not in text
    assert "gamma.higher_with_outliers_from_step: not reached" in text
    assert "margins.bn_first_step_all_outliers_fit: not reached" in text and "margins.other: —" in text
