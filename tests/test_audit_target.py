"""The target-model audit and the slices (issue 48) on the practitioner's PNG scenario (tests/audit_scenario.py): a
BN model trained in plain PyTorch on an ImageFolder, its 480 training files (members) and a held-out folder of
200 digits it never saw (non-members), audited through ``bnmem audit --non-members``.

Measured here: the shipped model's AUC (members against held-out files) with its interval beside the copies', the
gate on the target (exit 3 with a bound below what the data rule out, 0 with one above), the slices in audit.json
(schema-valid), exposure.csv and both reports, the gate on a slice, and one line (exit 2) for a bad budget.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from audit_scenario import N_TEST, N_TRAIN, SIZE, write_scenario

from bnmem.auditing.gate import NOT_ASSESSED_EXIT, PASSED, REACHED
from bnmem.cli import main

N_HELD_OUT = 200


def write_held_out(root, seed: int = 0):
    """N_HELD_OUT digits the scenario did not use, as PNGs in class folders (the images the model never saw)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))  # write_pictures' draw: its first 600 used
    folder = root / "held_out"
    for i in order[N_TRAIN + N_TEST: N_TRAIN + N_TEST + N_HELD_OUT]:
        d = folder / str(int(digits.target[i]))
        d.mkdir(parents=True, exist_ok=True)
        img = Image.fromarray((digits.images[i] * (255 / 16)).astype(np.uint8), mode="L")
        img.resize((SIZE, SIZE), Image.Resampling.BILINEAR).save(d / f"{i:04d}.png")
    return folder


def run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = tmp_path_factory.mktemp("target")
    s = write_scenario(root)
    s["held_out"] = write_held_out(root)
    s["out"] = root / "audit"
    s["argv"] = ["audit", "--quiet", *s["flags"], "--channels", "3", "--shadow-models", "4",
                 "--non-members", str(s["held_out"]), "--out", str(s["out"])]
    return s


@pytest.fixture(scope="module")
def first(scenario, tmp_path_factory):
    """The audit with a gate on the target at AUC 0.5: whatever the model leaks above chance, ruled out or not."""
    import time

    from _pytest.capture import CaptureFixture  # noqa: F401 - module scope: capture by hand
    import contextlib
    import io

    err = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(err):
        code = main(scenario["argv"] + ["--fail-at", "target:auc=0.5"])
    seconds = time.perf_counter() - t
    res = json.loads((scenario["out"] / "audit.json").read_text())
    return {"code": code, "res": res, "stdout": out.getvalue(), "stderr": err.getvalue(), "seconds": seconds}


def test_the_report_gives_the_target_model_auc_with_its_interval_next_to_the_copies(first):
    res, risk = first["res"], first["res"]["risk"]
    tgt = res["target"]
    assert tgt["members"] == N_TRAIN and tgt["non_members"] == N_HELD_OUT and tgt["references"] == 4
    assert set(tgt["leakage"]) == {"offline_fixed_variance", "rmia_offline", "loss"}
    for attack, subs in tgt["leakage"].items():
        g = subs["all"]
        assert g["member_scores"] == N_TRAIN and g["nonmember_scores"] == N_HELD_OUT and g["targets"] == 1
        lo, hi = g["ci"]["auc"]
        assert lo <= g["auc"] <= hi and hi - lo > 0
        assert g["ci"]["tpr_at_1pct_fpr"] is not None and g["tpr_at_0.1pct_fpr"] is None  # 200 held out: 1% only
    read = risk["target"]
    best = max(tgt["leakage"], key=lambda a: tgt["leakage"][a]["all"]["ci"]["auc"][0])
    assert read["measured"] and read["attack"] == best and read["auc_ci"] == tgt["leakage"][best]["all"]["ci"]["auc"]
    # the headline gives both answers: the copies' (recipe) and the shipped model's, each with its interval
    whole = next(g for g in risk["groups"] if g["group"] == "all")
    copies = f"AUC {whole['auc']:.2f} [{whole['auc_ci'][0]:.2f}, {whole['auc_ci'][1]:.2f}]"
    target = f"AUC {read['auc']:.2f} [{read['auc_ci'][0]:.2f}, {read['auc_ci'][1]:.2f}]"
    assert copies in risk["headline"] and target in risk["headline"] and "held-out files" in risk["headline"]
    assert risk["headline"].index(copies) < risk["headline"].index(target) < risk["headline"].index("most exposed file")
    assert "## Your model as shipped: members against held-out files" in first["stdout"]
    print(f"\ntarget {read['attack']} {target}; copies {whole['attack']} {copies}; audit {first['seconds']:.0f} s")


