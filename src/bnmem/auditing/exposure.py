"""``exposure.csv``: every training file, how exposed it is to membership inference, ranked.

From the attacks' leave-one-out scores over the shadow copies (each copy is the target once;
each example is IN for half the copies), per training example:

* ``log_lr``: its membership log-likelihood ratio, online LiRA's log Λ = log p(φ | IN) − log p(φ | OUT)
  with per-example means and one global variance per side (the LiRA paper's variant for few shadow
  models: with the audit's 4–16 copies a per-example variance rests on one to seven values, and
  the per-example-variance log Λ then runs to 1e60), fitted on the other copies, averaged over the
  copies that trained on the example: the evidence an attacker holds against this file when it
  was in the training set. ``log_lr_lo`` / ``log_lr_hi``: a 95% Student-t interval of that mean
  across those copies (their spread, not a bound on every model; empty with fewer than 2);
* every audit attack's mean score over the copies that trained on it (``<attack>_in``) and over the
  others (``<attack>_out``), as the attacks score it (online LiRA's per-example variance included);
* its group (``outlier``: listed mislabeled or OOD; ``rare``: listed rare or atypical; ``other``),
  its gradient norm on the user's model (empty where not measured) and its rank by ``log_lr``
  (1 = most exposed);
* its slices (:mod:`bnmem.auditing.slices`): ``class`` (its given label's name) and ``correct`` (``true``
  when your model predicts that label), and with a held-out set the shipped model's own score of the file
  under each target-model attack, ``target_<attack>`` (:mod:`bnmem.auditing.target`; higher = more
  member-like on the model you ship).

The rows are sorted by exposure, so the first row is the file the headline names as most exposed.
The columns are declared in :data:`COLUMNS` (and in the audit schema, ``bnmem/schemas``).
"""

from __future__ import annotations

import csv
import io as _io
from pathlib import Path
from typing import Any

import numpy as np

from bnmem.attacks import spec as attack_spec

EXPOSURE_FILE = "exposure.csv"
# The attack whose log Λ is the per-example likelihood ratio: the one playing EXPOSURE (bnmem.attacks.spec).
LEVEL = 0.95
FIXED = ("rank", "index", "path", "group", "log_lr", "log_lr_lo", "log_lr_hi", "copies_in", "gradient_norm")
TOP_ROWS = 10  # rows kept in audit.json (and shown in the reports); the CSV has every file
DEFINITION = ("log_lr: the membership log-likelihood ratio log p(φ|IN) − log p(φ|OUT) of online LiRA with a global "
              "variance, averaged over the shadow copies that trained on the file (95% Student-t interval across "
              "them); rank 1 = most exposed")


def columns(attacks: list[str], extra: list[str] = ()) -> list[str]:
    """The CSV's columns: the fixed ones, the ``extra`` ones (slices, target scores), then ``<attack>_in`` and
    ``<attack>_out`` per attack, in order."""
    return [*FIXED, *extra, *(f"{a}_{side}" for a in attacks for side in ("in", "out"))]


