"""The audit says what it means: a model pickled by a script that defines its class itself (``__main__.Net``)
gets the fix that works (not PYTHONPATH), an extra output is named as one, recipe flags left at bnmem's defaults
that differ from PyTorch's are named, the ROC plot stops where the non-member scores do, and the headline says
which group sets the level and what its terms mean."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from bnmem.auditing.load import load_model_file
from bnmem.errors import BnmemError


def test_a_class_defined_in_the_training_script_gets_the_fix_that_works(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 2)

            def forward(self, x):
                return self.fc(x)

        torch.save(Net(), sys.argv[1])
        torch.jit.save(torch.jit.script(Net()), sys.argv[2])
    """))
    subprocess.run([sys.executable, str(script), str(tmp_path / "model.pt"), str(tmp_path / "scripted.pt")],
                   check=True, cwd=tmp_path, timeout=300)
    with pytest.raises(BnmemError) as err:
        load_model_file(tmp_path / "model.pt")
    text = str(err.value)
    assert "defined in the script that saved it" in text and "PYTHONPATH" not in text
    assert "its own module" in text and "torch.jit.save(torch.jit.script(model), path)" in text
    # and the fix it names works: the TorchScript file loads
    model, kind = load_model_file(tmp_path / "scripted.pt")
    assert model(torch.zeros(1, 4)).shape == (1, 2)


@pytest.mark.parametrize("n_outputs,words", [(4, "output 3 is never a label"), (6, "outputs 3–5 are never")])
def test_more_outputs_than_classes_names_the_extra_outputs(n_outputs, words):
    """3 classes: one extra output is 'output 3', not 'outputs 3-3'."""
    from types import SimpleNamespace

    from bnmem.auditing.calibration import model_checks

    ds = SimpleNamespace(num_classes=3, n_train=6, y_train=torch.tensor([0, 1, 2, 0, 1, 2]))
    (flag,) = [f for f in model_checks({"train_acc": 1.0}, ds, n_outputs) if f["kind"] == "outputs"]
    assert words in flag["text"] and "3-3" not in flag["text"]


def test_recipe_flags_left_at_bnmem_defaults_that_differ_from_pytorch_are_named():
    """--momentum and --weight-decay default to 0.9 and 5e-4 here, 0 in torch.optim.SGD: a command that leaves
    them out is told the recipe the copies use and which flags to give; one that gives them is not."""
    from bnmem.cli.commands.audit import BNMEM_DEFAULTS, recipe_warning
    from bnmem.config import TrainConfig

    assert BNMEM_DEFAULTS == {k: getattr(TrainConfig(), k) for k in BNMEM_DEFAULTS}  # the recipe's own defaults
    train = TrainConfig(lr=0.005, momentum=0.9, weight_decay=5e-4).model_dump()
    text = recipe_warning(train, {"momentum", "weight_decay"}, [])
    assert "SGD lr 0.005, momentum 0.9, weight decay 0.0005" in text
    assert "--momentum 0.9 (torch.optim.SGD: 0)" in text and "--weight-decay 0.0005 (torch.optim.SGD: 0)" in text
    assert "--momentum 0.9 (" not in recipe_warning(train, {"weight_decay"}, [])
    assert recipe_warning(train, set(), []) == ""
    assert recipe_warning(train, {"weight_decay"}, ["train.weight_decay=0.0005"]) == ""
    assert recipe_warning(TrainConfig(momentum=0.0, weight_decay=0.0).model_dump(), {"momentum", "weight_decay"},
                          []) == ""  # at the default, but it is PyTorch's too


