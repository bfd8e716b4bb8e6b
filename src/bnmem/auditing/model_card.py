"""``bnmem audit --model-card FILE``: the audit as a "Privacy evaluation" section of a model card.

Hugging Face model cards are markdown files (``README.md`` of a model repository) whose sections
say what the model is, how it was evaluated and its risks and limitations. This module writes one
section in that convention, ``## Privacy evaluation``, with three parts: what was measured (the
attacks, their threat model, the data and the shadow copies), the result (the level with both
ends, each group's AUC with its interval, ε as a floor, the gate's outcome) under its conditions,
and what was **not** measured, so a reader does not take the absence of a finding for safety.

The section sits between two HTML comments; a later audit into the same card replaces it and
leaves the rest of the card as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem import io
from bnmem.auditing.report import ATTACK_NAMES
from bnmem.version import __version__

BEGIN = "<!-- bnmem audit: privacy evaluation (generated; a later audit replaces this section) -->"
END = "<!-- bnmem audit: end of privacy evaluation -->"
HEADING = "## Privacy evaluation"


def _ci(v: float, ci: list[float] | None) -> str:
    return f"{v:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{v:.2f}"


def _pct(v: float | None, ci: list[float] | None) -> str:
    if v is None:
        return "not estimable"
    return f"{100 * v:.1f}%" + (f" [{100 * ci[0]:.1f}%, {100 * ci[1]:.1f}%]" if ci else "")


def measured_lines(result: dict[str, Any]) -> list[str]:
    """What was measured and how (the threat model included)."""
    m, d, mem = result["model"], result["data"], result.get("membership")
    lines = ["### What was measured", ""]
    lines.append(f"- Model: `{m['class']}` ({m['format']}, {m['parameters_text']} parameters"
                 + (f", file sha256 `{m['sha256'][:16]}…`" if m.get("sha256") else "") + ").")
    lines.append(f"- Data: {d['dataset']}, {d['n_train']} training and {d['n_test']} held-out examples"
                 + (f"; {d.get('n_noisy', 0) + d.get('n_ood', 0)} listed as mislabeled or out-of-distribution"
                    if d.get("outliers_known") else "") + (f"; {d['n_rare']} listed as rare" if d.get("n_rare") else "")
                 + ".")
    tgt = result.get("target")
    if tgt:
        lines.append(f"- Membership inference against the model itself: {tgt['protocol']}.")
    if not mem:
        return lines + ["- Membership inference against the recipe: **not measured** (the audit ran without shadow "
                        "copies)." if tgt else "- Membership inference: **not measured** (the audit ran without shadow "
                        "copies).", ""]
    attacks = ", ".join(ATTACK_NAMES[a] for a in mem["attacks"])
    lines += [
        f"- Membership inference against the training recipe: {attacks}, run leave-one-out over "
        f"{mem['shadow_models']} shadow copies of the architecture trained with the recipe on seeded halves of the "
        "training data (each example a member of exactly half). Threat model: an attacker who knows the recipe and "
        "the data distribution, queries the model's logits with BatchNorm in "
        f"{mem['bn_mode_at_query']} mode, and asks whether a given example was in the training set.",
        (f"- Shadow copies trained by the model's own training function `{mem['train_fn']['name']}`."
         if mem.get("train_fn") else
         "- Shadow copies' recipe: " + ", ".join(f"{k} {v}" for k, v in mem["train"].items()
                                                if k in ("epochs", "lr", "batch_size", "optimizer", "momentum",
                                                         "weight_decay", "augment", "gs_reg")) + "."),
        f"- Per-file exposure: every training file ranked by its membership likelihood ratio (`exposure.csv`).",
    ]
    return lines + [""]


def result_lines(result: dict[str, Any]) -> list[str]:
    """The level with its conditions, each group's numbers, ε as a floor, the gate."""
    risk, mem = result["risk"], result.get("membership")
    lines = ["### Results", "", f"**Membership-inference risk: {risk['level']}** ({risk['basis']}).", ""]
    cal = risk.get("calibration")
    if cal:
        lines += [f"The shadow copies reach {100 * cal['shadow_train']:.0f}% training accuracy on their half beside "
                  f"the model's {100 * cal['model_train']:.0f}% (declared margin {100 * cal['margin']:.0f} points: "
                  f"{'within' if cal['assessed'] else 'outside, so no level is given'}).", ""]
    if risk.get("blocker"):
        lines += [f"Not assessed: {risk['blocker']}", ""]
    if risk["groups"]:
        lines += ["| group | examples | attack | AUC [95%] | TPR at 1% FPR [95%] | level |",
                  "|---|---|---|---|---|---|"]
        for g in risk["groups"]:
            lk = mem["leakage"][g["attack"]][g["group"]]
            lines.append(f"| {g['name']} | {g['n_examples']} | {ATTACK_NAMES[g['attack']]} | "
                         f"{_ci(g['auc'], g['auc_ci'])} | "
                         f"{_pct(lk.get('tpr_at_1pct_fpr'), lk['ci'].get('tpr_at_1pct_fpr'))}"
                         f" | {g['level']} |")
        lines.append("")
    if (risk.get("target") or {}).get("measured"):
        lines += [f"**The model as shipped:** {risk['target']['text']}", ""]
    if risk.get("epsilon"):
        lines += [risk["epsilon"]["text"], ""]
    one = (mem or {}).get("one_run") or result.get("one_run")
    if one:
        lines += [one["text"], ""]
    if risk.get("gate"):
        lines += [f"CI gate: {risk['gate']['text']}.", ""]
    return lines


