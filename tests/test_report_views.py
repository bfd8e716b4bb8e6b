"""A lens declared in this one module reaches the report and the tidy export through its spec and view.

Two toy lenses are registered here and nowhere else (nothing under src/ names them): ``toy-view`` brings a
report view of its own (section, caption, key table, tidy reader, named by its spec as ``module:attribute``),
``toy-plain`` none (the generic view: its summary table, every number of its results file as a tidy row).
Their results are written as a lens writes them (the ``"lens"`` key first), then ``bnmem report`` and
``bnmem.results.load`` read them.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from pathlib import Path
from typing import Iterator

import pytest
from pydantic import BaseModel

from bnmem.lenses import registry
from bnmem.lenses.spec import LensSpec
from bnmem.report.tables import Table
from bnmem.report.views import LensView

TOY, PLAIN = "toy-view", "toy-plain"
CONDITIONS = {"dataset": "digits", "arch": "lenet", "label_noise": 0.1, "norms": ["batch", "none"]}


def toy_tables(run, kind: str) -> list[Table]:
    return [Table(f"Toy counts — {cell.describe()}", ["norm", "count"],
                  [[n, str(v)] for n, v in lens.data["counts"].items()]) for cell, lens in run.lenses(kind)]


def toy_rows(lens) -> Iterator[dict]:
    for norm, v in lens.data["counts"].items():
        yield {"lens": lens.kind, "norm": norm, "method": "toy-method", "unit": "seed", "unit_id": 0,
               "subset": "all", "metric": "count", "epoch": None, "value": float(v)}


VIEW = LensView("toy-section", "Toy lens heading", "What the toy figure shows.", toy_tables, toy_rows, nav="Toy")


class ToyConfig(BaseModel):
    pass


def _run(cfg, out, *, progress=True, executor=None):  # never called: the results are written by the test
    raise NotImplementedError


def png(path: Path, w: int = 3, h: int = 2) -> None:
    """A valid w×h grey PNG (the report embeds only readable PNGs)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\x80" * w for _ in range(h))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture
def toys():
    specs = (LensSpec(TOY, results="toy.json", figure="toy.png", title="Toy lens", view=f"{__name__}:VIEW"),
             LensSpec(PLAIN, results="plain.json", title="Plain toy lens"))
    summaries = (None, lambda r: f"plain toy summary: {len(r['auc_per_target'])} targets")
    for spec, summary in zip(specs, summaries):
        registry.register(registry.Lens.of(spec, config=ToyConfig, run=_run, summary=summary))
    try:
        yield
    finally:
        registry.unregister(TOY)
        registry.unregister(PLAIN)


def write_run(root: Path, kinds=(TOY, PLAIN)) -> Path:
    """A folder of lens folders, as `bnmem toy-view --out root/a` etc. would leave it."""
    docs = {TOY: ("toy.json", {"counts": {"batch": 7, "none": 3}}),
            PLAIN: ("plain.json", {"auc_per_target": [0.6, float("nan"), 0.7], "n": 3})}
    for kind in kinds:
        name, body = docs[kind]
        folder = root / kind
        folder.mkdir(parents=True)
        (folder / name).write_text(json.dumps({"lens": kind, "schema_version": 1, **body,
                                               "conditions": CONDITIONS}), encoding="utf-8")
        if kind == TOY:
            png(folder / "toy.png")
    return root


def test_a_lens_with_its_own_view_gets_its_section_tables_and_tidy_rows(toys, tmp_path):
    from bnmem.report.build import build_report
    from bnmem.results import load

    run = write_run(tmp_path / "run")
    rep = build_report(run)
    html = rep.html.read_text(encoding="utf-8")
    md = rep.markdown.read_text(encoding="utf-8")
    # Its section: heading, caption, figure, the nav word, and its key table folded under the figures.
    assert '<section id="toy-section"><h2>Toy lens heading</h2>' in html
    assert "What the toy figure shows." in html and 'alt="toy-view: toy.png"' in html
    assert '<a href="#toy-section">Toy</a>' in html and 'id="tables-toy-section"' in html
    assert "Toy counts — digits · lenet · label noise 0.1" in html and "### Toy counts — digits" in md
    # After the built-in sections (views without a position come last, in the run's order: toy-plain's folder
    # sorts first).
    assert html.index('id="mitigate"') < html.index('id="lens-toy-plain"') < html.index('id="toy-section"')
    # The lens without a view: a generic section with its own summary table.
    assert "<h2>Plain toy lens</h2>" in html and "plain toy summary: 3 targets" in html
    assert "plain toy summary: 3 targets" in md

    df = load(run, progress=False)
    toy = df[df["lens"] == TOY]
    assert sorted(zip(toy["norm"], toy["value"])) == [("batch", 7.0), ("none", 3.0)]
    assert set(toy["method"]) == {"toy-method"} and set(toy["dataset"]) == {"digits"}
    plain = df[(df["lens"] == PLAIN) & (df["metric"] == "auc_per_target")]
    assert plain["unit_id"].tolist() == [0, 1, 2] and math.isnan(plain["value"].iloc[1])  # the NaN row stays