def test_the_recipe_warning_comes_before_any_copy_trains(tmp_path, capsys):
    """The issue's run printed it only after the whole audit; now it comes with the audit's other warnings, once the
    inputs are checked and before the cost line and the first copy, and the report records it."""
    import json

    import torch

    from bnmem.cli import main
    from bnmem.config import DataConfig, ModelConfig
    from bnmem.data import load_dataset
    from bnmem.train import seeded_model

    ds = load_dataset(DataConfig(dataset="digits", train_size=120))
    torch.save(seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0), tmp_path / "m.pt")
    code = main(["audit", "--model", str(tmp_path / "m.pt"), "--train-size", "120", "--max-examples", "20",
                 "--shadow-models", "4", "--epochs", "1", "--momentum", "0", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 0, err
    warning = err.index("bnmem: warning: the shadow copies train with SGD")
    assert warning < err.index("membership: training") < err.index("shadow 0")
    assert "--weight-decay 0.0005 (torch.optim.SGD: 0)" in err and "--momentum 0.9" not in err
    assert err.count("left at bnmem's defaults") == 1
    res = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert [w["kind"] for w in res["warnings"]].count("recipe") == 1


def test_roc_plot_stops_at_the_lowest_resolvable_fpr_and_names_groups_as_the_text(tmp_path, monkeypatch):
    """With 40 non-member scores a curve below FPR 1/40 is not estimable: it is not drawn there; the outliers of
    an image folder are 'files listed as mislabeled' in the legend as in the text."""
    import bnmem.figures.roc
    from bnmem.auditing.html import roc_figure

    drawn = {}
    monkeypatch.setattr(bnmem.figures.roc, "plot_roc",
                        lambda curves, path, title="": (drawn.update(curves), path.write_bytes(b"png")))
    fpr = [0.0, 0.01, 0.025, 0.05, 0.5, 1.0]
    tpr = [0.0, 0.1, 0.2, 0.3, 0.8, 1.0]
    leak = {"auc": 0.6, "nonmember_scores": 40}
    result = {"membership": {"shadow_models": 4, "roc": {"rmia": {"outliers": {"fpr": fpr, "tpr": tpr}}},
                             "leakage": {"rmia": {"outliers": leak}}},
              "risk": {"groups": [{"group": "outliers", "attack": "rmia",
                                   "name": "the 3 files listed as mislabeled"}]}}
    assert roc_figure(result, tmp_path / "roc.png")
    (label, (f, t)), = drawn.items()
    assert label.startswith("3 files listed as mislabeled, ") and "known outliers" not in label
    assert min(f) == 0.025 and list(t) == [0.2, 0.3, 0.8, 1.0]


def _group(group, name, lower, upper, ci):
    return {"group": group, "name": name, "level_lower": lower, "level_upper": upper, "auc": sum(ci) / 2,
            "auc_ci": ci, "attack": "online", "level_point_auc": lower, "level_lower_bound": lower}


def test_the_headline_says_which_group_sets_each_end_of_the_level():
    """'moderate to elevated' while two of three groups are 'not shown to leak': the sentence names the group
    behind each end."""
    from bnmem.auditing.level import audit_level
    from bnmem.auditing.report import setter_sentence

    groups = [_group("all", "the whole training set (360 examples)", "low", "low", [0.49, 0.53]),
              _group("outliers", "the 30 files listed as mislabeled", "moderate", "moderate", [0.56, 0.59]),
              _group("most_exposed", "the 20 examples with the largest gradient norms", "low", "elevated",
                     [0.50, 0.66])]
    assert audit_level(groups)["level"] == "moderate to elevated"
    text = setter_sentence(groups)
    assert text.startswith("The level's lower end (moderate) is set by the 30 files listed as mislabeled (AUC")
    assert "its upper end (elevated) by the 20 examples with the largest gradient norms (AUC 0.58 [0.50, 0.66]" in text
    one = setter_sentence(groups[:2])
    assert one.startswith("The level is set by the 30 files listed as mislabeled (AUC 0.57 [0.56, 0.59], online LiRA)")


def test_the_terms_the_answer_uses_are_explained():
    from bnmem.auditing.report import TERMS, terms_used

    used = terms_used("online LiRA over 8 copies (rule 3, 2026-12-01); point AUC low", "RMIA: AUC 0.6")
    assert list(used) == ["online LiRA", "RMIA", "rule 3", "point AUC"] and all(used.values())
    assert {"most exposed", "ε"} <= set(TERMS) and "most exposed" not in used
    # one meaning: "most exposed" is exposure.csv's ranking; the gradient-norm group is named for its gradients
    assert list(terms_used("The most exposed file is a.png")) == ["most exposed"]
