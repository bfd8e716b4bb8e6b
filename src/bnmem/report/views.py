"""How each lens appears in the report and the tidy export: one :class:`LensView` per lens.

A view is the report's adapter for one lens: its HTML section (id, heading, the
caption of its figures), the key tables shown under those figures (and in
summary.md), and the reader that turns its results file into rows of the tidy
export. The report finds a lens's view through the lens's static spec
(:attr:`bnmem.lenses.spec.LensSpec.view`, a ``"module:attribute"`` reference,
because the lenses layer sits below the report and may not import it); a lens
whose spec names no view (a plugin, a test's toy lens, the built-in defenses) gets
:func:`generic_view`: a section with its figures, the table its own summary
prints, and every number of its results file in the tidy export, NaN included.
Nothing here is keyed by a lens's name: adding a lens touches its spec, and its
view if it wants more than the generic one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from bnmem.lenses import spec as specs
from bnmem.names import THEORY
from bnmem.report.claims.claim4 import layer_tables
from bnmem.report.claims.claim7 import push_tables
from bnmem.report.memeps import epsilon_tables, memorization_score_tables
from bnmem.report.results import SHOWN_REPLICATES, shown
from bnmem.report.rundata import CellOutput, LensOutput, RunData
from bnmem.report.tables import (
    Table, gamma_sigma_table, gradnorms_table, lens_summary_table, lira_tables, memorization_table, mitigation_table,
    theory_table,
)
from bnmem.report import readers

Row = dict[str, Any]
# tables(run, kind) -> the section's key tables beyond the per-cell ones; cell_tables(cell, lens) -> one cell's;
# rows(lens) -> the lens's tidy rows.
TablesFn = Callable[[RunData, str], list[Table]]
CellTablesFn = Callable[[CellOutput, LensOutput], "Table | list[Table]"]
RowsFn = Callable[[LensOutput], Iterator[Row]]

# Sections of views without a position (generic ones) come after the positioned ones, in the run's order.
LAST = 1_000


@dataclass(frozen=True)
class LensView:
    """The report's adapter for one lens.

    Attributes:
        section: id of its HTML section (also the key of its tables in :func:`key_tables`).
        heading: the section's heading.
        caption: what its figures show (the caption under the heading).
        tables: ``tables(run, kind)``: the key tables shown folded under its figures and in summary.md, beyond
            the per-cell ones (per setting, study-wide), after them.
        rows: ``rows(lens)``: its tidy rows (None: :func:`bnmem.report.readers.generic_rows`, every number);
            a lens whose spec says ``tidy=False`` contributes none whatever its view says.
        nav: the short word of the page's navigation line (default: the heading).
        always: its section is on the page also when the run lacks the lens (it then says "not run").
        position: sections are ordered by it (then by first appearance in the run).
        cell_tables: ``cell_tables(cell, lens)``: the key tables of one cell (a table or a list of them), for the
            cells of the replicates the page shows (:meth:`key_tables`); None: none per cell.
    """

    section: str
    heading: str
    caption: str
    tables: TablesFn = lambda run, kind: []  # noqa: E731 - a view without key tables
    rows: RowsFn | None = None
    nav: str = ""
    always: bool = False
    position: int = LAST
    cell_tables: CellTablesFn | None = None

    def key_tables(self, run: RunData, kind: str, shown_replicates: int = SHOWN_REPLICATES) -> list[Table]:
        """The section's key tables: each shown cell's (:attr:`cell_tables`, for a setting's first
        ``shown_replicates`` replicates: the claims use every replicate, the page shows the first), then
        :attr:`tables`."""
        out: list[Table] = []
        if self.cell_tables is not None:
            for cell, lens in run.lenses(kind):
                if shown(cell, shown_replicates):
                    t = self.cell_tables(cell, lens)
                    out += t if isinstance(t, list) else [t]
        return out + self.tables(run, kind)


def outputs(run: RunData, kind: str) -> list[tuple[CellOutput | None, LensOutput]]:
    """Every output of one lens in a run: (None, it) for a once-per-study lens, else (cell, it) per cell."""
    if kind == THEORY and run.theory is not None:  # RunData keeps the toy model's folder apart
        return [(None, run.theory)]
    if kind in run.studywide:
        return [(None, run.studywide[kind])]
    return list(run.lenses(kind))


def _summary_tables(run: RunData, kind: str) -> list[Table]:
    """The table a lens's own command prints, per output (the generic view's key tables)."""
    pairs = [("" if cell is None else cell.describe(), lens) for cell, lens in outputs(run, kind)]
    return [t for label, lens in pairs if (t := lens_summary_table(label, lens)) is not None]


def lens_title(kind: str) -> str:
    """A lens's report title (its spec's), or its name when this installation does not know it."""
    spec = specs.find(kind)
    return (spec.title if spec else "") or kind


def generic_view(kind: str) -> LensView:
    """The view of a lens whose spec names none: its figures, its summary table, every number as a tidy row."""
    return LensView(f"lens-{kind}", lens_title(kind), f"Results of the {kind} lens.", _summary_tables)


def view_of(kind: str) -> LensView:
    """The view of the lens called ``kind``: the one its spec names (``"module:attribute"``), else the generic one."""
    spec = specs.find(kind)
    if spec is None or spec.view is None:
        return generic_view(kind)
    view = specs.resolve(spec.view)
    if not isinstance(view, LensView):
        raise TypeError(f"{spec.view} (the view of lens {kind!r}) is not a LensView")
    return view


def tidy_reader(kind: str) -> RowsFn | None:
    """The tidy reader of a lens: its view's, else the generic one; None when its spec keeps it out."""
    spec = specs.find(kind)
    if spec is not None and not spec.tidy:
        return None
    return view_of(kind).rows or readers.generic_rows


