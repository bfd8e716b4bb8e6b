"""``--model-card``: a "Privacy evaluation" section in the Hugging Face model-card convention, replaced in place."""

from __future__ import annotations

import json
import re

import pytest

import bnmem
from bnmem.auditing.model_card import BEGIN, END, HEADING, card_section
from bnmem.cli import main
from bnmem.config import DataConfig, ModelConfig


@pytest.fixture(scope="module")
def model_and_data():
    from bnmem.data import load_dataset
    from bnmem.train import seeded_model

    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, train_size=120, seed=0))
    return seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0).eval(), ds


def test_the_section_says_what_was_measured_the_level_and_what_was_not(model_and_data, tmp_path):
    model, ds = model_and_data
    card = tmp_path / "README.md"
    card.write_text("---\nlicense: mit\n---\n# My model\n\nTrained on digits.\n\n## Citation\n\nnone\n")
    res = bnmem.audit(model, ds, shadow_models=4, train={"epochs": 1}, max_examples=40, top_k=5,
                      model_card=card, fail_at="elevated", out=tmp_path / "a")
    text = card.read_text()
    assert text.startswith("---\nlicense: mit\n---\n# My model") and "## Citation\n\nnone" in text  # the card kept
    section = text[text.index(BEGIN):text.index(END)]
    risk = res.risk
    assert f"{HEADING}\n" in section and "### What was measured" in section and "### What was not measured" in section
    assert f"**Membership-inference risk: {risk['level']}**" in section
    assert "4 shadow copies" in section and "BatchNorm in eval mode" in section
    for g in risk["groups"]:  # every group with its interval, as audit.json has it
        assert f"| {g['name']} | {g['n_examples']} |" in section
        assert f"{g['auc']:.2f} [{g['auc_ci'][0]:.2f}, {g['auc_ci'][1]:.2f}]" in section
    assert f"CI gate: {risk['gate']['text']}" in section
    assert "training-data reconstruction" in section and "not an estimate of ε" in section
    assert res.data["data"]["n_train"] == 120 and "120 training" in section
    # a second audit replaces the section, leaving one
    bnmem.audit(model, ds, max_examples=40, top_k=5, model_card=card, out=tmp_path / "b")
    again = card.read_text()
    assert again.count(BEGIN) == again.count(END) == 1 and "## Citation\n\nnone" in again
    assert "**Membership-inference risk: not measured**" in again and "Membership inference: **not measured**" in again


def test_a_new_card_and_the_cli(model_and_data, tmp_path, capsys):
    import torch

    model, _ = model_and_data
    torch.save(model, tmp_path / "m.pt")
    card = tmp_path / "card.md"
    code = main(["audit", "--quiet", "--model", str(tmp_path / "m.pt"), "--label-noise", "0.05", "--train-size", "120",
                 "--max-examples", "40", "--model-card", str(card), "--out", str(tmp_path / "o")])
    assert code == 0 and card.read_text().startswith(BEGIN) and card.read_text().endswith(END + "\n")
    assert f"Privacy evaluation section is in {card}" in capsys.readouterr().out
    res = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert card.read_text() == card_section(res)  # the section is the audit's, nothing else


def test_a_broken_card_fails_before_any_work(model_and_data, tmp_path, capsys):
    import torch

    model, _ = model_and_data
    torch.save(model, tmp_path / "m.pt")
    card = tmp_path / "card.md"
    card.write_text(f"# x\n{BEGIN}\n## Privacy evaluation\n")
    code = main(["audit", "--model", str(tmp_path / "m.pt"), "--model-card", str(card), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and re.search(r"begin marker but not its end", err[0])
    assert not (tmp_path / "o").exists()
