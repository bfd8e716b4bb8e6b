"""The command line: a small end-to-end run, and one clear line for each bad input."""

import dataclasses
import json
import os
import re

import pytest

from bnmem.cli import main


def run_cli(capsys, *args):
    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_error_line(err: str) -> str:
    lines = [l for l in err.strip().splitlines() if l.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("bnmem: error:"), err
    return lines[0]


def test_memorize_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = run_cli(capsys, "memorize", "--epochs", "2", "--n-seeds", "1", "--quiet", "--out", str(out),
                                "--set", "train.batch_size=128")
    assert code == 0, err
    assert "noisy_acc" in stdout and str(out) in stdout
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["train"]["batch_size"] == 128 and cfg["seeds"] == [0]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) >= {"batch", "none", "conditions"}


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--dataset", "imagenet"], "unknown dataset 'imagenet'"),
        (["--label-noise", "1.5"], "--label-noise: rate 1.5 is outside [0, 1)"),
        (["--ood", "-0.1"], "--ood: rate -0.1 is outside [0, 1)"),
        (["--norms", "batch,weird"], "unknown norm 'weird'"),
        (["--arch", "vgg"], "unknown architecture 'vgg'"),
        (["--seeds", "x"], "--seeds must be a comma list"),
        (["--seeds", "0,2", "--seed", "1"], "either --seeds LIST or --seed/--n-seeds"),
        (["--set", "train.nonsense=1"], "train.nonsense"),
        (["--set", "novalue"], "--set expects KEY=VALUE"),
    ],
)
def test_bad_input_one_line(tmp_path, capsys, args, fragment):
    code, _, err = run_cli(capsys, "memorize", "--epochs", "1", "--n-seeds", "1", "--quiet", "--out", str(tmp_path / "o"), *args)
    assert code == 2
    assert fragment in one_error_line(err)


def test_missing_dataset_names_dir_and_flag(tmp_path, capsys):
    code, _, err = run_cli(capsys, "memorize", "--dataset", "mnist", "--data-root", str(tmp_path / "nodata"),
                           "--epochs", "1", "--n-seeds", "1", "--quiet", "--out", str(tmp_path / "o"))
    assert code == 2
    line = one_error_line(err)
    assert str(tmp_path / "nodata") in line and "--download" in line


