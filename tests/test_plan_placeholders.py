"""No text of the analysis plan carries an unrendered placeholder (plan 5.0's row 3c printed
"within {MATCH_TOLERANCE * 100:g} point": a string without its f-prefix, so the hash stood for no number)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from bnmem import analysis_plan as ap

# A Python format field left in text: a name (or attribute, or simple arithmetic on one), an optional
# conversion and an optional format spec that does not start with a space ("{val_fraction: 0.3}", a YAML
# example in claim 6's text, is not one), or any field ending in a format spec ("{…:g}", "{…:.0%}").
PLACEHOLDER = re.compile(
    r"\{[A-Za-z_][\w.]*(?:\s*[-+*/]\s*[\w.]+)*(?:![rsa])?(?::[^\s{}][^{}]*)?\}"
    r"|\{[^{}]*:[<>^=+\-#0]*\d*[,_]?(?:\.\d+)?[bcdeEfFgGnosxX%]\}")


def leftovers(text: str) -> list[str]:
    return [m.group(0) for m in PLACEHOLDER.finditer(text)]


def plan_texts() -> list[tuple[str, str]]:
    """(where, text) of every text field of the plan: each claim's fields, its endpoints, the changelog, the
    reviews, and the rendered document (which also holds the general sections)."""
    out = []
    for cid, p in ap.PLAN.items():
        for f in dataclasses.fields(p):
            v = getattr(p, f.name)
            for i, s in enumerate(v if isinstance(v, tuple) else (v,)):
                if isinstance(s, str):
                    out.append((f"{cid}.{f.name}[{i}]", s))
        out += [(f"{cid}.planning[{i}]", e.text()) for i, e in enumerate(p.planning)]
        if p.axis is not None:
            out.append((f"{cid}.axis", p.axis.label))
    for c in ap.CHANGELOG:
        out += [(f"changelog {c.version}.{k}", getattr(c, k)) for k in ("what", "why", "seen")]
    out += [(f"review {v}.{n}", text) for v, _, points in ap.REVIEWS for n, text in points]
    out.append(("docs/analysis-plan.md", ap.render_markdown()))
    return out


def test_the_detector_finds_each_kind_of_leftover():
    assert leftovers("within {MATCH_TOLERANCE * 100:g} point") == ["{MATCH_TOLERANCE * 100:g}"]
    assert leftovers("a {X} and {p.id} and {fit} and {1 - 0.1:.0%}") == ["{X}", "{p.id}", "{fit}", "{1 - 0.1:.0%}"]
    assert leftovers("`mitigate: {selection_seeds: 3, data: {val_fraction: 0.3}}` and χ²_{0.20, n−1}") == []


def test_no_text_of_the_plan_has_an_unrendered_placeholder():
    found = [(where, leftovers(text)) for where, text in plan_texts() if leftovers(text)]
    assert not found, found


def test_a_planted_placeholder_fails(monkeypatch):
    p = ap.PLAN["6"]
    monkeypatch.setitem(ap.PLAN, "6", dataclasses.replace(p, rule=p.rule + " within {X} points"))
    with pytest.raises(AssertionError, match=r"\{X\}"):
        test_no_text_of_the_plan_has_an_unrendered_placeholder()
