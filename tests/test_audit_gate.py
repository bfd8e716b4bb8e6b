"""The CI gate (``bnmem audit --fail-at``), run as the README's CI example on the mislabeled-PNG scenario.

The README block marked ``audit-gate`` is run with the scenario's files (tests/audit_scenario.py) and
4 shadow copies instead of 8, as the README test shrinks every audit. Measured here: the leaking model's
level is "moderate to elevated" (the whole training set AUC [0.59, 0.64] under RMIA), so
``--fail-at moderate`` fails it (exit 3). The model trained without the 30 mislabeled files still
fails: its whole training set is as detectable (lower AUC end 0.59): on 450 images the recipe
memorizes typical files too, so removing the known-bad ones does not bring the leakage under the
budget. Too few epochs: the copies do not resemble the model, exit 4.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
from audit_scenario import write_clean_scenario, write_scenario
from readme_blocks import blocks

from bnmem.auditing.findings import LEVELS, band
from bnmem.auditing.gate import EXIT_CODES, NOT_ASSESSED_EXIT, PASSED, REACHED, evaluate_gate, parse_budget
from bnmem.auditing.level import AUC_ELEVATED, AUC_MODERATE
from bnmem.cli import main
from bnmem.errors import BnmemError


def readme_gate_command() -> tuple[list[str], dict[int, str]]:
    """The README's CI example: the bnmem command (argv after ``bnmem``) and what each exit code does."""
    (block,) = [b for b in blocks() if b.marker == "audit-gate"]
    cmd = re.match(r"bnmem (.*?)\ncase", block.text.replace("\\\n", " "), flags=re.S).group(1)
    branches = dict(re.findall(r"^\s+(\S+)\) (.*?) ;;", block.text, flags=re.M))
    return shlex.split(cmd), {int(k): v for k, v in branches.items() if k.isdigit()}


def as_scenario(argv: list[str], scenario: dict, out, copies: int = 4) -> list[str]:
    """The README command on the scenario's files (at test size: ``copies`` shadow copies)."""
    swap = {"model.pt": str(scenario["model"]), "pictures/": str(scenario["pictures"]),
            "known_bad.csv": str(scenario.get("mislabeled")), "runs/audit": str(out), "8": str(copies)}
    argv = [swap.get(a, a) for a in argv]
    if "mislabeled" not in scenario:  # the clean model: nothing is known to be mislabeled
        i = argv.index("--mislabeled")
        del argv[i:i + 2]
    return argv


def lower_level(res: dict) -> str:
    """The level the data rule out, recomputed from the groups' lower AUC ends (not read from risk)."""
    leakage = res["membership"]["leakage"].values()
    ends = [max(a[g]["ci"]["auc"][0] for a in leakage if g in a)
            for g in ("outliers", "rare", "most_exposed", "all") if any(g in a for a in leakage)]
    return band(max(ends), AUC_MODERATE, AUC_ELEVATED)


@pytest.fixture(scope="module")
def readme():
    return readme_gate_command()


def test_readme_documents_every_exit_code(readme):
    argv, branches = readme
    assert argv[0] == "audit" and argv[argv.index("--fail-at") + 1] == "moderate"
    assert set(branches) == {PASSED, REACHED, NOT_ASSESSED_EXIT} and "passed" in branches[0]
    assert "exit 1" in branches[REACHED] and "exit 1" in branches[NOT_ASSESSED_EXIT]
    assert EXIT_CODES == {"passed": 0, "reached": 3, "not assessed": 4}


def test_the_leaking_model_fails_the_readme_gate(readme, tmp_path_factory, capsys):
    scenario = write_scenario(tmp_path_factory.mktemp("leaking"))
    out = tmp_path_factory.mktemp("gate") / "audit"
    code = main(as_scenario(readme[0], scenario, out) + ["--quiet"])
    res = json.loads((out / "audit.json").read_text())
    gate, lower = res["risk"]["gate"], lower_level(res)
    assert lower == res["risk"]["level_lower"]  # the gate's reading is the lower end, recomputed here
    assert code == (REACHED if LEVELS.index(lower) >= LEVELS.index("moderate") else PASSED) == gate["exit_code"]
    assert code == REACHED, res["risk"]["level"]  # measured: moderate to elevated
    assert gate["reading"] == lower and "rule out" in gate["text"]
    schema = pytest.importorskip("jsonschema")
    from bnmem.schemas import load_schema

    schema.Draft202012Validator(load_schema()).validate(res)  # a folder audit with files, exposure and a gate
    assert f"bnmem: gate moderate: FAILED (exit {REACHED})" in capsys.readouterr().err
    # The same result under other budgets: a level its lower end does not reach passes; an AUC budget reads the
    # highest lower AUC end; a TPR budget reads the lower Clopper-Pearson end where estimable.
    assert evaluate_gate(res, "elevated")["state"] == ("reached" if lower == "elevated" else "passed")
    best = max(g["auc_ci"][0] for g in res["risk"]["groups"])
    assert evaluate_gate(res, f"auc={best!r}")["state"] == "reached"
    assert evaluate_gate(res, f"auc={best + 1e-6!r}")["state"] == "passed"
    assert evaluate_gate(res, "auc=0.99")["state"] == "passed"
    assert evaluate_gate(res, "tpr@1%=1")["state"] in ("passed", "not assessed")