def test_the_gate_on_the_target_fails_below_the_leak_and_passes_above_it(first, scenario, capsys):
    lo = first["res"]["risk"]["target"]["auc_ci"][0]
    gate = first["res"]["risk"]["gate"]
    assert gate["reading"] == lo and "from your model as shipped" in gate["text"]
    assert first["code"] == (REACHED if lo >= 0.5 else PASSED) == gate["exit_code"]
    assert first["code"] == REACHED, lo  # measured: the shipped model leaks (its lower AUC end is above 0.5)
    assert "bnmem: gate target:auc=0.5: FAILED (exit 3)" in first["stderr"]
    above = round(lo + 0.05, 2)
    code, _, err = run(capsys, scenario["argv"] + ["--fail-at", f"target:auc={above}"])  # the copies are reused
    assert code == PASSED and f"gate target:auc={above:g}: passed (exit 0)" in err


def test_slices_in_audit_json_exposure_csv_and_both_reports(first, scenario):
    jsonschema = pytest.importorskip("jsonschema")
    from bnmem.auditing.html import write_audit_report
    from bnmem.schemas import load_schema

    res, out = first["res"], scenario["out"]
    jsonschema.Draft202012Validator(load_schema()).validate(res)
    sl = res["membership"]["slices"]
    classes = [f"class={c}" for c in res["data"].get("classes", [str(i) for i in range(10)])]
    assert set(sl["sizes"]) <= set(classes) | {"correct", "incorrect"} and "correct" in sl["sizes"]
    assert sum(sl["sizes"][c] for c in classes if c in sl["sizes"]) == N_TRAIN
    assert sl["sizes"]["correct"] + sl["sizes"].get("incorrect", 0) == N_TRAIN
    measured = [k for k in sl["sizes"] if k not in sl["skipped"]]
    assert all(k in sl["leakage"]["rmia"] for k in measured) and all(sl["sizes"][k] < 10 for k in sl["skipped"])
    items = {g["group"]: g for g in res["risk"]["slices"]["items"]}
    for name, g in items.items():  # each slice read from both ends of its interval (a wide one never reads "low")
        assert g["level_upper"] != "low" or g["auc_ci"][1] < 0.55
    # the target's slices: members and held-out files of the class, each side large enough
    assert "class=3" in res["target"]["leakage"]["loss"] or "class=3" in res["target"]["skipped"]
    rows = list(csv.DictReader((out / "exposure.csv").open()))
    header = list(rows[0])
    jsonschema.Draft202012Validator(load_schema()["$defs"]["exposure_columns"]).validate(header)
    assert {"class", "correct", "target_loss", "target_rmia_offline", "target_offline_fixed_variance"} <= set(header)
    assert sum(r["correct"] == "true" for r in rows) == sl["sizes"]["correct"]
    by_class = {c: sum(r["class"] == c.split("=")[1] for r in rows) for c in classes}
    assert all(by_class[c] == sl["sizes"].get(c, 0) for c in classes)
    md = (out / "audit.md").read_text()
    assert "## Slices (shadow copies)" in md and "| class=0 |" in md and "| correct |" in md
    page = write_audit_report(out).read_text()
    assert "Slices (shadow copies)" in page and "Your model as shipped" in page
    print("\nslices (copies): " + "; ".join(f"{k} {g['auc']:.2f} [{g['auc_ci'][0]:.2f}, {g['auc_ci'][1]:.2f}]"
                                            for k, g in items.items()))


def test_the_gate_on_a_slice(first, scenario, capsys):
    items = {g["group"]: g for g in first["res"]["risk"]["slices"]["items"]}
    name = "class=7" if "class=7" in items else next(iter(items))
    lo = items[name]["auc_ci"][0]
    for bound, want in ((round(max(lo - 0.02, 0.01), 2), REACHED), (round(lo + 0.02, 2), PASSED)):
        code, _, err = run(capsys, scenario["argv"] + ["--fail-at", f"{name}:auc={bound}"])
        res = json.loads((scenario["out"] / "audit.json").read_text())
        assert code == want == res["risk"]["gate"]["exit_code"], err
        assert res["risk"]["gate"]["reading"] == lo and "from the shadow copies" in err