def not_measured_lines(result: dict[str, Any]) -> list[str]:
    """What this evaluation does not cover."""
    mem = result.get("membership")
    lines = ["### What was not measured", ""]
    if not mem:
        lines.append("- Membership inference: rerun `bnmem audit` with `--shadow-models 16` to measure it.")
    lines += [
        "- Other privacy attacks: attribute inference, training-data reconstruction or extraction, model inversion, "
        "label-only membership attacks.",
        "- Other query interfaces: an attacker who sees only labels or top-k scores, or BatchNorm in training mode.",
        "- A differential-privacy guarantee: an ε lower bound is a floor that no (ε, δ)-DP claim below it can meet; "
        "it is not an estimate of ε and does not show the model is private.",
        "- Examples outside the groups listed: the audit knows only the files it was told about; an unlisted rare "
        "or mislabeled file is in the whole-set figures and in `exposure.csv`, not in a group of its own.",
    ]
    if not result.get("target"):
        lines.append("- The model file itself as an attack target: the numbers describe the training recipe, measured "
                     "on shadow copies that resemble the model in training accuracy (`--non-members` with a held-out "
                     "set attacks the model itself).")
    if mem and not ((mem.get("one_run") or result.get("one_run"))):
        lines.append("- A one-run audit of the recipe with inserted canaries (`--canaries K`).")
    return lines + [""]


def card_section(result: dict[str, Any]) -> str:
    """The whole section, between its markers."""
    lines = [BEGIN, HEADING, "", f"_Generated by bnmem {__version__} (`bnmem audit`); the audit's audit.json holds "
                                 "every number._", ""]
    lines += measured_lines(result) + result_lines(result) + not_measured_lines(result)
    return "\n".join(lines).rstrip() + "\n" + END + "\n"


def check_card(path: str | Path) -> None:
    """Before any work: a card the section could not be written into is one line now, not after the audit.

    Raises:
        BnmemError: a begin marker without its end, or a path that is a directory.
    """
    from bnmem.errors import BnmemError

    path = Path(path)
    if path.is_dir():
        raise BnmemError(f"--model-card {path} is a directory; give the card's file (e.g. {path / 'README.md'})")
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in text and END not in text[text.index(BEGIN):]:
        raise BnmemError(f"--model-card {path} has the privacy-evaluation begin marker but not its end; remove the "
                         "section by hand and rerun")


def write_card(path: str | Path, section: str) -> Path:
    """Write ``section`` into the card at ``path``: replacing an earlier one, else appended (a new file: the section).

    Raises:
        BnmemError: the card holds a begin marker without its end (a hand-edited card: fix it by hand).
    """
    from bnmem.errors import BnmemError

    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in text:
        start = text.index(BEGIN)
        if END not in text[start:]:
            raise BnmemError(f"{path} has the privacy-evaluation begin marker but not its end; remove the section "
                             "by hand and rerun")
        stop = text.index(END, start) + len(END)
        text = text[:start] + section.rstrip("\n") + text[stop:]
    else:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + section
    io.write_text(path, text)
    return path
