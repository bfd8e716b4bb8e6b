"""The command line: a small end-to-end run, and one clear line for each bad input."""

import json
import os

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
    code, stdout, err = run_cli(capsys, "memorize", "--epochs", "2", "--seeds", "1", "--quiet", "--out", str(out),
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
        (["--label-noise", "1.5"], "label_noise: rate 1.5 is outside [0, 1)"),
        (["--ood", "-0.1"], "ood: rate -0.1 is outside [0, 1)"),
        (["--norms", "batch,weird"], "unknown norm 'weird'"),
        (["--arch", "vgg"], "unknown architecture 'vgg'"),
        (["--seeds", "x"], "--seeds must be a count"),
        (["--set", "train.nonsense=1"], "train.nonsense"),
        (["--set", "novalue"], "--set expects KEY=VALUE"),
    ],
)
def test_bad_input_one_line(tmp_path, capsys, args, fragment):
    code, _, err = run_cli(capsys, "memorize", "--epochs", "1", "--seeds", "1", "--quiet", "--out", str(tmp_path / "o"), *args)
    assert code == 2
    assert fragment in one_error_line(err)


def test_missing_dataset_names_dir_and_flag(tmp_path, capsys):
    code, _, err = run_cli(capsys, "memorize", "--dataset", "mnist", "--data-root", str(tmp_path / "nodata"),
                           "--epochs", "1", "--seeds", "1", "--quiet", "--out", str(tmp_path / "o"))
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
    code, _, err = run_cli(capsys, "memorize", "--epochs", "1", "--seeds", "1", "--quiet", "--out", str(ro / "x"))
    assert code == 2 and "permission denied" in one_error_line(err)


def test_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = run_cli(capsys, "memorize", "--epochs", "1", "--seeds", "1", "--quiet", "--out", str(f / "sub"))
    assert code == 2 and "cannot create directory" in one_error_line(err)


def test_changed_config_in_same_out_is_refused(tmp_path, capsys):
    out = str(tmp_path / "o")
    base = ["memorize", "--epochs", "1", "--seeds", "1", "--quiet", "--out", out]
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


def test_per_command_help_for_a_shared_flag(capsys):
    code, out, _ = run_cli(capsys, "lira", "--help")
    assert code == 0 and "one base seed for all shadow models" in out
    code, out, _ = run_cli(capsys, "memorize", "--help")
    assert code == 0 and "number of seeds" in out


def test_corrected_rerun_after_a_bad_arch_succeeds(tmp_path, capsys):
    """`--arch foo` fails before anything is written, so the corrected rerun into the same --out works."""
    out = tmp_path / "X"
    assert main(["memorize", "--arch", "foo", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "unknown architecture 'foo'" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert main(["memorize", "--arch", "lenet", "--train-size", "60", "--epochs", "1", "--seeds", "1",
                 "--out", str(out), "--quiet"]) == 0
    assert (out / "metrics.json").is_file()


BAD_FLAGS = [
    ["--arch", "foo"], ["--norms", "batch,bogus"], ["--norms", "batch,batch"], ["--dataset", "imagenet"],
    ["--label-noise", "1.5"], ["--ood", "-0.1"], ["--epochs", "0"], ["--lr", "-1"], ["--seeds", "0"],
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
    assert main(["gradnorms", "--epochs", "2", "--train-size", "60", "--seeds", "1", "--norms", "batch",
                 "--out", str(tmp_path / "g"), "--quiet"]) == 0
    assert json.loads((tmp_path / "g" / "metrics.json").read_text())["conditions"]["checkpoints"] == [1, 2]