def test_bad_gate_grammar_and_unknown_class_are_one_line(scenario, capsys):
    for budget, says in (("klass=7:auc=0.6", "optionally after target:"), ("class=cat:auc=0.6", "no class 'cat'")):
        code, out, err = run(capsys, scenario["argv"] + ["--fail-at", budget])
        lines = [ln for ln in err.strip().splitlines() if ln]
        assert code == 2 and len(lines) == 1 and says in lines[0] and "Traceback" not in err, err


def test_a_gate_on_the_target_needs_a_held_out_set(scenario, tmp_path, capsys):
    argv = [a for a in scenario["argv"] if a != str(scenario["held_out"]) and a != "--non-members"]
    code, _, err = run(capsys, argv[:-1] + [str(tmp_path / "a"), "--fail-at", "target:auc=0.6"])
    assert code == 2 and "--non-members" in err and len(err.strip().splitlines()) == 1


def test_without_a_held_out_set_one_line_says_what_is_not_measured(tmp_path):
    import bnmem
    from bnmem.auditing.target import NO_HELD_OUT
    from bnmem.config import DataConfig, ModelConfig
    from bnmem.data import load_dataset
    from bnmem.train import seeded_model

    ds = load_dataset(DataConfig(dataset="digits", train_size=60, seed=0))
    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0).eval()
    r = bnmem.audit(model, ds, max_examples=20, top_k=3)
    assert r.data["risk"]["target"] == {"measured": False, "text": NO_HELD_OUT}
    assert [ln for ln in r.markdown.splitlines() if "--non-members" in ln] == [f"_{NO_HELD_OUT}_"]
    assert "target" not in r.data
    held = bnmem.audit(model, ds, max_examples=20, top_k=3, non_members=(ds.x_test[:40], ds.y_test[:40]))
    assert held.data["target"]["leakage"].keys() == {"loss"}  # no copies: the reference-free attack alone
    assert held.data["risk"]["target"]["measured"] and "Your model as shipped" in held.data["risk"]["headline"]


def test_each_candidate_gets_half_the_copies_as_out_references_and_never_an_in_one():
    from bnmem.attacks import keep_matrix
    from bnmem.auditing.target import out_references

    keep = keep_matrix(8, 50, 0)
    idx = out_references(keep, 30)
    assert idx.shape == (4, 80)
    assert not keep[idx[:, :50], np.arange(50)].any()  # a member's references never trained on it
    assert all(len(set(idx[:, j])) == 4 for j in range(80))  # four distinct copies for every candidate


def synthetic(shift: float, seed: int = 0):
    """Copies and a target on 200 members and 200 held-out examples: φ = the example's own level, plus ``shift``
    on a model that trained on it (the copies' IN side; the target's members with ``shift``)."""
    from bnmem.attacks import keep_matrix
    from bnmem.auditing.target import TargetQuery

    rng = np.random.default_rng(seed)
    m, n, h, p = 8, 200, 200, 100
    level = rng.normal(0, 1, n + h + p)
    keep = keep_matrix(m, n, 1)
    noise = lambda *shape: rng.normal(0, 0.2, shape)  # noqa: E731
    copies = level[None, :] + noise(m, n + h + p)
    copies[:, :n] += 2.0 * keep  # a copy that trained on an example fits it better
    refs = {"keep": keep, "phi": copies[:, :n, None], "held_out_phi": copies[:, n:n + h, None],
            "population_phi": copies[:, n + h:, None]}
    target = level + noise(n + h + p)
    target[:n] += shift
    t = TargetQuery(phi_train=target[:n, None], phi_held=target[n:n + h, None], phi_pop=target[n + h:, None],
                    pred_train=np.zeros(n, int), pred_held=np.zeros(h, int))
    return t, refs, np.r_[np.ones(n, bool), np.zeros(h, bool)]


@pytest.mark.parametrize("shift", [2.0, 0.0])
def test_the_target_attacks_find_a_model_that_fits_its_members_and_nothing_in_one_that_does_not(shift):
    """Members fitted as the copies fit their IN examples: the reference attacks separate them almost perfectly (the
    per-example levels cancel against the OUT references); members fitted like held-out files: every interval holds
    0.5 (a procedure that treated members and non-members differently would not)."""
    from bnmem.auditing.leakage import group_metrics
    from bnmem.auditing.target import target_scores

    t, refs, member = synthetic(shift)
    scores, info = target_scores(t, refs, np.ones(100, bool))
    assert set(scores) == {"offline_fixed_variance", "rmia_offline", "loss"} and info["rmia_a"] is not None
    got = {a: group_metrics(s[None], member[None]) for a, s in scores.items()}
    if shift:
        assert got["offline_fixed_variance"]["auc"] > 0.95 and got["rmia_offline"]["auc"] > 0.95
        assert got["loss"]["auc"] < got["offline_fixed_variance"]["auc"]  # the references remove each level
    else:
        for a, g in got.items():
            assert g["ci"]["auc"][0] <= 0.5 <= g["ci"]["auc"][1], (a, g["auc"], g["ci"]["auc"])


