"""The measure leaderboard of a stored study (`oodeval.measures.meta.measure_leaderboard`):
the ``leaderboard`` table of `study analyze` (``leaderboard.csv``), its section of
``analysis.md`` and of the HTML report, and `oodeval study measures`.

One row per measure, best first; how to read it is `leaderboard_footnote`. `Leaderboard` is
the table with its sentence and footnote as one object, which prints as ``oodeval study
measures`` prints one study and shows itself in a notebook (`leaderboard_of` computes it for a
study; ``Leaderboard(analyze(study)["leaderboard"])`` wraps the table `analyze` returns).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from oodeval.errors import OodevalError
from oodeval.measures.meta import (
    BOOTSTRAP_RESAMPLES,
    VERSUS,
    leaderboard_sentence,
    measure_leaderboard,
)
from oodeval.measures.registry import measure_label
from oodeval.report.notebook import Displayed, HtmlParts
from oodeval.tables import Table, render_frame

__all__ = [
    "LEADERBOARD_TITLE",
    "Leaderboard",
    "leaderboard_footnote",
    "leaderboard_measures",
    "leaderboard_text",
    "leaderboard_view",
    "merged_rows",
    "study_leaderboard",
]


def leaderboard_footnote(n_resamples: int = BOOTSTRAP_RESAMPLES) -> str:
    """How to read a leaderboard whose intervals came from `n_resamples` bootstrap draws.

    >>> "(50 draws" in leaderboard_footnote(50), "no bootstrap" in leaderboard_footnote(0)
    (True, True)
    """
    intervals = (
        f"[low, high]: 95% percentile bootstrap interval, cells drawn with replacement "
        f"({n_resamples} draws, the same for every measure). "
        if n_resamples
        else "There are no bootstrap intervals (0 draws). "
    )
    return (
        "A cell is one (scenario, seed). rho, tau: mean over cells of Spearman's rho and "
        "Kendall's tau-b across algorithms between the measure and the ideal measure (Eq. 4). "
        "degradation: mean over cells of |R_IDEAL(A*_IDEAL) - R_IDEAL(A*_measure)|. ideal's "
        "choice: cells where the measure picks the ideal measure's choice. trend: least-squares "
        "slope of the cells' rho against N, the number of given environments (n/a with one N). "
        + intervals
        + "vs average, vs worst+gap: cells where the measure's rho is higher - lower - equal, "
        "and the two-sided Wilcoxon signed-rank p of the per-cell rho differences "
        "(scipy.stats.wilcoxon, equal cells dropped; n = cells that differ). Measures named "
        "together in one row (a / b) rank the algorithms identically in every cell, so every "
        "number of the row is the same for each."
    )


def leaderboard_measures(frame: pd.DataFrame) -> list[str]:
    """The measure columns of `study_unit_measures`' frame: every column after ``ideal``."""
    columns = list(frame.columns)
    return columns[columns.index("ideal") + 1 :]


