"""`bnmem audit` checks before it writes, reruns after a failure, and says plainly what went wrong.

The practitioner's scenario (tests/audit_scenario.py): a PNG folder with mislabeled files and a small
BatchNorm CNN trained through torchvision's ImageFolder (RGB), saved with torch.save.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap

import pytest
from waiting import HANG_GUARD_S
import torch
from audit_scenario import write_scenario

import bnmem
from bnmem.auditing.membership import membership_section
from bnmem.config import TrainConfig
from bnmem.formatting import count_text
from bnmem.cli import main
from bnmem.errors import BnmemError
from bnmem.executors.local import _has_main_guard


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return write_scenario(tmp_path_factory.mktemp("hospital"))


def one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("bnmem: error:"), err
    return lines[0]


def test_channel_mismatch_names_the_fix_and_the_corrected_rerun_succeeds(scenario, tmp_path, capsys):
    out = tmp_path / "audit"
    code = main(["audit", "--quiet", *scenario["flags"], "--channels", "1", "--top-k", "5", "--out", str(out)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "expects 3 input channels" in line and "rerun with --channels 3" in line
    assert not out.exists()  # nothing written before the inputs were checked
    # A config left by an older failure does not block the corrected rerun either.
    out.mkdir()
    (out / "audit_config.json").write_text(json.dumps({"model": "an older, failed attempt"}))
    code = main(["audit", "--quiet", *scenario["flags"], "--channels", "3", "--top-k", "5", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    config = json.loads((out / "audit_config.json").read_text())
    assert "data" not in config and config["folder"]["path"] == str(scenario["pictures"])
    assert config["folder"]["channels"] == 3
    # Other settings of the same audit rerun into its folder; another model or other data is refused.
    code = main(["audit", "--quiet", *scenario["flags"], "--top-k", "6", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert json.loads((out / "audit_config.json").read_text())["top_k"] == 6
    flags = [f if f != "0.5,0.5,0.5" else "0.4,0.4,0.4" for f in scenario["flags"]]  # other --mean/--std
    code = main(["audit", "--quiet", *flags, "--top-k", "6", "--out", str(out)])
    assert code == 2 and "holds an audit of another model or other data" in one_error_line(capsys.readouterr().err)
    assert (out / "audit.json").is_file()  # the earlier audit is left as it was


def test_channels_default_is_rgb_like_torchvision(scenario, tmp_path, capsys):
    """The scenario's model was trained through torchvision's ImageFolder: the default --channels fits it."""
    code = main(["audit", "--quiet", *scenario["flags"], "--max-examples", "40", "--top-k", "3",
                 "--out", str(tmp_path / "a")])
    assert code == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert res["data"]["input_shape"][0] == 3


def test_progress_goes_to_stderr_and_the_report_to_stdout(scenario, tmp_path, capsys):
    code = main(["audit", *scenario["flags"], "--shadow-models", "4", "--epochs", "1", "--top-k", "3",
                 "--out", str(tmp_path / "p")])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert cap.out.startswith("# bnmem audit: Sequential (nn.Module, 6.4k parameters)"), cap.out[:200]
    assert "membership: training 4 of 4 shadow copies (Sequential, 6.4k parameters)" in cap.err
    assert "membership: training" not in cap.out and "\r" not in cap.out


def test_cost_estimate_within_a_factor_two_of_the_measured_training_time(scenario):
    """The estimate (the median of three timed 6-step trainer runs) against the copies' own training-loop
    seconds, same process. Measured here: ratios 0.95-1.22 over five runs at 15 epochs, and 0.54 once at
    40 epochs while other jobs loaded this 2-core machine mid-training (the single-run estimator before:
    0.58-1.55). Other processes can slow the training after the estimate, so up to three attempts are made;
    an estimator off by a constant factor beyond 2 (the issue's 6.8 min for 16 s) fails all three."""
    from bnmem.data.image_folder import ImageFolderConfig, load_image_folder

    ds = load_image_folder(ImageFolderConfig(path=scenario["pictures"], mean=[0.5] * 3, std=[0.5] * 3))
    model = torch.load(scenario["model"], weights_only=False)
    ratios = []
    for _ in range(3):
        cost = membership_section(model, ds, 4, TrainConfig(epochs=15, batch_size=32), None)["cost"]
        ratios.append(cost["estimated_seconds"] / cost["measured_seconds"])
        if 0.5 <= ratios[-1] <= 2.0:
            break
    assert 0.5 <= ratios[-1] <= 2.0, ratios


def test_python_signature_is_written_once_with_at_most_eight_parameters():
    """One definition (bnmem.auditing.api), which the package re-exports; its options are objects (ShadowCopies,
    TrainConfig, AuditOptions) whose fields are also accepted as keywords."""
    from bnmem.auditing import api
    from bnmem.auditing.options import AuditOptions

    assert bnmem.audit is api.audit
    params = inspect.signature(bnmem.audit).parameters
    assert len(params) <= 8 and [n for n, p in params.items() if p.kind is p.VAR_KEYWORD] == ["fields"]
    with pytest.raises(BnmemError, match="unknown keyword.*shadow_modles"):
        bnmem.audit(torch.nn.Linear(3, 2), (torch.zeros(4, 3), torch.zeros(4).long()), shadow_modles=4)
    with pytest.raises(BnmemError, match="top_k"):
        bnmem.audit(torch.nn.Linear(3, 2), (torch.zeros(4, 3), torch.zeros(4).long()), options={"top_k": -1})
    assert set(AuditOptions.model_fields) >= {"top_k", "max_examples", "max_memory", "workers", "fail_at"}


def test_workers_from_python(scenario, tmp_path):
    """workers=2 trains the shadow copies in two worker processes (this test runs under pytest's guarded main)."""
    from bnmem.data.image_folder import ImageFolderConfig, load_image_folder

    ds = load_image_folder(ImageFolderConfig(path=scenario["pictures"], mean=[0.5] * 3, std=[0.5] * 3))
    model = torch.load(scenario["model"], weights_only=False)
    result = bnmem.audit(model, ds, shadow_models=4, train={"epochs": 1}, workers=2, max_examples=20, top_k=2)
    assert result.data["membership"]["shadow_models"] == 4 and result.out is None


SCRIPT = """
from bnmem.executors import get_executor
from bnmem.shadow.copies import train_copy
get_executor("local", progress=False, workers=2).map(train_copy, [{{}}, {{}}])
"""


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_without_main_guard_gets_one_clear_line(tmp_path, guarded):
    body = SCRIPT.replace("{{}}", "{}")
    if guarded:
        body = "if __name__ == '__main__':\n" + textwrap.indent(body, "    ")
    assert _has_main_guard(body) is guarded
    if guarded:
        return  # a guarded script goes on to start the pool (covered by test_workers_from_python)
    script = tmp_path / "my_audit.py"
    script.write_text(body)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "BnmemError" in last and 'if __name__ == "__main__":' in last and "my_audit.py" in last, proc.stderr


def test_main_guard_spellings():
    assert _has_main_guard('if "__main__" == __name__:\n    pass\n')
    assert not _has_main_guard('def f():\n    if __name__ == "__main__":\n        pass\n')


@pytest.mark.parametrize("n, text", [(950, "950"), (6362, "6.4k"), (24_000, "24k"), (11_200_000, "11.2M"),
                                     (138_000_000, "138M")])
def test_parameter_counts_in_sensible_units(n, text):
    assert count_text(n) == text


def test_bad_budget_fails_before_writing(scenario, tmp_path, capsys):
    code = main(["audit", "--quiet", *scenario["flags"], "--max-memory", "lots", "--out", str(tmp_path / "b")])
    assert code == 2 and "lots" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "b").exists()
    with pytest.raises(BnmemError, match="does not accept"):
        bnmem.audit(torch.nn.Linear(3, 2), (torch.zeros(4, 5), torch.zeros(4).long()), out=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_gs_reg_trains_the_shadow_copies_with_the_regularizer(scenario, tmp_path, capsys):
    code = main(["audit", "--quiet", *scenario["flags"], "--gs-reg", "0.5", "--shadow-models", "4", "--epochs", "1",
                 "--max-examples", "40", "--top-k", "3", "--out", str(tmp_path / "g")])
    assert code == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "g" / "audit.json").read_text())
    assert res["membership"]["train"]["gs_reg"] == 0.5
    assert "gs_reg 0.5" in (tmp_path / "g" / "audit.md").read_text()