def test_a_view_not_always_shown_is_absent_from_a_run_without_its_lens(toys, tmp_path):
    from bnmem.report.build import build_report

    html = build_report(write_run(tmp_path / "run", kinds=(PLAIN,))).html.read_text(encoding="utf-8")
    assert 'id="toy-section"' not in html and 'id="lens-toy-plain"' in html
    assert '<section id="lira"><h2>' in html  # the built-in views are always shown ("not run")


def test_every_builtin_spec_names_a_view_or_takes_the_generic_one():
    """The built-in views resolve to LensView objects with distinct sections; a spec without one (defenses)
    gets the generic section id."""
    from bnmem.lenses import spec as specs
    from bnmem.report.views import view_of

    views = {s.name: view_of(s.name) for s in specs.all_specs()}
    assert all(isinstance(v, LensView) for v in views.values())
    assert len({v.section for v in views.values()}) == len(views)
    assert {n for n, s in specs.SPECS.items() if s.view is None} == {"defenses"}
    assert views["defenses"].section == "lens-defenses"


def test_compact_split_names_stop_at_the_parts_that_tell_settings_apart():
    """The headline's split cell names each setting by the first parts that differ (the demo's claim 6 named its
    λ comparison too and pushed the forest plot below the first screen)."""
    from bnmem.report.forest import distinct_parts

    assert distinct_parts(["digits · lenet · label noise 0.05, BN vs BN + reg λ selected per replicate (1, 10, 1)",
                           "digits · lenet · OOD 0.05 (noise), BN vs BN + reg λ=1"]) == [
        "label noise 0.05", "OOD 0.05 (noise)"]
    assert distinct_parts(["d · a · x: y", "d · a · x: z"]) == ["y", "z"]  # shared leading parts dropped
    assert distinct_parts(["d · a · x, p", "d · b · x, q"]) == ["a", "b"]


def test_headline_says_a_shared_rule_history_once_and_keeps_a_column_when_they_differ(monkeypatch):
    """The headline's rule history: a column headed by the plan's record while the claims' histories differ;
    said once beside the run's label when every claim shares it. A claim's power and split settings are on one
    line under its row, spanning the columns after '#', and a decided row without a split has no such line."""
    import re

    from bnmem.report import headline
    from bnmem.report.html import headline_block
    from bnmem.report.preregistration import FIXED

    def row(cid, rule, power="—", split=""):
        return {"id": cid, "status": "inconclusive", "title": f"claim {cid}", "effect": "+0.1 [-0.1, +0.3]",
                "paper": "the paper's words", "rule": rule, "split": split, "power_short": power,
                "underpowered": power != "—"}

    rows = [row("1", "rule unchanged in 9.9", power="0.10 at 3 rep. (observed SD) · 80%: ~40",
                split="split: a: reproduced +1; b: inconclusive +0"), row("2", "rule written after seeing data")]
    monkeypatch.setattr(headline, "headline_rows", lambda claims, state="": rows)
    page = headline_block([], FIXED, "exploratory: a label")
    assert page.count("<th>") == 6 and "every claim's" not in page
    assert 'data-label="plan ' in page and "rule unchanged in 9.9</td>" in page
    more = re.findall(r'<tr class="headline-more" data-claim="(\w+)"><td colspan="2"></td><td class="note" '
                      r'colspan="(\d)">(.*?)</td></tr>', page)
    assert [(cid, span) for cid, span, _ in more] == [("1", "4")]  # claim, effect, paper, rule
    assert "0.10 at 3 rep." in more[0][2] and "<b>underpowered</b>" in more[0][2] and "b: inconclusive +0" in more[0][2]
    rows[1]["rule"] = rows[0]["rule"]
    page = headline_block([], FIXED, "exploratory: a label")
    assert page.count("<th>") == 5 and "rule unchanged in 9.9</td>" not in page
    assert re.search(r'id="run-label"><b>exploratory: a label</b> <span class="note" id="rule-history">· plan '
                     r"[\d.]+ \(recorded before this run\): every claim's rule unchanged in 9.9</span>", page)
    assert 'colspan="3"' in page