def test_unwritable_out(tmp_path, capsys, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.geteuid() == 0:  # root writes anywhere: make the access check say no
        import bnmem.io

        monkeypatch.setattr(bnmem.io.os, "access", lambda *a, **k: False)
    code, _, err = run_cli(capsys, "memorize", "--epochs", "1", "--n-seeds", "1", "--quiet", "--out", str(ro / "x"))
    assert code == 2 and "permission denied" in one_error_line(err)


def test_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = run_cli(capsys, "memorize", "--epochs", "1", "--n-seeds", "1", "--quiet", "--out", str(f / "sub"))
    assert code == 2 and "cannot create directory" in one_error_line(err)


def test_changed_config_in_same_out_is_refused(tmp_path, capsys):
    out = str(tmp_path / "o")
    base = ["memorize", "--epochs", "1", "--n-seeds", "1", "--quiet", "--out", out]
    assert run_cli(capsys, *base)[0] == 0
    code, _, err = run_cli(capsys, *base[:-2], "--lr", "0.01", "--out", out)
    assert code == 2 and "different configuration" in one_error_line(err)


def test_unknown_flag_is_usage_error(capsys):
    code, _, err = run_cli(capsys, "memorize", "--no-such-flag")
    assert code == 2 and "no-such-flag" in err


def test_command_specific_options_keep_their_help(capsys):
    # Command modules use `from __future__ import annotations`; their own option
    # help must survive the shared-options decorator.
    code, out, _ = run_cli(capsys, "gradnorms", "--help")
    assert code == 0 and "comma-separated epochs after which" in out
    code, out, _ = run_cli(capsys, "mitigate", "--help")
    assert code == 0 and "λ of the γ/σ regularizer" in out


def test_help_keeps_square_brackets_of_a_generated_flag(capsys):
    """rich reads '[mlflow]' as a style tag: `bnmem audit -h` printed pip install 'bnmem' without the extra."""
    code, out, _ = run_cli(capsys, "audit", "--help")
    out = " ".join(out.replace("│", " ").split())
    assert code == 0 and "pip install 'bnmem[mlflow]'" in out


def test_per_command_help_for_a_shared_flag(capsys):
    code, out, _ = run_cli(capsys, "lira", "--help")
    out = " ".join(out.replace("│", " ").split())  # rich wraps the help at the terminal's width
    assert code == 0 and "one base seed for all shadow models" in out and "--n-seeds" not in out
    code, out, _ = run_cli(capsys, "memorize", "--help")
    out = " ".join(out.replace("│", " ").split())
    assert code == 0 and "number of model seeds (default: 3)" in out


def test_corrected_rerun_after_a_bad_arch_succeeds(tmp_path, capsys):
    """`--arch foo` fails before anything is written, so the corrected rerun into the same --out works."""
    out = tmp_path / "X"
    assert main(["memorize", "--arch", "foo", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "unknown architecture 'foo'" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert main(["memorize", "--arch", "lenet", "--train-size", "60", "--epochs", "1", "--n-seeds", "1",
                 "--out", str(out), "--quiet"]) == 0
    assert (out / "metrics.json").is_file()


BAD_FLAGS = [
    ["--arch", "foo"], ["--norms", "batch,bogus"], ["--norms", "batch,batch"], ["--dataset", "imagenet"],
    ["--label-noise", "1.5"], ["--ood", "-0.1"], ["--epochs", "0"], ["--lr", "-1"], ["--n-seeds", "0"],
    ["--optimizer", "rmsprop"], ["--set", "train.nope=1"], ["--set", "arch=vgg"],
]
COMMANDS = {
    "memorize": [], "gradnorms": ["--at", "1"], "gamma-sigma": [], "mitigate": ["--lambdas", "1"],
    "lira": ["--shadow-models", "4"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_invalid_flag_writes_into_out(command, tmp_path, capsys):
    """Every lens command validates its whole config before it touches --out."""
    for i, bad in enumerate(BAD_FLAGS):
        out = tmp_path / f"o{i}"
        code = main([command, *COMMANDS[command], *bad, "--out", str(out), "--quiet"])
        err = capsys.readouterr().err.strip()
        assert code == 2, (command, bad, err)
        assert len(err.splitlines()) == 1 and err.startswith("bnmem: error:"), (command, bad, err)
        assert not out.exists(), (command, bad)


def test_gradnorms_default_checkpoints_fit_the_epochs(tmp_path):
    """The default --at is derived from --epochs, so any run length works without --at."""
    from bnmem.lenses.gradnorms import GradNormsConfig, default_checkpoints

    assert default_checkpoints(30) == [1, 2, 3, 5, 10, 30]
    assert default_checkpoints(10) == [1, 2, 3, 10]
    assert default_checkpoints(1) == [1]
    assert GradNormsConfig.model_validate({"train": {"epochs": 10}}).at == [1, 2, 3, 10]
    assert main(["gradnorms", "--epochs", "2", "--train-size", "60", "--n-seeds", "1", "--norms", "batch",
                 "--out", str(tmp_path / "g"), "--quiet"]) == 0
    assert json.loads((tmp_path / "g" / "metrics.json").read_text())["conditions"]["checkpoints"] == [1, 2]


def test_version_help_and_bare_command(capsys):
    from bnmem.version import __version__

    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.strip() == f"bnmem {__version__}"
    code, out, _ = run_cli(capsys)  # bare `bnmem`: the help, exit 0
    assert code == 0 and "Usage: bnmem" in out and "memorize" in out
    for args in (["-h"], ["memorize", "-h"], ["run", "-h"], ["defenses", "-h"]):
        code, out, _ = run_cli(capsys, *args)
        assert code == 0 and "Usage: bnmem" in out, args


def test_python_dash_m_bnmem(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "bnmem", "--version"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0 and proc.stdout.startswith("bnmem "), proc.stderr


@pytest.mark.parametrize("args, fragment", [
    (["memorize", "--epoch", "3"], "No such option: --epoch"),
    (["memorize", "--epochs", "x"], "'--epochs'"),
    (["run"], "Missing argument"),
    (["nosuch"], "No such command 'nosuch'"),
])
def test_usage_errors_are_one_line(capsys, args, fragment):
    code, _, err = run_cli(capsys, *args)
    line = one_error_line(err)
    assert code == 2 and fragment in line and "--help" in line


def test_ctrl_c_says_how_to_resume(tmp_path, capsys, monkeypatch):
    """Typer turns KeyboardInterrupt into a silent exit 130; bnmem's line must still reach the user."""
    from bnmem.lenses import registry

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    lens = registry.get("memorize")
    monkeypatch.setitem(registry._REGISTRY, "memorize", dataclasses.replace(lens, run=interrupted))
    code, _, err = run_cli(capsys, "memorize", "--epochs", "1", "--quiet", "--out", str(tmp_path / "o"))
    assert code == 130 and "interrupted; rerun the same command to resume" in err


def captured_config(monkeypatch, name):
    """Replace lens ``name``'s runner by one that records the validated config (nothing trains)."""
    from bnmem.lenses import registry

    seen = []

    def record(cfg, out, **kwargs):
        seen.append(cfg)
        return {}

    lens = registry.get(name)
    monkeypatch.setitem(registry._REGISTRY, lens.name, dataclasses.replace(lens, run=record, summary=None))
    return seen


@pytest.mark.parametrize("args, seeds, warns", [
    ([], [0, 1, 2], False),
    (["--seed", "3", "--n-seeds", "2"], [3, 4], False),
    (["--seeds", "0,5,7"], [0, 5, 7], False),
    (["--seeds", "2"], [0, 1], True),  # the old count spelling: still works, with a deprecation line
    (["--seed", "4", "--seeds", "2"], [4, 5], True),
])
def test_one_seed_convention(tmp_path, capsys, monkeypatch, args, seeds, warns):
    seen = captured_config(monkeypatch, "memorize")
    code, _, err = run_cli(capsys, "memorize", "--quiet", "--out", str(tmp_path / "o"), *args)
    assert code == 0, err
    assert seen[0].seeds == seeds
    assert ("deprecated; use --n-seeds" in err) == warns


def test_lira_takes_a_base_seed(tmp_path, capsys, monkeypatch):
    import bnmem.lenses.lira
    from bnmem.errors import BnmemError

    seen = []

    def record(cfg, out, **kwargs):  # the command calls run_lira itself; stop before any training
        seen.append(cfg)
        raise BnmemError("recorded")

    monkeypatch.setattr(bnmem.lenses.lira, "run_lira", record)
    assert run_cli(capsys, "lira", "--seed", "7", "--quiet", "--out", str(tmp_path / "o"))[0] == 2
    assert seen[-1].seeds == [7]
    code, _, err = run_cli(capsys, "lira", "--seeds", "1", "--quiet", "--out", str(tmp_path / "o"))
    assert seen[-1].seeds == [0] and "deprecated" in err  # the old spelling


def test_generic_lens_command_lists_and_defaults_to_the_lens_s_options(tmp_path, capsys, monkeypatch):
    """`bnmem defenses` lists the lens's own options; its defaults win over the shared flags' (four norms)."""
    from bnmem.lenses.defenses import DefensesConfig

    code, out, _ = run_cli(capsys, "defenses", "--help")
    out = " ".join(out.replace("│", " ").split())
    assert code == 0 and "--dp-epsilons" in out and "--replicates" in out and "--shadow-models" in out
    seen = captured_config(monkeypatch, "defenses")
    assert run_cli(capsys, "defenses", "--quiet", "--out", str(tmp_path / "o"))[0] == 0
    default = DefensesConfig()
    assert seen[-1].norms == default.norms == ["batch", "group", "layer", "none"]
    assert seen[-1].train == default.train and seen[-1].replicates == default.replicates
    code = run_cli(capsys, "defenses", "--quiet", "--out", str(tmp_path / "o"), "--dp-epsilons", "2,4",
                   "--replicates", "3", "--set", "replicates=5")[0]
    assert code == 0 and seen[-1].dp_epsilons == [2.0, 4.0] and seen[-1].replicates == 5  # --set wins


def test_default_out_is_per_configuration(tmp_path, capsys, monkeypatch):
    """Two lira runs with different flags and no --out both succeed, each in its own folder; the same
    command again resumes in its folder."""
    monkeypatch.chdir(tmp_path)
    from bnmem.lenses.lira import LiraConfig
    from bnmem.rundir import default_out

    base = ["lira", "--shadow-models", "4", "--epochs", "1", "--train-size", "60", "--norms", "batch",
            "--views", "identity", "--quiet"]
    assert main(base) == 0
    assert main([*base, "--lr", "0.02"]) == 0
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(runs) == 2 and all(re.fullmatch(r"lira-[0-9a-f]{8}", r) for r in runs)
    out = capsys.readouterr().out
    assert all(f"results in runs/{r}/" in out for r in runs)
    # The folder is a function of the configuration only, so the same command resumes in it.
    cfg = LiraConfig.model_validate(json.loads((tmp_path / "runs" / runs[0] / "config.json").read_text()))
    assert default_out("lira", cfg.model_dump(mode="json")).name == runs[0]


def test_failed_start_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    """A lens that fails before writing results (here: Opacus missing for DP variants) leaves no config
    that would refuse the corrected command."""
    import bnmem.train.dp
    from bnmem.errors import BnmemError

    def no_opacus():
        raise BnmemError("DP-SGD needs Opacus: pip install 'bnmem[dp]'")

    monkeypatch.setattr(bnmem.train.dp, "require_opacus", no_opacus)
    monkeypatch.setattr("bnmem.lenses.defenses.require_opacus", no_opacus)
    out = tmp_path / "d"
    code, _, err = run_cli(capsys, "defenses", "--quiet", "--out", str(out))
    assert code == 2 and "Opacus" in one_error_line(err)
    assert not out.exists()


def test_removed_if_unstarted_keeps_results_and_existing_folders(tmp_path):
    from bnmem.rundir import removed_if_unstarted

    for name, files in (("started", ["config.json", "metrics.json"]), ("bare", ["config.json"])):
        with pytest.raises(RuntimeError), removed_if_unstarted(tmp_path / name):
            (tmp_path / name).mkdir()
            for f in files:
                (tmp_path / name / f).write_text("{}")
            raise RuntimeError
    assert (tmp_path / "started" / "metrics.json").exists() and not (tmp_path / "bare").exists()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text("{}")
    with pytest.raises(RuntimeError), removed_if_unstarted(tmp_path / "old"):
        raise RuntimeError
    assert (tmp_path / "old" / "config.json").exists()  # a folder it did not create stays


def test_public_names_of_the_package():
    """dir(bnmem) and help(bnmem) show the public names (GammaSigmaPenalty included), not the helpers; dir()
    does not import torch."""
    import pydoc
    import subprocess
    import sys

    code = ("import sys, bnmem; names = dir(bnmem); assert 'torch' not in sys.modules; "
            "print(' '.join(n for n in names if not n.startswith('__')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["BnmemError", "GammaSigmaPenalty", "audit"]
    import bnmem

    text = pydoc.render_doc(bnmem, renderer=pydoc.plaintext)
    assert "class GammaSigmaPenalty" in text and "class BnmemError" in text
    # short: no nn.Module methods inherited by GammaSigmaPenalty (help(bnmem) ran to 1,271 lines)
    assert "register_forward_hook" not in text and len(text.splitlines()) < 250, len(text.splitlines())
    functions = text[text.index("\nFUNCTIONS\n"):text.index("\nDATA\n")]
    assert functions.split()[1].startswith("audit(") and "__getattr__" not in functions
    data = text[text.index("\nDATA\n"):]
    assert "TYPE_CHECKING" not in data and "Any =" not in data and "Path =" not in data


def test_run_workers_default_to_the_available_cores(tmp_path, capsys, monkeypatch):
    """`bnmem run` without --workers runs as many local workers as this process may use cores."""
    import bnmem.executors
    import bnmem.study.preflight
    from bnmem.errors import BnmemError

    asked = []

    def record(name, **kwargs):
        asked.append(kwargs.get("workers"))
        raise BnmemError("recorded")

    monkeypatch.setattr(bnmem.executors, "get_executor", record)
    monkeypatch.setattr(bnmem.study.preflight, "preflight", lambda *a, **k: None)
    study = os.path.join(os.path.dirname(__file__), "..", "studies", "demo.yaml")
    for extra, expected in (([], len(os.sched_getaffinity(0))), (["--workers", "3"], 3)):
        assert main(["run", study, "--out", str(tmp_path / "o"), "--quiet", *extra]) == 2
        assert asked[-1] == expected