@pytest.mark.parametrize("args, match", [
    (["--compare-gs-reg", "1"], "--compare-gs-reg compares shadow copies: give --shadow-models"),
    (["--match-accuracy"], "--match-accuracy calibrates shadow copies: give --shadow-models"),
    (["--compare-gs-reg", "0", "--shadow-models", "4"], "--compare-gs-reg: Input should be greater than 0"),
])
def test_shadow_options_without_shadow_models_fail_before_writing(scenario, tmp_path, capsys, args, match):
    code = main(["audit", "--quiet", *scenario["flags"], *args, "--out", str(tmp_path / "x")])
    assert code == 2 and match in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "x").exists()


# ---- flags before any copy trains, and error lines that name their fix (issue 27, items 8 and 9) ----

def test_twelve_outputs_for_ten_classes_are_flagged(scenario, tmp_path, capsys):
    from audit_scenario import small_cnn

    trained = torch.load(scenario["model"], weights_only=False)
    wide = small_cnn()
    wide[-1] = torch.nn.Linear(wide[-1].in_features, 12)
    state = {k: v for k, v in trained.state_dict().items() if not k.startswith(f"{len(wide) - 1}.")}
    wide.load_state_dict(state, strict=False)
    with torch.no_grad():  # the ten trained outputs, two more that never win
        wide[-1].weight[:10], wide[-1].bias[:10] = trained[-1].weight, trained[-1].bias
        wide[-1].weight[10:], wide[-1].bias[10:] = 0.0, -10.0
    torch.save(wide.eval(), tmp_path / "wide.pt")
    flags = [f if f != str(scenario["model"]) else str(tmp_path / "wide.pt") for f in scenario["flags"]]
    code = main(["audit", "--quiet", *flags, "--top-k", "3", "--out", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("bnmem: warning:")]
    assert len(lines) == 1 and "outputs 12 scores per example but the data have 10 classes" in lines[0]
    assert "**Warning:** The model outputs 12 scores" in (tmp_path / "w" / "audit.md").read_text()


def test_an_untrained_model_is_flagged_before_the_copies_and_gets_no_level(scenario, tmp_path, capsys):
    from audit_scenario import small_cnn

    torch.manual_seed(1)
    torch.save(small_cnn().eval(), tmp_path / "untrained.pt")
    flags = [f if f != str(scenario["model"]) else str(tmp_path / "untrained.pt") for f in scenario["flags"]]
    code = main(["audit", *flags, "--shadow-models", "4", "--epochs", "1", "--top-k", "3",
                 "--out", str(tmp_path / "u")])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    flag = cap.err.index("bnmem: warning: the model's training accuracy is")
    assert flag < cap.err.index("membership: training") and "no more than 5 points above chance" in cap.err
    res = json.loads((tmp_path / "u" / "audit.json").read_text())
    assert res["risk"]["level"] == "not assessed" and res["risk"]["title"].endswith("the model is at chance level")
    assert "## Risk: not assessed — the model is at chance level" in cap.out


def test_an_unreadable_image_names_the_file_and_the_fix(scenario, tmp_path, capsys):
    import shutil

    pictures = tmp_path / "pictures"
    shutil.copytree(scenario["pictures"], pictures)
    victim = sorted((pictures / "train" / "3").glob("*.png"))[0]
    victim.write_bytes(victim.read_bytes()[:60])  # truncated mid-file, as a failed copy leaves it
    flags = [f if f != str(scenario["pictures"]) else str(pictures) for f in scenario["flags"]]
    code = main(["audit", "--quiet", *flags, "--out", str(tmp_path / "o")])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and f"cannot read image train/3/{victim.name}" in line
    assert "replace that file with a readable copy or move it out of" in line and not (tmp_path / "o").exists()


def test_a_file_torch_cannot_read_says_what_to_save_without_torchs_internals(scenario, tmp_path, capsys):
    import io
    import pickle

    class WithIds(pickle.Pickler):
        def persistent_id(self, obj):
            return "tensor" if obj == "weights" else None

    buf = io.BytesIO()
    WithIds(buf).dump({"model": "weights"})  # torch.load: "A load persistent id instruction was encountered"
    (tmp_path / "odd.pt").write_bytes(buf.getvalue())
    flags = [f if f != str(scenario["model"]) else str(tmp_path / "odd.pt") for f in scenario["flags"]]
    code = main(["audit", "--quiet", *flags, "--out", str(tmp_path / "o")])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "is not a PyTorch model file" in line and "torch.save(model, path)" in line
    assert "persistent" not in line


def test_the_cli_flags_are_generated_from_the_options_objects():
    """Every field of the data, shadow and audit options is a flag of `bnmem audit`, with the field's default; the
    command's own hand-written parameters are only the model file, the output folder and the recipe."""
    from bnmem.auditing.options import NOT_FLAGS, AuditDataFlags, AuditOptions
    from bnmem.cli.commands.audit import audit as command
    from bnmem.config import ShadowCopies

    params = inspect.signature(command).parameters
    for config, skip in ((AuditDataFlags, set()), (AuditOptions, NOT_FLAGS), (ShadowCopies, {"match_steps"})):
        for name, field in config.model_fields.items():
            if name in skip:
                continue
            assert name in params, name
            default = params[name].default
            want = ",".join(map(str, field.default)) if isinstance(field.default, list) else field.default
            assert default == want, (name, default, want)
    generated = set(AuditDataFlags.model_fields) | set(AuditOptions.model_fields) | set(ShadowCopies.model_fields)
    own = {n for n in params if n not in generated}
    assert own == {"model", "out", "gs_reg", "same_epochs", "epochs", "lr", "batch_size", "optimizer", "momentum",
                   "weight_decay", "schedule", "threads", "device", "set", "quiet"}


def test_data_flag_combinations_are_one_line(tmp_path, capsys):
    stray = "--mean, --mislabeled only apply with --data-folder"
    for argv, text in ((["--label-noise", "0.1", "--data-folder", str(tmp_path)], "build a bnmem dataset"),
                       (["--mean", "0.5", "--mislabeled", "x.csv"], stray)):
        code = main(["audit", "--model", str(tmp_path / "m.pt"), *argv, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and text in err[0], err
