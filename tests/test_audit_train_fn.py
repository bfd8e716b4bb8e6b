"""``--train-fn`` / ``bnmem.audit(train_fn=...)``: the shadow copies trained by the user's own loop, and the copies
kept under their keys so that a rerun trains only what is missing."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

import bnmem
from bnmem.auditing.calibration import ACCURACY_MARGIN
from bnmem.cli import main
from bnmem.config import DataConfig, TrainConfig
from bnmem.data import load_dataset

EPOCHS, BATCH, LR, SMOOTHING = 12, 32, 0.01, 0.1
# Every call of a training function below, (seed, examples): what the reuse tests count.
CALLS: list[tuple[int, int]] = []


def small_bn_net() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 48), nn.BatchNorm1d(48), nn.ReLU(), nn.Linear(48, 10))


def custom_loop(model: nn.Module, train_dataset: torch.utils.data.Dataset, seed: int) -> nn.Module:
    """A loop bnmem's recipe flags cannot say: Adam, label smoothing, a cosine schedule written by hand (per
    step, from LR to 0), shuffling by a generator of its own."""
    CALLS.append((seed, len(train_dataset)))
    g = torch.Generator().manual_seed(1000 + seed)
    loader = torch.utils.data.DataLoader(train_dataset, batch_size=BATCH, shuffle=True, generator=g, drop_last=True)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    total, step = EPOCHS * len(loader), 0
    model.train()
    for _ in range(EPOCHS):
        for x, y in loader:
            for group in opt.param_groups:
                group["lr"] = 0.5 * LR * (1 + math.cos(math.pi * step / total))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y, label_smoothing=SMOOTHING).backward()
            opt.step()
            step += 1
    return model


def returns_nothing(model, train_dataset, seed):
    return None


def takes_two(model, train_dataset):
    return model


NOT_CALLABLE = 3


@pytest.fixture(scope="module")
def data():
    return load_dataset(DataConfig(dataset="digits", train_size=400, seed=0))


@pytest.fixture(scope="module")
def target(data):
    """The user's model: the same loop on the whole training set."""
    torch.manual_seed(0)
    model = custom_loop(small_bn_net(), torch.utils.data.TensorDataset(data.x_train, data.y_train), 0)
    return model.eval()


def test_a_custom_loop_trains_the_copies_and_they_resemble_the_model(data, target):
    CALLS.clear()
    result = bnmem.audit(target, data, shadow_models=4, train_fn=custom_loop, max_examples=50, top_k=5)
    mem, cal = result.data["membership"], result.data["risk"]["calibration"]
    # the function trained every copy, on bnmem's halves (complementary pairs of 200) with the copies' seeds
    assert sorted(CALLS) == [(0, 200), (1, 200), (2, 200), (3, 200)]
    assert mem["train_fn"]["name"].endswith(":custom_loop") and len(mem["train_fn"]["source_sha256"]) == 64
    assert mem["train"]["train_fn"] == mem["train_fn"]["name"] and "epochs" not in mem["train"]
    # the resemblance check applies: the copies' training accuracy on their half beside the model's
    assert cal["model_train"] == result.data["accuracy"]["train_acc"]
    assert abs(cal["train_gap"]) <= ACCURACY_MARGIN and cal["assessed"], cal
    assert result.risk["level"] not in ("not assessed", "not measured")
    assert "Trained by: your training function `" in result.markdown
    assert mem["cost"]["steps"] is None and mem["cost"]["trained"] == 4


def test_the_copies_are_the_functions_own(data, target):
    """Copy m is fresh_copy(model, m) trained by the function on keep row m (seed m set before the call):
    retrained here by hand, it gives the audit's φ for that copy."""
    from bnmem.attacks import paired_keep_matrix
    from bnmem.shadow.copies import CopyTraining, fresh_copy, query_copies

    keep = paired_keep_matrix(4, data.n_train, 0)
    q = query_copies(target, data, keep, CopyTraining(TrainConfig(), custom_loop, "t:custom_loop"))
    net, _, _ = fresh_copy(target, seed=3)
    torch.manual_seed(3)
    idx = torch.as_tensor(np.flatnonzero(keep[3]))
    by_hand = custom_loop(net, torch.utils.data.TensorDataset(data.x_train[idx], data.y_train[idx]), 3).eval()
    with torch.no_grad():
        logits = by_hand(data.x_train).double()
    y = data.y_train
    correct = logits.gather(1, y[:, None])[:, 0]
    others = logits.clone()
    others[torch.arange(len(y)), y] = -torch.inf
    phi = (correct - torch.logsumexp(others, 1)).numpy()
    np.testing.assert_allclose(q.phi[3, :, 0], phi, rtol=1e-5, atol=1e-5)