def test_dropping_the_held_out_set_reuses_the_copies_and_says_what_is_not_measured(first, scenario, capsys):
    """The copies do not depend on the held-out set: the same folder without --non-members trains none of them again
    (run last: it rewrites the scenario's audit files)."""
    from bnmem.auditing.target import NO_HELD_OUT

    i = scenario["argv"].index("--non-members")
    code, out, _ = run(capsys, scenario["argv"][:i] + scenario["argv"][i + 2:])
    res = json.loads((scenario["out"] / "audit.json").read_text())
    assert code == 0 and res["membership"]["cost"]["finished"] == 4 and "target" not in res
    assert res["risk"]["target"] == {"measured": False, "text": NO_HELD_OUT} and NO_HELD_OUT in out


LOOP_MODULE = '''
"""The team's own training loop, as a module beside the model: what `--train-fn scenario_loop:train` names."""
import torch
from torch import nn

EPOCHS, BATCH, LR, MOMENTUM = {epochs}, {batch}, {lr}, {momentum}


def train(model, train_dataset, seed):
    # twice the epochs on half the data: as many steps as the shipped model took
    loader = torch.utils.data.DataLoader(train_dataset, batch_size=BATCH, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=5e-4)
    model.train()
    for _ in range(2 * EPOCHS):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return model
'''


def test_copies_trained_by_your_own_function_and_the_shipped_model_attacked_together(scenario, tmp_path, capsys):
    """The issue's whole scenario in one audit: a BN model trained by the team's own loop (not bnmem's trainer),
    its copies trained by that loop through --train-fn, and the shipped model attacked on its members against the
    held-out folder; the target's AUC with its interval beside the copies', and the target gate both ways."""
    import audit_scenario as sc

    (scenario["model"].parent / "scenario_loop.py").write_text(
        LOOP_MODULE.format(epochs=sc.EPOCHS, batch=sc.BATCH, lr=sc.LR, momentum=sc.MOMENTUM), encoding="utf-8")
    out = tmp_path / "audit"
    argv = ["audit", "--quiet", *scenario["flags"], "--channels", "3", "--shadow-models", "4",
            "--non-members", str(scenario["held_out"]), "--train-fn", "scenario_loop:train", "--out", str(out)]
    code, _, err = run(capsys, argv + ["--fail-at", "target:auc=0.5"])
    res = json.loads((out / "audit.json").read_text())
    assert res["membership"]["train_fn"]["name"] == "scenario_loop:train"
    assert res["membership"]["cost"]["trained"] == 4
    read, risk = res["risk"]["target"], res["risk"]
    whole = next(g for g in risk["groups"] if g["group"] == "all")
    assert read["measured"] and read["auc_ci"][0] <= read["auc"] <= read["auc_ci"][1]
    assert whole["auc_ci"][0] <= whole["auc"] <= whole["auc_ci"][1]
    target = f"AUC {read['auc']:.2f} [{read['auc_ci'][0]:.2f}, {read['auc_ci'][1]:.2f}]"
    copies = f"AUC {whole['auc']:.2f} [{whole['auc_ci'][0]:.2f}, {whole['auc_ci'][1]:.2f}]"
    assert target in risk["headline"] and copies in risk["headline"]
    lo = read["auc_ci"][0]
    assert code == (REACHED if lo >= 0.5 else PASSED)
    assert code == REACHED, lo  # measured: the shipped model's lower AUC end is above chance
    above = round(lo + 0.05, 2)
    code, _, err = run(capsys, argv + ["--fail-at", f"target:auc={above}"])
    assert code == PASSED and f"gate target:auc={above:g}: passed (exit 0)" in err
    again = json.loads((out / "audit.json").read_text())
    assert again["membership"]["cost"]["trained"] == 0  # the second gate reused the function's copies
    print(f"\nown loop: target {read['attack']} {target}; copies {whole['attack']} {copies}")
