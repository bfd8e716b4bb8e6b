"""The shadow-model protocol is declared once (bnmem.config.ShadowProtocol and its field types):
lira, defenses, mitigate and the audit compose it, the CLI's flags are generated from it, and a bad
value is one line naming the setting as the user wrote it (the flag, the study key, the keyword)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from bnmem.cli import main
from bnmem.config import ShadowCopies, ShadowProtocol, shadow_models_problem
from bnmem.errors import BnmemError

SRC = Path(__file__).resolve().parents[1] / "src"


def _configs():
    from bnmem.lenses.defenses import DefensesConfig
    from bnmem.lenses.lira import LiraConfig
    from bnmem.lenses.mitigate import MitigateConfig

    # (config, its field of the protocol's M, whether 0 means off)
    return [(LiraConfig, "shadow_models", False), (DefensesConfig, "shadow_models", False),
            (MitigateConfig, "lira_models", True), (ShadowCopies, "shadow_models", True)]


@pytest.mark.parametrize("m", [0, 2, 5, 7, 1_000_000])
def test_one_rule_names_the_field(m):
    """Every composer rejects a bad M with the protocol's one sentence, at the field's own path."""
    for config, field, off in _configs():
        problem = shadow_models_problem(m, off=off)
        if problem is None:
            assert getattr(config(**{field: m}), field) == m
            continue
        with pytest.raises(ValidationError) as info:
            config(**{field: m})
        (error,) = info.value.errors()
        assert error["loc"] == (field,) and error["msg"] == f"Value error, {problem}", (config, error)


def test_composers_share_the_protocols_fields():
    """The rule travels with the field's type: each composer's field carries the protocol's validator objects."""
    def validators(config, name):
        return [m for m in config.model_fields[name].metadata if hasattr(m, "func")]

    for config, field, off in _configs():
        if off:
            continue
        for name in ("shadow_models", "views"):
            assert validators(config, name) == validators(ShadowProtocol, name) != [], (config, name)
        assert config.model_fields["chunk_size"].metadata == ShadowProtocol.model_fields["chunk_size"].metadata


def test_serialized_configs_keep_their_keys_in_order():
    """config.json (and its hash, the default --out) of each composer: the same keys in the same order as before."""
    from bnmem.lenses.defenses import DefensesConfig
    from bnmem.lenses.lira import LiraConfig
    from bnmem.lenses.mitigate import MitigateConfig

    assert list(LiraConfig().model_dump()) == [
        "recipe", "lr_grid", "max_epochs", "recipe_from", "data", "arch", "norms", "seeds", "train", "shadow_models",
        "chunk_size", "views",
        "query_bn_mode", "query_batch_size", "keep_seed", "query_seed", "save_logits"]
    assert list(DefensesConfig().model_dump()) == [
        "data", "arch", "norms", "seeds", "train", "gs_lambda", "dp_norms", "dp_epsilons", "dp_max_grad_norm",
        "dp_lr", "dp_accountant", "shadow_models", "chunk_size", "replicates", "keep_seed", "views",
        "query_bn_mode", "risk_attack", "risk_metric"]
    assert list(MitigateConfig().model_dump())[-3:] == ["lira_models", "keep_seed", "selection_seeds"]
    defaults = {k: v for k, v in DefensesConfig().model_dump().items()
                if k in ("shadow_models", "chunk_size", "keep_seed", "views", "query_bn_mode")}
    assert defaults == {"shadow_models": 8, "chunk_size": 8, "keep_seed": 0, "views": ["identity"],
                        "query_bn_mode": "eval"}
    assert (LiraConfig().shadow_models, MitigateConfig().lira_models, ShadowCopies().shadow_models) == (32, 0, 0)


def test_a_default_changed_in_the_model_shows_in_help_and_in_the_config():
    """Patch the protocol's default and description before the CLI is built: --help and LiraConfig follow."""
    code = ("import bnmem.config as c\n"
            "f = c.ShadowProtocol.model_fields['shadow_models']\n"
            "f.default, f.description = 30, 'PATCHED shadow-model count'\n"
            "from bnmem.cli import main\n"
            "main(['lira', '--help'])\n"
            "from bnmem.lenses.lira import LiraConfig\n"
            "print('config default', LiraConfig().shadow_models)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(l for l in proc.stdout.splitlines() if "--shadow-models" in l)
    assert "PATCHED shadow-model count" in line and "[default: 30]" in line, line
    assert "config default 30" in proc.stdout


def _one_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("argv, named", [
    (["lira", "--shadow-models", "5"], "--shadow-models: must be even and at least 4, got 5"),
    (["lira", "--shadow-models", "2"], "--shadow-models: must be even and at least 4, got 2"),
    (["lira", "--views", "shift"], "--views: must include identity, got shift"),
    (["defenses", "--shadow-models", "7"], "--shadow-models: must be even and at least 4, got 7"),
    (["defenses", "--shadow-models", "2"], "--shadow-models: must be even and at least 4, got 2"),
    (["mitigate", "--lira-models", "3"], "--lira-models: must be 0 (off) or even and at least 4, got 3"),
    (["mitigate", "--lira-models", "2"], "--lira-models: must be 0 (off) or even and at least 4, got 2"),
    (["audit", "--model", "m.pt", "--shadow-models", "5"], "--shadow-models: must be 0 (off) or even and at least "
                                                           "4, got 5"),
    (["audit", "--model", "m.pt", "--shadow-models", "2"], "--shadow-models: must be 0 (off) or even and at least "
                                                           "4, got 2"),
])
def test_each_command_names_the_flag(tmp_path, capsys, argv, named):
    out = tmp_path / "o"
    assert main([*argv, "--quiet", "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert line.startswith("bnmem: error:") and named in line, line
    assert not out.exists()


@pytest.mark.parametrize("lens, key, value, named", [
    ("lira", "shadow_models", 5, "lenses.lira.shadow_models: must be even and at least 4, got 5"),
    ("mitigate", "lira_models", 2, "lenses.mitigate.lira_models: must be 0 (off) or even and at least 4, got 2"),
    ("lira", "views", ["shift"], "lenses.lira.views: must include identity, got shift"),
])
def test_a_study_names_the_key(tmp_path, capsys, lens, key, value, named):
    doc = {"name": "p", "data": {"dataset": "digits", "train_size": 100}, "train": {"epochs": 1},
           "grid": {"norms": ["batch", "none"], "seeds": [0]}, "lenses": {lens: {key: value}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert named in _one_line(capsys)
    assert not (tmp_path / "o").exists()


def test_python_audit_names_the_keyword():
    import torch

    import bnmem

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
    data = (torch.randn(8, 1, 2, 2), torch.arange(8) % 2)
    with pytest.raises(BnmemError, match=r"^shadow_models: must be 0 \(off\) or even and at least 4, got 3$"):
        bnmem.audit(model, data, shadow_models=3)
    with pytest.raises(BnmemError, match="give --shadow-models too"):
        bnmem.audit(model, data, shadow={"match_accuracy": True})