def test_a_rerun_with_twice_the_copies_trains_only_the_new_half(data, target, tmp_path):
    CALLS.clear()
    first = bnmem.audit(target, data, shadow_models=4, train_fn=custom_loop, max_examples=20, top_k=2,
                        out=tmp_path)
    assert len(CALLS) == 4 and first.data["membership"]["cost"]["reused"] == 0
    CALLS.clear()
    second = bnmem.audit(target, data, shadow_models=8, train_fn=custom_loop, max_examples=20, top_k=2,
                         out=tmp_path)
    assert sorted(s for s, _ in CALLS) == [4, 5, 6, 7]  # only the new half trained
    cost = second.data["membership"]["cost"]
    assert cost["reused"] == 4 and cost["trained"] == 4 and cost["models"] == 8
    # the reused copies answer as they did: the first four copies' accuracies are the first audit's
    assert second.data["membership"]["shadow_accuracy_per_copy"][:4] == \
        first.data["membership"]["shadow_accuracy_per_copy"]
    CALLS.clear()
    bnmem.audit(target, data, shadow_models=8, train_fn=custom_loop, max_examples=20, top_k=2, fail_at="elevated",
                out=tmp_path)
    assert CALLS == []  # another gate: nothing to train
    CALLS.clear()
    bnmem.audit(target, data, shadow_models=4, train_fn=takes_three_too, max_examples=20, top_k=2, out=tmp_path)
    assert len(CALLS) == 4  # another training function: other copies


def takes_three_too(model, train_dataset, seed):
    """Another training function (the same loop under another name and source line): other copies."""
    return custom_loop(model, train_dataset, seed)


@pytest.mark.parametrize("spec, fragment", [
    ("no_colon", "must be 'module:function'"),
    ("no_such_module_here:train", "cannot import no_such_module_here"),
    ("test_audit_train_fn:missing", "has no function 'missing'"),
    ("test_audit_train_fn:NOT_CALLABLE", "has no function 'NOT_CALLABLE'"),
    ("test_audit_train_fn:takes_two", "must take (model, train_dataset, seed)"),
])
def test_a_bad_train_fn_is_one_line(spec, fragment, tmp_path, capsys):
    code = main(["audit", "--quiet", "--model", str(tmp_path / "m.pt"), "--shadow-models", "4", "--train-fn", spec,
                 "--out", str(tmp_path / "o")])
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("bnmem: error:") and fragment in lines[0], lines
    assert not (tmp_path / "o").exists()


def test_a_function_that_returns_no_model_is_one_line(data, target, tmp_path, capsys):
    torch.save(target, tmp_path / "m.pt")
    code = main(["audit", "--quiet", "--model", str(tmp_path / "m.pt"), "--train-size", "400", "--shadow-models", "4",
                 "--max-examples", "10", "--train-fn", "test_audit_train_fn:returns_nothing",
                 "--out", str(tmp_path / "o")])
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert code == 2 and lines[-1].startswith("bnmem: error:"), lines
    assert "returned NoneType, not the trained model" in lines[-1]
    assert not list((tmp_path / "o" / "shadow").rglob("DONE"))  # no copy looks finished


def test_train_fn_with_an_option_that_needs_bnmems_recipe_is_refused(data, target):
    with pytest.raises(bnmem.BnmemError, match="drop --match-accuracy"):
        bnmem.audit(target, data, shadow_models=4, train_fn=custom_loop, match_accuracy=True)
    with pytest.raises(bnmem.BnmemError, match="give --shadow-models too"):
        bnmem.audit(target, data, train_fn=custom_loop)


def test_canaries_added_to_an_audit_folder_reuse_its_copies(data, target, tmp_path, capsys):
    """The issue's refusal ("holds a run with a different configuration"): --canaries added to a finished audit
    folder now runs, and trains no shadow copy again (the one-run audit's own copy is all it trains)."""
    torch.save(target, tmp_path / "m.pt")
    flags = ["audit", "--quiet", "--model", str(tmp_path / "m.pt"), "--train-size", "400", "--shadow-models", "4",
             "--max-examples", "10", "--top-k", "2", "--train-fn", "test_audit_train_fn:custom_loop",
             "--out", str(tmp_path / "o")]
    CALLS.clear()
    assert main(flags) == 0, capsys.readouterr().err
    assert len(CALLS) == 4
    CALLS.clear()
    code = main(flags + ["--canaries", "40"])
    err = capsys.readouterr().err
    assert code == 0, err
    res = json.loads((tmp_path / "o" / "audit.json").read_text())
    # the one-run audit's copy alone trained: all the data and the canaries that came up IN
    assert len(CALLS) == 1 and CALLS[0][1] == 400 + res["one_run"]["canaries_in"]
    assert "membership: training 0 of 4 shadow copies" in err and "4 reused" in err
    assert res["one_run"]["canaries"] == 40 and res["membership"]["cost"]["reused"] == 4
    config = json.loads((tmp_path / "o" / "audit_config.json").read_text())
    assert config["canaries"] == 40