def study_leaderboard(
    frame: pd.DataFrame,
    measures: Sequence[str] | None = None,
    *,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> pd.DataFrame:
    """The leaderboard (`meta.measure_leaderboard`) over the (scenario, seed) cells of
    `frame`, `study_unit_measures`' output without single-algorithm cells (`correlatable`);
    `measures` default to its measure columns."""
    names = leaderboard_measures(frame) if measures is None else list(measures)
    missing = [m for m in VERSUS if m not in frame.columns]
    if missing:
        raise OodevalError(
            f"the leaderboard compares every measure with {', '.join(VERSUS)}; compute "
            f"{', '.join(missing)} too"
        )
    board = measure_leaderboard(frame, names, n_resamples=n_resamples, seed=seed)
    return pd.DataFrame(board)


def _bracket(board: pd.DataFrame, point: str, stem: str, digits: int = 3) -> list[str]:
    out = []
    for v, lo, hi in zip(board[point], board[f"{stem}_low"], board[f"{stem}_high"], strict=True):
        if math.isnan(v):
            out.append("n/a")
        elif math.isnan(lo):
            out.append(f"{v:.{digits}f}")
        else:
            out.append(f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]")
    return out


def _duel(board: pd.DataFrame, ref: str) -> list[str]:
    cells = []
    for row in board.itertuples(index=False):
        wins, losses, ties, n, p = (
            getattr(row, f"vs_{ref}_{k}") for k in ("wins", "losses", "ties", "n", "p")
        )
        test = "–" if n == 0 else f"p={p:.2g}, n={n}"
        cells.append(f"{wins}-{losses}-{ties} ({test})")
    return cells


def merged_rows(board: pd.DataFrame) -> pd.DataFrame:
    """`board` with rank-identical measures (its ``same_ranks`` column,
    `oodeval.measures.meta.rank_identical_groups`) as one row: the first of them, its
    ``label`` listing them all (``worst / worst only / scaled worst``), ranked again over the
    rows left (1 + the number of rows with a higher mean rho)."""
    if "same_ranks" not in board.columns or board.empty:
        return board
    keys = [
        frozenset([m, *filter(None, str(alike).split(","))])
        for m, alike in zip(board["measure"], board["same_ranks"].fillna(""), strict=True)
    ]
    labels: dict[frozenset[str], list[str]] = {}
    for key, label in zip(keys, board["label"], strict=True):
        labels.setdefault(key, []).append(str(label))
    first = ~pd.Series(keys, index=board.index).duplicated()
    rows = board[first.to_numpy()].copy()
    rows["label"] = [" / ".join(labels[k]) for k, f in zip(keys, first, strict=True) if f]
    rho = rows["spearman_mean"].fillna(-math.inf).to_numpy()
    rows["rank"] = [1 + int((rho > r).sum()) for r in rho]
    return rows.reset_index(drop=True)


def leaderboard_view(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard as printed: one row per measure, rank-identical measures as one row
    (`merged_rows`), intervals in brackets."""
    board = merged_rows(board)
    picks = [
        f"{round(share * n)} of {n}"
        for share, n in zip(board["ideal_choice_mean"], board["n_cells"], strict=True)
    ]
    return pd.DataFrame(
        {
            "rank": board["rank"],
            "measure": board["label"],
            "rho [95% CI]": _bracket(board, "spearman_mean", "spearman"),
            "tau [95% CI]": _bracket(board, "kendall_mean", "kendall"),
            "degradation [95% CI]": _bracket(board, "degradation_mean", "degradation"),
            "ideal's choice": picks,
            "trend (rho per env) [95% CI]": _bracket(board, "trend_slope", "trend"),
            **{f"vs {measure_label(ref)}": _duel(board, ref) for ref in VERSUS},
        }
    )


def leaderboard_text(
    board: pd.DataFrame, render: Callable[[pd.DataFrame], str] | None = None
) -> list[str]:
    """The lines of the leaderboard's section: the sentence, the table, the footnote.

    `render` turns a DataFrame into table text (default: markdown as in ``analysis.md``).
    """
    from oodeval._text import safe_text
    from oodeval.tables import render_frame

    view = leaderboard_view(board)
    if render is None:
        table = render_frame(view, "markdown", digits=3, right=[False] * len(view.columns))
    else:
        table = render(view)
    sentence = safe_text(leaderboard_sentence(board.to_dict("list")))
    return [sentence, "", table, "", leaderboard_footnote(), ""]


#: The title of the leaderboard's table in the HTML report and in a notebook.
LEADERBOARD_TITLE = "Measures ranked by mean rho"


@dataclass(repr=False)
class Leaderboard(Displayed):
    """A measure leaderboard with the sentence that reads it and its footnote.

    ``print(board)`` gives what ``oodeval study measures`` prints for one study (`render`); in a
    notebook it shows the sentence first, then the table (`leaderboard_view`) in the HTML
    report's markup, the footnote under it.

    Attributes
    ----------
    board : pandas.DataFrame
        `study_leaderboard`'s table (``analyze(study)["leaderboard"]``): one row per measure.
    n_resamples : int
        The bootstrap draws behind its intervals, which the footnote states.
    """

    board: pd.DataFrame
    n_resamples: int = BOOTSTRAP_RESAMPLES

    @property
    def sentence(self) -> str:
        """The leading measure and how it fares (`oodeval.measures.meta.leaderboard_sentence`)."""
        return leaderboard_sentence(self.board.to_dict("list"))

    @property
    def view(self) -> pd.DataFrame:
        """The table as printed (`leaderboard_view`)."""
        return leaderboard_view(self.board)

    @property
    def footnote(self) -> str:
        """How to read the table (`leaderboard_footnote`)."""
        return leaderboard_footnote(self.n_resamples)

    def render(self, fmt: str = "table", *, footnote: bool = True) -> str:
        """The sentence, the table (3 decimals) and, with `footnote`, the footnote, in output
        format ``table`` or ``markdown``, as ``oodeval study measures`` prints one study."""
        from oodeval._text import safe_text

        if fmt not in ("table", "markdown"):
            raise OodevalError(f"fmt is {fmt!r}; Leaderboard.render writes table or markdown")
        parts = [safe_text(self.sentence), render_frame(self.view, fmt, digits=3)]
        return "\n\n".join(parts + [self.footnote] * footnote)

    def __repr__(self) -> str:
        """One line: how many measures, and the sentence."""
        from oodeval._text import safe_text

        return safe_text(f"<Leaderboard of {len(self.board)} measures: {self.sentence}>")

    def html_parts(self) -> HtmlParts:
        """The sentence, then the table under `LEADERBOARD_TITLE` with the footnote as its
        caption (a notebook's display, `Displayed`)."""
        return HtmlParts(self.sentence, [Table(LEADERBOARD_TITLE, self.view, self.footnote)])
