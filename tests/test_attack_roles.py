"""Attack roles on the spec: every reader of an attack subset asks the registry, none keeps a name table.

The built-in roles are pinned (their order is the order of today's tables, files and figures), a toy
attack registered with a role from this file appears where that role is read, and no module under src/
defines one of the name tables the roles replaced.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import numpy as np
import pytest

from bnmem.analysis_plan import PLAN
from bnmem.attacks import keep_matrix
from bnmem.attacks import spec as attack_spec
from bnmem.errors import BnmemError

matplotlib.use("Agg")

SRC = Path(__file__).resolve().parents[1] / "src" / "bnmem"
TOY = "toy_median_gap_role"
# The name tables the roles replaced (issue 50's ten constants, shadow_operating_point's and the plan's primary).
GONE = ("ATTACKS", "LIRA_ATTACKS", "ATTACK_LABELS", "EPS_ATTACKS", "HEADLINE_ATTACKS", "JACKKNIFE_ATTACKS",
        "ATTACK", "EXPOSURE_ATTACK", "LIRA_ATTACK", "LIRA_PRIMARY_ATTACK")


def _toy(*roles: str, **kw) -> attack_spec.AttackSpec:
    """φ of the target minus the median of its OUT references, ranked after every built-in attack."""
    return attack_spec.AttackSpec(
        TOY, "median gap (toy)", needs_out=True, oracle=lambda r: (r.phi_t - np.median(r.phi_out, axis=0)).mean(1),
        stream=lambda b: b.x - b.fits["med_out"], rank=50, roles=frozenset(roles), **kw)


@pytest.fixture()
def toy():
    """Register the toy with the set-valued roles (and its presentation fields); unregister after."""
    spec = attack_spec.register(_toy(attack_spec.HEADLINE, attack_spec.DEFENSES, attack_spec.MITIGATION,
                                     attack_spec.FIGURE, attack_spec.EPSILON, attack_spec.JACKKNIFE,
                                     short_label="Toy", marker="^", figure_label="toy gap"))
    try:
        yield spec
    finally:
        attack_spec.unregister(TOY)
    assert TOY not in attack_spec.available()
    assert all(TOY not in attack_spec.playing(r) for r in attack_spec.ROLES)


def test_builtin_roles_are_declared_once_in_todays_order():
    want = {
        attack_spec.HEADLINE: ("online", "rmia"),
        attack_spec.DEFENSES: ("online", "rmia"),
        attack_spec.MITIGATION: ("online", "rmia"),
        attack_spec.FIGURE: ("online", "rmia"),
        attack_spec.EPSILON: ("online", "rmia", "loss"),
        attack_spec.JACKKNIFE: ("online", "offline", "rmia"),
        attack_spec.VERDICT: ("online", "offline", "rmia"),
        attack_spec.PRIMARY: ("online",),
        attack_spec.EXPOSURE: ("online_fixed_variance",),
    }
    assert set(want) == set(attack_spec.ROLES)
    for role, names in want.items():
        assert attack_spec.playing(role) == names, role
    assert attack_spec.the(attack_spec.PRIMARY) == "online"
    assert attack_spec.the(attack_spec.EXPOSURE) == "online_fixed_variance"
    assert [(attack_spec.get(a).marker, attack_spec.get(a).figure_label) for a in ("online", "rmia")] == [
        ("o", "LiRA online"), ("s", "RMIA")]
    assert [attack_spec.get(a).short_label for a in ("online", "rmia")] == ["LiRA", "RMIA"]


def test_claim_3s_verdict_attacks_are_the_plans_coverdicts():
    """The plan names claim 3's coverdicts and its deciding attack in words; the roles must say the same, so a
    verdict role given to another attack fails here until the plan is amended."""
    labels = tuple(attack_spec.label(a) for a in attack_spec.playing(attack_spec.VERDICT))
    for cid in ("3a", "3b"):
        assert PLAN[cid].coverdicts == labels
    assert labels[0] == attack_spec.label(attack_spec.the(attack_spec.PRIMARY)) == "online LiRA"


def test_no_module_defines_an_attack_name_table():
    define = re.compile(rf"^\s*({'|'.join(GONE)})\s*(:[^=]*)?=", re.M)
    found = [f"{p.relative_to(SRC)}: {m.group(1)}" for p in SRC.rglob("*.py") for m in define.finditer(p.read_text())]
    assert not found, found


def test_the_refuses_a_role_played_by_several_and_playing_an_unknown_role():
    attack_spec.register(_toy(attack_spec.EXPOSURE))
    try:
        with pytest.raises(BnmemError, match="exactly one attack must play the role 'exposure'"):
            attack_spec.the(attack_spec.EXPOSURE)
    finally:
        attack_spec.unregister(TOY)
    assert attack_spec.the(attack_spec.EXPOSURE) == "online_fixed_variance"
    with pytest.raises(BnmemError, match="unknown attack role"):
        attack_spec.playing("headlines")


@pytest.mark.parametrize("roles, kw, fragment", [
    (("headlines",), {}, "unknown role"),
    ((attack_spec.FIGURE,), {"marker": "^"}, "needs a marker and a figure_label"),
    ((attack_spec.MITIGATION,), {}, "needs a short_label"),
])
def test_register_refuses_a_spec_whose_roles_it_cannot_honour(roles, kw, fragment):
    with pytest.raises(BnmemError, match=fragment):
        attack_spec.register(_toy(*roles, **kw))
    assert TOY not in attack_spec.available()


def _scores(m: int = 6, n: int = 40, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    keep = keep_matrix(m, n, seed)
    rng = np.random.default_rng(seed)
    return {a: rng.normal(size=(m, n)) + keep for a in ("online", "rmia", "loss", TOY)}, keep


def test_a_headline_attack_reaches_the_audits_leakage_and_gate(toy):
    from bnmem.auditing.gate import tpr_lower_ends
    from bnmem.auditing.leakage import leakage_section

    scores, members = _scores()
    section = leakage_section(scores, members, {"all": np.ones(members.shape[1], bool)}, seed=0)
    assert list(section) == ["online", "rmia", TOY]  # headline order: rank; "loss" plays no headline role
    g = {"ci": {"tpr_at_1pct_fpr": [0.25, 0.5]}}
    ends = tpr_lower_ends({"membership": {"leakage": {TOY: {"all": g}, "loss": {"all": g}}}}, "tpr_at_1pct_fpr")
    assert ends == [(0.25, "all", TOY)]


def test_a_defenses_attack_is_aggregated_by_the_defenses_lens(toy):
    from bnmem.lenses.defenses import aggregate

    per = {"all": {"auc": 0.6, "tpr_at_0.1pct_fpr": 0.0, "tpr_at_1pct_fpr": 0.1}}
    entry = {"test_acc": 0.9, "train_in_acc": 1.0, "memorization": 0.5, "seconds_per_model": 1.0, "trainer": "sgd",
             "attacks": {a: per for a in ("online", "rmia", TOY)}, "eps_lb": {a: {"all": 0.1} for a in
                                                                            ("online", "rmia", TOY)}}
    agg = aggregate([entry, entry])
    assert list(agg["attacks"]) == list(agg["eps_lb"]) == ["online", "rmia", TOY]
    assert agg["attacks"][TOY]["all"]["auc"]["mean"] == pytest.approx(0.6)


def test_an_epsilon_attack_gets_a_row_in_the_reports_eps_table(toy, monkeypatch):
    from bnmem.report import memeps

    row = {"all": {"eps_lb": 0.5, "eps_lb_max": 0.7}}
    lens = SimpleNamespace(conditions={"norms": ["batch"]}, data={"batch": {a: row for a in ("online", "offline",
                                                                                              TOY)}})
    setting = SimpleNamespace(lenses=lambda kind: [(None, lens)])
    monkeypatch.setattr(memeps, "settings_of", lambda run, kind: [setting])
    monkeypatch.setattr(memeps, "_label", lambda s: "toy setting")
    (tab,) = memeps.epsilon_tables(SimpleNamespace())
    assert [r[1] for r in tab.rows] == ["online", TOY]  # offline plays no ε role


def test_a_jackknife_attack_is_rerun_by_default(toy):
    from bnmem.lenses.lira.jackknife import paired_jackknife

    rng = np.random.default_rng(1)
    keep = keep_matrix(6, 30, 1)
    phi_a, phi_b = rng.normal(size=(6, 30, 1)) + keep[..., None], rng.normal(size=(6, 30, 1))
    got = paired_jackknife(phi_a, phi_b, keep)  # no attack list: those playing JACKKNIFE
    assert list(got) == ["online", "offline", "rmia", TOY] and len(got[TOY]["all"]) == 6


def test_a_figure_attack_is_drawn_with_its_marker_and_named_in_the_title(toy):
    import matplotlib.pyplot as plt

    from bnmem.figures.privacy_utility import _membership_panel

    auc = {"all": {"auc": 0.6}}
    result = {"variants": ["bn"], "conditions": {"lira_models": 8},
              "bn": {"lira": {"attacks": {"online": auc, "rmia": auc, TOY: auc}}, "final": {"test_acc": {"mean": 0.9}}}}
    fig, ax = plt.subplots()
    try:
        _membership_panel(ax, result, lambda n: "k", "online")
        assert ax.get_title() == "LiRA online (o) and RMIA (s) and toy gap (^), 8 shadow models"
        assert [c.get_label() for c in ax.collections] == ["bn (online)", "bn (rmia)", f"bn ({TOY})"]
    finally:
        plt.close(fig)


def test_a_defenses_attack_gets_its_columns_in_the_defenses_table(toy):
    from bnmem.lenses.defenses_text import summary_table

    def s(m):
        return {"mean": m, "ci": [m - 0.01, m + 0.01], "per_replicate": [m, m]}

    att = {sub: {"auc": s(0.6), "tpr_at_1pct_fpr": s(0.1), "tpr_at_0.1pct_fpr": s(0.01)} for sub in ("all", "outliers")}
    v = {"test_acc": s(0.9), "memorization": s(0.5), "seconds_per_model": s(3.0),
         "attacks": {a: att for a in ("online", "rmia", TOY)}, "eps_lb": {"online": {"all": s(0.3)}}}
    res = {"variant_names": ["batch"], "variants": {"batch": v}, "subset_sizes": {"outliers": 5},
           "frontier": {"all": ["batch"], "outliers": []},
           "conditions": {"dataset": "digits", "arch": "lenet", "label_noise": 0.05, "ood": 0, "shadow_models": 8,
                          "epochs": 3, "bn_mode_at_query": "eval", "replicates": 2, "risk_attack": "online",
                          "risk_metric": "auc"}}
    header = summary_table(res).splitlines()[1].split("  ")
    heads = [h.strip() for h in header if h.strip()]
    assert heads[6:12] == ["LiRA AUC", "RMIA AUC", "Toy AUC", "LiRA AUC outl", "RMIA AUC outl", "Toy AUC outl"]