def sections(run: RunData) -> list[tuple[str, LensView]]:
    """(lens kind, view) of every section of the page: the views shown always, and every lens present in
    the run, ordered by the views' positions (then by first appearance)."""
    present = [*(k for c in run.cells for k in c.lenses), *run.studywide,
               *([THEORY] if run.theory is not None else [])]
    kinds = dict.fromkeys([*(s.name for s in specs.all_specs() if view_of(s.name).always), *present])
    order = {k: i for i, k in enumerate(kinds)}
    views = [(k, view_of(k)) for k in kinds]
    return sorted(views, key=lambda kv: (kv[1].position, order[kv[0]]))


def key_tables(run: RunData, shown_replicates: int = SHOWN_REPLICATES) -> dict[str, list[Table]]:
    """Section id -> the key tables shown under that section's figures (sections without tables left out), the
    per-cell ones for each setting's first ``shown_replicates`` replicates."""
    out = {view.section: view.key_tables(run, kind, shown_replicates) for kind, view in sections(run)}
    return {k: v for k, v in out.items() if v}


# ---------------------------------------------------------------------------------------------------------
# The built-in lenses' views (their specs name them: bnmem.lenses.spec.SPECS).

_NUMBERS = {1: "One", 2: "Two", 3: "Three", 4: "Four", 6: "Six", 9: "Nine"}


def layout_words(rows: int, cols: int) -> str:
    """'Six panels (2 rows × 3 columns)' / 'Three panels in a row'."""
    n = rows * cols
    count = f"{_NUMBERS.get(n, n)} panel{'s' if n > 1 else ''}"
    return f"{count} in a row" if rows == 1 else f"{count} ({rows} rows × {cols} columns)"


# The panel grid (rows, columns) of the figures with a fixed layout, as their captions describe it
# (tests/test_report_figures.py draws each figure and compares).
MEMORIZE_LAYOUT, GAMMA_SIGMA_LAYOUT, THEORY_LAYOUT, MITIGATE_LAYOUT = (1, 2), (1, 3), (2, 3), (1, 3)

MEMORIZE = LensView(
    "memorization", "Memorization curves",
    f"{layout_words(*MEMORIZE_LAYOUT)}, per epoch; line = mean over seeds, band = min–max over seeds. "
    "Left: accuracy on the corrupted subset (flipped labels solid, OOD dashed), which is pure memorization: "
    "nothing generalizable links those inputs to their labels. Right: clean train (dotted) and test (solid) "
    "accuracy. On clean data (no corrupted subset) only the right panel is drawn.",
    rows=readers.memorize_rows, nav="Memorization", always=True, position=0, cell_tables=memorization_table)