def test_the_model_without_the_mislabeled_files_still_leaks_and_the_gate_says_where(readme, tmp_path_factory):
    """Removing the known-bad files does not pass the gate: the whole training set is detectable."""
    clean = write_clean_scenario(tmp_path_factory.mktemp("clean"))
    out = tmp_path_factory.mktemp("gate") / "clean"
    code = main(as_scenario(readme[0], clean, out) + ["--quiet"])
    res = json.loads((out / "audit.json").read_text())
    assert res["data"]["n_train"] == 480 - clean["removed"] and not res["data"]["outliers_known"]
    whole = next(g for g in res["risk"]["groups"] if g["group"] == "all")
    if code == PASSED:  # would mean no group's lower end reaches AUC 0.55
        assert lower_level(res) == "low"
    else:
        assert code == REACHED and whole["auc_ci"][0] >= AUC_MODERATE, whole  # why: the typical files leak
        assert res["risk"]["gate"]["reading"] == lower_level(res) != "low"


def test_too_few_epochs_is_not_assessed_never_passed(readme, tmp_path_factory, capsys):
    scenario = write_scenario(tmp_path_factory.mktemp("short"))
    out = tmp_path_factory.mktemp("gate") / "short"
    argv = as_scenario(readme[0], scenario, out)
    argv[argv.index("--epochs") + 1] = "2"
    code = main(argv + ["--quiet"])
    res = json.loads((out / "audit.json").read_text())
    assert not res["risk"]["calibration"]["assessed"] and res["risk"]["level"] == "not assessed"
    assert code == NOT_ASSESSED_EXIT == res["risk"]["gate"]["exit_code"]
    assert "NOT ASSESSED" in capsys.readouterr().err
    for budget in ("low", "elevated", "auc=0.99", "tpr@0.1%=1"):  # whatever the budget
        assert evaluate_gate(res, budget)["exit_code"] == NOT_ASSESSED_EXIT


def test_a_gate_without_shadow_copies_is_bad_input(tmp_path, capsys):
    code = main(["audit", "--model", str(tmp_path / "m.pt"), "--fail-at", "moderate", "--out", str(tmp_path / "o")])
    assert code == 2 and "--fail-at gates on the membership attacks: give --shadow-models" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("text", ["high", "auc=1.5", "auc=0", "tpr@5%=0.1", "auc=x", "tpr=0.1"])
def test_bad_budgets_are_one_line(text, tmp_path, capsys):
    with pytest.raises(BnmemError, match="--fail-at"):
        parse_budget(text)
    code = main(["audit", "--model", str(tmp_path / "m.pt"), "--shadow-models", "4", "--fail-at", text,
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("bnmem: error:") and "--fail-at" in err[0]


def synthetic(lo: float, hi: float, tpr_ci: list[float] | None) -> dict:
    """A finished result with one group (the whole set) at AUC [lo, hi] and a TPR interval (None: not estimable)."""
    lower, upper = band(lo, AUC_MODERATE, AUC_ELEVATED), band(hi, AUC_MODERATE, AUC_ELEVATED)
    g = {"group": "all", "name": "the whole training set", "attack": "rmia", "auc_ci": [lo, hi],
         "level_lower": lower, "level_upper": upper}
    ci = {"auc": [lo, hi], "tpr_at_1pct_fpr": tpr_ci, "tpr_at_0.1pct_fpr": None}
    return {"risk": {"groups": [g], "blocker": None, "level_lower": lower,
                     "level": lower if lower == upper else f"{lower} to {upper}"},
            "membership": {"leakage": {"rmia": {"all": {"ci": ci}}}}}


@pytest.mark.parametrize("lo, hi, budget, state", [
    (0.52, 0.70, "moderate", "passed"),      # the interval allows elevated, the data rule out only low
    (0.56, 0.70, "moderate", "reached"),
    (0.61, 0.70, "elevated", "reached"),
    (0.56, 0.58, "elevated", "passed"),
    (0.52, 0.53, "low", "reached"),          # 'low' fails every assessed model: any measured level reaches it
    (0.58, 0.70, "auc=0.58", "reached"),
    (0.5799, 0.70, "auc=0.58", "passed"),
])
def test_the_gate_reads_the_lower_end(lo, hi, budget, state):
    assert evaluate_gate(synthetic(lo, hi, [0.0, 0.1]), budget)["state"] == state


def test_a_tpr_budget_reads_the_exact_lower_end_and_is_not_assessed_where_not_estimable():
    assert evaluate_gate(synthetic(0.6, 0.7, [0.04, 0.2]), "tpr@1%=0.05")["state"] == "passed"
    assert evaluate_gate(synthetic(0.6, 0.7, [0.05, 0.2]), "tpr@1%=0.05")["state"] == "reached"
    out = evaluate_gate(synthetic(0.6, 0.7, None), "tpr@1%=0.05")
    assert out["state"] == "not assessed" and out["exit_code"] == NOT_ASSESSED_EXIT and "auc=" in out["text"]
    assert evaluate_gate(synthetic(0.6, 0.7, [0.5, 0.9]), "tpr@0.1%=0.01")["state"] == "not assessed"