class Interrupted(Exception):
    pass


def test_an_interrupted_audit_leaves_no_half_copy_and_the_rerun_trains_the_rest(data, target, tmp_path):
    """Stopped while its third copy trains: the two finished copies are kept, the third leaves no DONE marker
    (nothing that looks like a finished copy), and the same call again trains only the two it lacks."""
    from bnmem.attacks import paired_keep_matrix
    from bnmem.shadow.copies import CopySet, CopyTraining, copy_dir, query_copies

    def stops_at_the_third(model, train_dataset, seed):
        if len(CALLS) == 2:
            CALLS.append((seed, -1))
            raise Interrupted
        return custom_loop(model, train_dataset, seed)

    keep = paired_keep_matrix(4, data.n_train, 0)
    training = CopyTraining(TrainConfig(), stops_at_the_third, "t:stops")
    CALLS.clear()
    with pytest.raises(Interrupted):
        query_copies(target, data, keep, training, tmp_path)
    copies = CopySet.of(target, data, keep, training)
    assert copies.pending(tmp_path) == [2, 3]
    assert (copy_dir(tmp_path, copies.keys[2]) / "copy.json").is_file()  # started, never marked finished
    assert not (copy_dir(tmp_path, copies.keys[2]) / "model.pt").exists()
    CALLS.clear()
    done = query_copies(target, data, keep, training, tmp_path)
    assert sorted(s for s, _ in CALLS) == [2, 3] and done.trained == 2 and copies.pending(tmp_path) == []


def test_a_copys_key_changes_with_each_thing_that_determines_it(data, target):
    """The model's tensors, the data, the recipe, the training function, the member split and the seed each give
    another key; the same inputs give the same key (so a rerun finds its copies)."""
    import copy

    from bnmem.attacks import paired_keep_matrix
    from bnmem.shadow.copies import CopySet, CopyTraining

    keep = paired_keep_matrix(4, data.n_train, 0)
    bnmem_trains = CopyTraining(TrainConfig(epochs=3))
    key = CopySet.of(target, data, keep, bnmem_trains).keys
    assert key == CopySet.of(copy.deepcopy(target), data, keep.copy(), CopyTraining(TrainConfig(epochs=3))).keys
    assert len(set(key)) == 4  # seed and split differ between copies
    other_model = copy.deepcopy(target)
    with torch.no_grad():
        other_model[1].weight[0, 0] += 1e-3  # a parameter a reset re-draws still names another model
    other_data = copy.deepcopy(data)
    other_data.x_train[0, 0, 0, 0] += 1e-3
    variants = [CopySet.of(other_model, data, keep, bnmem_trains), CopySet.of(target, other_data, keep, bnmem_trains),
                CopySet.of(target, data, keep, CopyTraining(TrainConfig(epochs=4))),
                CopySet.of(target, data, keep, CopyTraining(TrainConfig(epochs=3, threads=2))),
                CopySet.of(target, data, keep, CopyTraining(TrainConfig(), custom_loop, "m:custom_loop", "a" * 64)),
                CopySet.of(target, data, keep, CopyTraining(TrainConfig(), custom_loop, "m:custom_loop", "b" * 64)),
                CopySet.of(target, data, paired_keep_matrix(4, data.n_train, 1), bnmem_trains)]
    for v in variants:
        assert not set(v.keys) & set(key)
    # the first copies of a larger set are these
    assert CopySet.of(target, data, paired_keep_matrix(8, data.n_train, 0), bnmem_trains).keys[:4] == key


def test_a_function_without_a_source_file_is_named_by_its_code_and_an_object_never_reused():
    from bnmem.shadow.copies import function_identity

    namespace: dict = {}
    exec("def train(model, data, seed):\n    return model\n", namespace)
    name, ident = function_identity(namespace["train"])
    assert name.endswith(":train") and ident.startswith("code:") and function_identity(namespace["train"])[1] == ident
    exec("def train(model, data, seed):\n    return model.eval()\n", namespace)  # edited: another identity
    assert function_identity(namespace["train"])[1] != ident

    class Trainer:
        def __call__(self, model, data, seed):
            return model

    assert function_identity(Trainer())[1] != function_identity(Trainer())[1]  # cannot be identified: fresh each time
