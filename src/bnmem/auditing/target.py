"""The target-model audit: the shipped model itself attacked on its own members and a held-out set it never saw.

The shadow copies measure the *recipe*'s risk. This module measures the *artifact*: the candidates are the
model's whole training set (its members) and the held-out files (``--non-members``, ``non_members=``; its
non-members), and each attack scores every candidate on the model as shipped (eval mode, BN with its
running statistics, φ averaged over the copies' query views).

How the copies serve as references, and why only their OUT side:

* a training example is IN for exactly half of the M copies (the keep matrix); a held-out file is IN for
  none, by definition. Online LiRA and online RMIA need, for every candidate, references that trained on it;
  the held-out files have none. Scoring the members with their IN copies and the non-members without any
  would measure the difference between two procedures, not the model's leakage. So every candidate is
  scored by the same procedure from OUT references only (LiRA's and RMIA's *offline* forms, the LiRA
  paper's setting for a target whose candidates the shadow models did not train on);
* each candidate gets exactly M/2 OUT references: a member the M/2 copies that did not train on it, a
  held-out file the OUT half of its own column of a second keep matrix (:func:`bnmem.attacks.keep_matrix`
  with seed :data:`HELD_OUT_KEEP_SEED`), so both sides rest on the same number of references drawn the
  same way;
* the attacks (names as in :mod:`bnmem.attacks.spec`): ``offline_fixed_variance``, offline LiRA with one
  global OUT spread (the LiRA paper's variant for few shadow models; the audit trains 4 to 16 copies),
  ``rmia_offline``, RMIA with the OUT references and the paper's linear correction ``a`` (selected on the
  copies alone, copy 0 attacked with copies 1..M−2 as references, never on the target's membership; 0.3 with
  fewer than 6 copies), its population the test split minus any held-out file; and ``loss``, the
  reference-free loss threshold (Yeom et al.), which needs no copies and runs with a held-out set alone.

The metrics are the audit's own (:mod:`bnmem.auditing.leakage`): the AUC with a bootstrap interval over
candidates, the TPR at 1% and 0.1% FPR with exact intervals where the held-out set is large enough (100
and 1,000 files), read by the level rule on both ends (:mod:`bnmem.auditing.level`). The target's reading
is its attack with the highest lower AUC end, as for the groups. Where the copies do not resemble the
model (the audit's blocker), the copy-referenced attacks are shown but the reading rests on the loss
attack alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bnmem.errors import BnmemError

TARGET_ATTACKS = ("offline_fixed_variance", "rmia_offline", "loss")
REFERENCE_FREE = ("loss",)
HELD_OUT_KEEP_SEED = 0x4E4D  # the held-out files' own balanced split of the copies (whose OUT half they use)
DEFAULT_A = 0.3  # offline RMIA's a where the copies are too few to select it (bnmem.attacks.rmia)
# Where the headline's sentence on the copies' numbers ends (bnmem.auditing.report.headline); the target's follows.
COPIES_NUMBERS_END = "; 95% intervals.)"
TARGET_COLUMN = "target_{}"  # exposure.csv: the shipped model's score of each training file, per attack
NO_HELD_OUT = ("The shipped model's own leakage was not measured: no held-out set was given (the copies measure the "
               "recipe, not the file you ship). Add --non-members FOLDER (images from the same source that the "
               "model never trained on, in class folders; or a list of their paths) to attack the model itself.")


@dataclass
class HeldOut:
    """The non-members: inputs in the model's format, labels, and where they came from.

    Attributes:
        x, y: tensors (x normalized as the training split).
        files: each file's path as given (None for tensors).
        source: the folder or list (text).
        in_population: bool over the test split: test files that are also held-out files (left out of RMIA's
            population); None when not known (tensors).
    """

    x: torch.Tensor
    y: torch.Tensor
    files: list[str] | None
    source: str
    in_population: np.ndarray | None = None


def as_held_out(non_members: Any, ds: Any) -> HeldOut:
    """``non_members=`` of ``bnmem.audit`` (a :class:`HeldOut` or ``(x, y)`` tensors), checked against the data.

    Raises:
        BnmemError: not a pair, no examples, inputs of another shape, labels outside the classes.
    """
    if isinstance(non_members, HeldOut):
        held = non_members
    else:
        if not (isinstance(non_members, (tuple, list)) and len(non_members) == 2):
            raise BnmemError("non_members must be an (x, y) pair of tensors (inputs in the model's format)")
        x, y = (torch.as_tensor(v) for v in non_members)
        if y.dtype.is_floating_point:
            raise BnmemError(f"non_members: labels must be integers, got {y.dtype}")
        held = HeldOut(x=x.float(), y=y.long(), files=None, source="tensors given as non_members")
    if held.x.shape[0] == 0 or held.x.shape[0] != held.y.shape[0] or held.y.ndim != 1:
        raise BnmemError(f"non_members: x {tuple(held.x.shape)} and y {tuple(held.y.shape)} must hold the same "
                         "number (> 0) of examples")
    if tuple(held.x.shape[1:]) != tuple(ds.x_train.shape[1:]):
        raise BnmemError(f"non_members inputs have shape {tuple(held.x.shape[1:])}, the training inputs "
                         f"{tuple(ds.x_train.shape[1:])}")
    if int(held.y.min()) < 0 or int(held.y.max()) >= ds.num_classes:
        raise BnmemError(f"non_members: labels must lie in [0, {ds.num_classes - 1}]")
    return held


def held_out_files(path: Path, classes: list[str]) -> list[tuple[Path, int]]:
    """The held-out images and their labels: ``path/<class>/*.png`` (class folders named as the training
    classes), or a text file listing image paths (one per line, relative to the list's folder or absolute;
    each image's class is its parent folder's name).

    Raises:
        BnmemError: a missing path, no images, a class the training data lack, a listed file that does not exist.
    """
    from bnmem.data.image_folder import IMAGE_SUFFIXES

    flag = f"--non-members {path}"
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        where = "its class folders"
    elif path.is_file():
        base = path.parent
        try:
            lines = path.read_text(encoding="utf-8-sig").splitlines()
        except UnicodeDecodeError:
            raise BnmemError(f"{flag} is neither a folder nor a text list of image paths (UTF-8)") from None
        found = [Path(s) if Path(s).is_absolute() else base / s
                 for s in (ln.strip() for ln in lines) if s and not s.startswith("#")]
        missing = [str(p) for p in found if not p.is_file()]
        if missing:
            raise BnmemError(f"{flag}: {len(missing)} listed files do not exist (e.g. {', '.join(missing[:3])}); "
                             "give paths relative to the list's folder or absolute ones")
        where = "the list"
    else:
        raise BnmemError(f"{flag} does not exist (give a folder of class folders, or a text file listing images)")
    if not found:
        raise BnmemError(f"{flag}: no images ({', '.join(IMAGE_SUFFIXES)}) in {where}")
    index = {c: i for i, c in enumerate(classes)}
    unknown = sorted({p.parent.name for p in found} - set(index))
    if unknown:
        raise BnmemError(f"{flag}: class folder(s) {', '.join(unknown[:5])} are not classes of the training data "
                         f"({', '.join(classes[:10])}); each held-out image must sit in a folder named for its class")
    return [(p, index[p.parent.name]) for p in found]


def read_held_out(path: str | Path, folder: Any, ds: Any) -> HeldOut:
    """``--non-members``: the held-out images read exactly as the training split was (decoding, size, mean/std).

    Raises:
        BnmemError: see :func:`held_out_files`; a held-out file that is also a training file.
    """
    from bnmem.data.image_folder import read_like_training, scan

    path = Path(path)
    classes, train, test = scan(folder)
    files = held_out_files(path, classes)
    train_paths = {p.resolve() for p, _ in train}
    both = [str(p) for p, _ in files if p.resolve() in train_paths]
    if both:
        raise BnmemError(f"--non-members {path}: {len(both)} held-out files are training files (e.g. {both[0]}); "
                         "non-members must be images the model never trained on")
    held = {p.resolve() for p, _ in files}
    x = read_like_training(folder, files, path if path.is_dir() else path.parent, ds.mean, ds.std)
    if tuple(x.shape[1:]) != tuple(ds.x_train.shape[1:]):
        raise BnmemError(f"--non-members {path}: images become {tuple(x.shape[1:])}, the training images "
                         f"{tuple(ds.x_train.shape[1:])}; give them the same size")
    return HeldOut(x=x, y=torch.tensor([c for _, c in files], dtype=torch.long), files=[str(p) for p, _ in files],
                   source=str(path), in_population=np.array([p.resolve() in held for p, _ in test], dtype=bool))


@dataclass
class TargetQuery:
    """The shipped model's φ (float64 [n, V]) on its training set, the held-out files and the test split, and its
    predictions (identity view) on the first two."""

    phi_train: np.ndarray
    phi_held: np.ndarray
    phi_pop: np.ndarray
    pred_train: np.ndarray
    pred_held: np.ndarray | None


def query_target(model: Any, ds: Any, held: HeldOut | None, views: list[tuple[str, Any]]) -> TargetQuery:
    """Query the shipped model (eval mode) as the copies are queried: the same views, φ in float64."""
    from bnmem.attacks.phi import phi_from_logits_block
    from bnmem.shadow.query import QueryOptions, query_logits

    options, ident = QueryOptions(), [name for name, _ in views].index("identity")

    def ask(x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        logits = query_logits(model, x, views, options)
        return phi_from_logits_block(logits, y.numpy()), logits[:, ident].argmax(-1)

    phi_train, pred_train = ask(ds.x_train, ds.y_train)
    phi_pop, _ = ask(ds.x_test, ds.y_test) if ds.x_test.shape[0] else (np.empty((0, len(views))), None)
    phi_held, pred_held = ask(held.x, held.y) if held is not None else (np.empty((0, len(views))), None)
    return TargetQuery(phi_train, phi_held, phi_pop, pred_train, pred_held)


def out_references(keep: np.ndarray, n_held: int) -> np.ndarray:
    """[M/2, n + n_held] indices of each candidate's OUT copies: a member's own, a held-out file's from its column of
    a second balanced keep matrix (every column has exactly M/2 OUT copies either way)."""
    from bnmem.attacks import keep_matrix

    m = keep.shape[0]
    out = np.concatenate([~keep, ~keep_matrix(m, n_held, HELD_OUT_KEEP_SEED)], axis=1)
    return np.argsort(~out, axis=0, kind="stable")[: m // 2]


def offline_a(log_p_train: np.ndarray, keep: np.ndarray, log_p_pop: np.ndarray | None) -> tuple[float, str]:
    """Offline RMIA's a, selected on the copies alone (copy 0 attacked by copies 1..M−2), and how it was chosen."""
    from bnmem.attacks.rmia import select_offline_a

    m = keep.shape[0]
    try:
        a, _ = select_offline_a(log_p_train, keep, target=m - 1, population_log_p=log_p_pop)
    except BnmemError:
        return DEFAULT_A, f"{DEFAULT_A} (fixed: {m} copies are too few to select it)"
    return a, "selected on the copies (copy 0 attacked by copies 1..M−2; the target's membership is never read)"


def target_scores(t: TargetQuery, refs: dict[str, Any] | None,
                  population: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every target attack's score of each candidate (members, then the held-out files), and how RMIA ran.

    Args:
        t: the shipped model's φ.
        refs: the copies' ``keep`` [M, n], ``phi`` [M, n, V], ``held_out_phi`` [M, h, V] and ``population_phi``
            [M, P, V]; None: no copies (the loss attack alone).
        population: bool over the test split: RMIA's population points.
    """
    from bnmem.attacks.lira import lira_offline
    from bnmem.attacks.rmia import log_marginal, population_log_ratio, rmia_scores_against, view_log_mean
    from bnmem.attacks.scores import loss_from_phi

    cand = np.concatenate([t.phi_train, t.phi_held], axis=0)
    scores = {"loss": -loss_from_phi(cand).mean(axis=1)}
    info: dict[str, Any] = {}
    if refs is None:
        return scores, info
    keep = refs["keep"]
    ref_phi = np.concatenate([refs["phi"], refs["held_out_phi"]], axis=1)
    idx = out_references(keep, t.phi_held.shape[0])
    phi_out = ref_phi[idx, np.arange(ref_phi.shape[1])]  # [M/2, n + h, V]
    scores["offline_fixed_variance"] = lira_offline(cand, phi_out, fix_variance=True)
    pop_phi = refs["population_phi"][:, population]
    if pop_phi.shape[1]:
        log_p = lambda phi: view_log_mean(-loss_from_phi(phi))  # noqa: E731 - view-averaged log p_y
        a, how = offline_a(log_p(refs["phi"]), keep, log_p(pop_phi))
        ratio = view_log_mean(-loss_from_phi(cand)) - log_marginal(log_p(phi_out), None, a, online=False)
        pop_ratio = population_log_ratio(log_p(t.phi_pop[population]), log_p(pop_phi), online=False, a=a)
        scores["rmia_offline"] = rmia_scores_against(ratio, pop_ratio)
        info = {"rmia_a": a, "rmia_a_chosen": how,
                "rmia_population": f"the test split (n={int(population.sum())}; no copy and not your model trained on "
                                   "it; held-out files left out)"}
    else:
        info = {"rmia_population": "none: " + ("every test file is a held-out file" if population.size else
                                               "no test split") + ", so RMIA is not run"}
    return {a: scores[a] for a in TARGET_ATTACKS if a in scores}, info


def target_section(t: TargetQuery, held: HeldOut, ds: Any, refs: dict[str, Any] | None, seed: int,
                   names: list[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The ``target`` section of audit.json: every target attack on the whole candidate set and on each slice,
    with intervals; and the per-attack scores of the training files (exposure.csv's target columns).
    """
    from bnmem.auditing.slices import slice_masks, target_slices

    n, h = t.phi_train.shape[0], t.phi_held.shape[0]
    population = np.ones(t.phi_pop.shape[0], bool) if held.in_population is None else ~held.in_population
    scores, info = target_scores(t, refs, population)
    member = np.r_[np.ones(n, bool), np.zeros(h, bool)]
    labels = np.r_[ds.y_train.numpy(), held.y.numpy()]
    correct = np.r_[t.pred_train == ds.y_train.numpy(), t.pred_held == held.y.numpy()]
    masks = {"all": np.ones(n + h, bool), **slice_masks(labels, correct, names)}
    leakage, skipped = target_slices(scores, member, masks, seed)
    m = refs["keep"].shape[0] if refs is not None else 0
    protocol = (f"your model, as shipped (eval mode), attacked on its {n} training examples (members) and {h} "
                f"held-out files it never saw (non-members, {held.source})"
                + (f"; references: the OUT half of the {m} shadow copies for every candidate (offline LiRA and RMIA: "
                   "no copy trained on a held-out file, so no candidate is scored with IN references)" if m else
                   "; no shadow copies, so only the reference-free loss attack runs"))
    section = {"protocol": protocol, "members": n, "non_members": h, "source": held.source, "references": m,
               "bn_mode_at_query": "eval", "attacks": list(scores), "leakage": leakage, "skipped": skipped,
               "slice_sizes": {k: {"members": int((mk & member).sum()), "non_members": int((mk & ~member).sum())}
                               for k, mk in masks.items()},
               "accuracy_held_out": float(correct[n:].mean()), **info}
    return section, {a: s[:n] for a, s in scores.items()}


def target_risk(result: dict[str, Any]) -> dict[str, Any]:
    """The target's reading for the risk section: per candidate set (``all`` and each slice) the attack with the
    highest lower AUC end and both levels; its sentence for the headline (or the line saying it was not measured).
    """
    from bnmem.auditing.findings import tpr_text
    from bnmem.auditing.report import ATTACK_NAMES
    from bnmem.auditing.leakage import strongest
    from bnmem.auditing.slices import interval_level, slice_label

    sec = result.get("target")
    if not sec:
        return {"measured": False, "text": NO_HELD_OUT}
    blocked = bool(result["risk"].get("blocker"))
    read = {a: subs for a, subs in sec["leakage"].items() if not blocked or a in REFERENCE_FREE}
    items = []
    for name in dict.fromkeys(s for subs in read.values() for s in subs):
        attack, g = strongest(read, name)
        items.append({**interval_level(name, attack, g), "name": "your model's members against its held-out files"
                      if name == "all" else slice_label(name), "metrics_of": attack})
    whole = next((g for g in items if g["group"] == "all"), None)
    if whole is None:
        return {"measured": False, "text": f"The shipped model's own leakage was not measured: {sec['skipped']['all']}."}
    g = sec["leakage"][whole["attack"]]["all"]
    lo, hi = whole["auc_ci"]
    why = (" (the copies do not resemble your model, so this reading rests on the reference-free loss attack)"
           if blocked else "")
    text = (f"Your model as shipped, attacked on its {sec['members']} training examples against {sec['non_members']} "
            f"held-out files: {whole['words']} ({whole['level']}); {ATTACK_NAMES[whole['attack']]}: AUC "
            f"{whole['auc']:.2f} [{lo:.2f}, {hi:.2f}], members found at 1% false positives: {tpr_text(g)}, at 0.1%: "
            f"{tpr_text(g, 'tpr_at_0.1pct_fpr')}{why}.")
    return {"measured": True, **{k: whole[k] for k in ("attack", "auc", "auc_ci", "level", "level_lower",
                                                       "level_upper", "words")},
            "tpr_at_1pct_fpr": g.get("tpr_at_1pct_fpr"), "tpr_at_0.1pct_fpr": g.get("tpr_at_0.1pct_fpr"),
            "tpr_ci": {k: g["ci"].get(k) for k in ("tpr_at_1pct_fpr", "tpr_at_0.1pct_fpr")},
            "reference_free_only": blocked, "groups": items, "text": text, "cautions": g["cautions"]}


def measure_target_and_slices(result: dict[str, Any], model: Any, ds: Any, train: Any, held: HeldOut | None,
                              seed: int) -> None:
    """After the copies (if any): query the shipped model, attack the copies' scores on each slice, and (with a
    held-out set) attack the model itself; the per-file columns of exposure.csv go with the copies' raw scores."""
    from bnmem.auditing.membership import RAW
    from bnmem.auditing.slices import class_names, copies_slices, slice_masks
    from bnmem.shadow.copies import copy_views

    mem = result.get("membership")
    if not mem and held is None:
        return
    t = query_target(model, ds, held, copy_views(train, ds))
    names, y = class_names(ds), ds.y_train.numpy()
    correct = t.pred_train == y
    raw = mem[RAW] if mem else None
    if raw is not None:
        mem["slices"] = copies_slices(raw, slice_masks(y, correct, names), seed)
        raw["extra"] = {"class": [names[c] for c in y], "correct": correct.tolist()}
    if held is not None:
        result["target"], per_file = target_section(t, held, ds, raw, seed, names)
        if raw is not None:
            raw["extra"].update({TARGET_COLUMN.format(a): s for a, s in per_file.items()})


def add_to_risk(result: dict[str, Any]) -> None:
    """The target's and the slices' readings in the risk section; the headline gains the target's sentence (the
    shipped model's measured leakage beside the recipe's) and, where the slices change the level, the worst slice."""
    from bnmem.auditing.slices import slices_risk

    risk = result["risk"]
    risk["target"] = target_risk(result)
    sl = slices_risk(result)
    if sl is not None:
        risk["slices"] = sl
    extra = [risk["target"]["text"]] if risk["target"]["measured"] else []
    extra += [sl["text"]] if sl and sl["text"] else []
    if extra and not risk["groups"] and not risk.get("blocker"):  # no copies: the target's is the one measurement
        risk["headline"] = " ".join([*extra, "The recipe's risk was not measured (no shadow copies); rerun with "
                                     "--shadow-models 16 added to measure who in the training set any model trained "
                                     "this way exposes."])
    elif extra:  # right after the copies' own numbers, so both answers open the paragraph
        head, mark, tail = risk["headline"].partition(COPIES_NUMBERS_END)
        risk["headline"] = (" ".join([head + mark, *extra]) + tail) if mark else " ".join([risk["headline"], *extra])
    if risk["target"]["measured"]:
        risk["cautions"] += [f"your model against its held-out files: {c}" for c in risk["target"]["cautions"]]