def t_interval(values: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per column: the mean of ``values`` where ``members``, its 95% t-interval (NaN with < 2), and the count."""
    from scipy.stats import t

    n = members.sum(axis=0)
    mean = np.where(members, values, 0.0).sum(axis=0) / np.maximum(n, 1)
    dev = np.where(members, values - mean, 0.0)
    sd = np.sqrt((dev ** 2).sum(axis=0) / np.maximum(n - 1, 1))
    half = t.ppf(0.5 + LEVEL / 2, np.maximum(n - 1, 1)) * sd / np.sqrt(np.maximum(n, 1))
    ok = n >= 2
    return (np.where(n > 0, mean, np.nan), np.where(ok, mean - half, np.nan), np.where(ok, mean + half, np.nan), n)


def group_labels(masks: dict[str, np.ndarray], n: int) -> np.ndarray:
    """``outlier`` / ``rare`` / ``other`` per example (a listed outlier that is also rare counts as an outlier)."""
    labels = np.full(n, "other", dtype=object)
    if "rare" in masks:
        labels[masks["rare"]] = "rare"
    if "outliers" in masks:
        labels[masks["outliers"]] = "outlier"
    return labels


def exposure_rows(scores: dict[str, np.ndarray], members: np.ndarray, masks: dict[str, np.ndarray],
                  files: list[str] | None, norms: np.ndarray | None,
                  extra: dict[str, Any] | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """The table's columns and its rows, most exposed first.

    Args:
        scores: attack -> [targets, examples] leave-one-out scores (must hold the attack playing
            :data:`~bnmem.attacks.spec.EXPOSURE`).
        members: [targets, examples] bool.
        masks: the audit's groups (``outliers``, ``rare``, ...), bool over the examples.
        files: each example's path relative to the data folder (None for tensors).
        norms: per-example gradient norms on the user's model (NaN where not measured).
        extra: further columns, each a per-example sequence (``class``, ``correct``, ``target_<attack>``).
    """
    extra = extra or {}
    n = members.shape[1]
    exposure = attack_spec.the(attack_spec.EXPOSURE)
    attacks = [a for a in scores if a != exposure]
    lr, lo, hi, n_in = t_interval(scores[exposure], members)
    sides = {a: (t_interval(scores[a], members)[0], t_interval(scores[a], ~members)[0]) for a in attacks}
    labels = group_labels(masks, n)
    order = np.lexsort((np.arange(n), -np.nan_to_num(lr, nan=-np.inf)))  # highest log_lr first, ties by index
    rows = []
    for rank, i in enumerate(order, 1):
        row: dict[str, Any] = {
            "rank": rank, "index": int(i), "path": files[i] if files else "", "group": labels[i],
            "log_lr": _num(lr[i]), "log_lr_lo": _num(lo[i]), "log_lr_hi": _num(hi[i]), "copies_in": int(n_in[i]),
            "gradient_norm": _num(norms[i]) if norms is not None else None}
        for k, v in extra.items():
            row[k] = _num(v[i]) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v[i]
        for a in attacks:
            row[f"{a}_in"], row[f"{a}_out"] = _num(sides[a][0][i]), _num(sides[a][1][i])
        rows.append(row)
    return columns(attacks, list(extra)), rows


def _num(v: float) -> float | None:
    return None if not np.isfinite(v) else float(v)


def csv_text(cols: list[str], rows: list[dict[str, Any]]) -> str:
    """The CSV (empty cells for missing values; floats at full precision)."""
    buf = _io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r[k] is None else repr(r[k]) if isinstance(r[k], float) else
                        str(r[k]).lower() if isinstance(r[k], bool) else r[k]) for k in cols})
    return buf.getvalue()


def exposure_section(cols: list[str], rows: list[dict[str, Any]], root: str | None) -> dict[str, Any]:
    """What audit.json keeps of the table: its definition, columns, the top rows and the data folder (for links)."""
    return {"file": EXPOSURE_FILE, "definition": DEFINITION, "attack": attack_spec.the(attack_spec.EXPOSURE),
            "columns": cols,
            "n": len(rows), "root": root, "top": rows[:TOP_ROWS]}


def data_root(result: dict[str, Any]) -> str | None:
    """The data folder's absolute path (image folders only), for the report's links to the images."""
    d = result["data"]
    return str(Path(d["source"]).resolve()) if "layout" in d and d.get("source") else None


def top_sentence(section: dict[str, Any] | None) -> str:
    """The headline's sentence on the most exposed file (empty without a table)."""
    if not section or not section["top"] or section["top"][0]["log_lr"] is None:
        return ""
    r = section["top"][0]
    name = r["path"] if r["path"] else f"training example {r['index']}"  # plain: the headline quotes no code
    ci = (f" [{r['log_lr_lo']:.1f}, {r['log_lr_hi']:.1f}]" if r["log_lr_lo"] is not None else "")
    return (f"The most exposed file is {name} ({r['group']}): membership log-likelihood ratio {r['log_lr']:.1f}{ci} "
            f"over the {r['copies_in']} copies that trained on it ({EXPOSURE_FILE} ranks every training file).")