GRADNORMS = LensView(
    "gradnorms", "Per-sample gradient norms",
    "One panel per (gradient definition, checkpoint): a row per definition (eval: running statistics; batch: "
    "the example's own loss term in a training-mode batch), a column per checkpoint epoch. Each panel: "
    "empirical CDFs of per-sample gradient norms (log axis); colour = norm, line style = subset (clean solid, "
    "noisy dashed, OOD dotted); seeds pooled. A curve further right = larger gradients.",
    rows=readers.gradnorms_rows, nav="Gradient norms", always=True, position=1, cell_tables=gradnorms_table)


def _lira_tables(run: RunData, kind: str) -> list[Table]:
    """Per setting the memorization-score and ε_lb tables (after each cell's attack tables)."""
    return memorization_score_tables(run) + epsilon_tables(run)


LIRA = LensView(
    "lira", "Membership inference (log-log ROC)",
    "One panel per attack, four per row: ROC curves on log-log axes (low false-positive rates are what "
    "matter), pooled over target models, per norm for all examples and for the outlier subset (on clean data: "
    "all examples only); dashed diagonal = random guessing. Further panels, where present: the memorization "
    "scores' distributions and the examples each norm memorizes most.",
    _lira_tables, readers.lira_rows, nav="Membership inference", always=True, position=2, cell_tables=lira_tables)


def _gamma_sigma_tables(run: RunData, kind: str) -> list[Table]:
    """Claim 4's layer tables and claim 7's own-loss push tables (after each cell's per-layer table)."""
    return layer_tables(run) + push_tables(run)


GAMMA_SIGMA = LensView(
    "gamma_sigma", "γ/σ per BN layer",
    f"{layout_words(*GAMMA_SIGMA_LAYOUT)}, one colour per BN layer. Left: the median |γ|/σ over "
    "channels per epoch (running σ solid, batch σ dashed; grey line = 1). Middle: the fraction of channels "
    "above 1 per epoch. Right: every channel's ratio at the final epoch (running σ, all seeds). A ratio above "
    "1 amplifies the per-step margin growth of the samples that channel carries (claim 4).",
    _gamma_sigma_tables, readers.gamma_sigma_rows, nav="γ/σ", always=True, position=3,
    cell_tables=gamma_sigma_table)


def _theory_tables(run: RunData, kind: str) -> list[Table]:
    return [theory_table(lens) for _, lens in outputs(run, kind)]


THEORY_VIEW = LensView(
    "theory", "Toy model (theory)",
    f"{layout_words(*THEORY_LAYOUT)}. Top row: (left) per-step outlier-margin growth of BN over the "
    "matched no-norm model when only w steps, measured vs predicted (γ/σ)² (frozen statistics: claim 5a's "
    "derivation check) and (γ/σ)²·ρ (real step); (middle) outlier margins over training, BN red, no norm "
    "blue; (right) claim 5b: the ratio of BN's (w, γ, β) step to the matched no-norm model's step at every "
    "step, median and IQR over seeds × outliers per outlier kind (flip, OOD), dashed = the median (γ/σ)². "
    "Bottom row: (left) γ and γ/σ with outliers and with the outliers replaced by clean samples; (middle) "
    "first-order prediction error vs probe step size; (right) claim 5b: every (step, outlier, seed) ratio "
    "against its (γ/σ)², black line = ratio equal to (γ/σ)², grey band = within a factor of 2.",
    _theory_tables, nav="Toy model", always=True, position=4)

MITIGATE = LensView(
    "mitigate", "Privacy–utility trade-off of the γ/σ regularizer",
    f"{layout_words(*MITIGATE_LAYOUT)} (two without LiRA) for BN, BN + γ/σ regularizer at each λ, "
    "and no normalization. Left: memorization (corrupted-subset accuracy) against test accuracy, filled at "
    "the fixed epoch, hollow at the last, bars = seed min–max. Middle: memorization over training. Right, "
    "where measured: LiRA (o) and RMIA (s) AUC against test accuracy. On clean data (no corrupted subset) "
    "the two memorization panels are left out.",
    rows=readers.mitigate_rows, nav="Regularizer", always=True, position=5, cell_tables=mitigation_table)
