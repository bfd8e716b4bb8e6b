"""A model pickled by a script that defines its class itself (``__main__.Net``): the audit's error says what
works (the class in an importable module, or a TorchScript file), not PYTHONPATH, which cannot help there."""

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
    from bnmem.cli.commands.audit import recipe_warning
    from bnmem.config import TrainConfig

    train = TrainConfig(lr=0.005, momentum=0.9, weight_decay=5e-4).model_dump()
    text = recipe_warning(train, {"momentum", "weight_decay"}, [])
    assert "SGD lr 0.005, momentum 0.9, weight decay 0.0005" in text
    assert "--momentum 0.9 (torch.optim.SGD: 0)" in text and "--weight-decay 0.0005 (torch.optim.SGD: 0)" in text
    assert "--momentum 0.9 (" not in recipe_warning(train, {"weight_decay"}, [])
    assert recipe_warning(train, set(), []) == ""
    assert recipe_warning(train, {"weight_decay"}, ["train.weight_decay=0.0005"]) == ""
    assert recipe_warning(TrainConfig(momentum=0.0, weight_decay=0.0).model_dump(), {"momentum", "weight_decay"},
                          []) == ""  # at the default, but it is PyTorch's too
