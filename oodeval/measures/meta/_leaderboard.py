"""The measure leaderboard: which measure tracks the ideal measure best over many cells, and how
sure we are (beyond the worst+gap paper, which compares measures one scenario at a time).

A *cell* is one (scenario, seed): the algorithms trained with that seed on that scenario. Per
cell and measure (`leaderboard_cells`): Spearman's rho and Kendall's tau-b with the ideal
measure across the cell's algorithms (`rank_correlation`), the choice degradation
|R^IDEAL(A*_IDEAL) - R^IDEAL(A*_measure)| and whether the measure picks the ideal measure's choice
(`choices`), and the cell's number of given environments N. Over the cells
(`measure_leaderboard`), per measure:

- the mean rho and tau (over the cells where they are defined), the mean degradation and the
  share of cells where the measure picks the ideal measure's choice;
- the asymptotic trend: the least-squares slope of the cells' rho against N (rho per added
  environment; NaN, printed n/a, with one N);
- percentile bootstrap intervals of each: cells are drawn with replacement, the same draws for
  every measure and statistic (`BOOTSTRAP_RESAMPLES` draws, seeded);
- head to head against each of `VERSUS` (average and worst+gap): in how many cells its rho is
  higher (wins), lower (losses) or equal (ties, after rounding to `TIE_DECIMALS`), and the
  two-sided Wilcoxon signed-rank test (`scipy.stats.wilcoxon`, zeros dropped: n = wins +
  losses) of the per-cell rho differences; `smallest_wilcoxon_p(n)` says how small p can get.

Two measures are *rank-identical* on a study (`rank_identical_groups`) when they give every
algorithm the same rank (`algorithm_ranks`, ties after rounding to `TIE_DECIMALS`) in every
(scenario, seed) cell of the study: then every statistic above is the same for both (rho, tau,
choices, degradation, trend and the head-to-head counts), as for worst only and worst, or for
worst and scaled worst (worst divided by one number per scenario). The leaderboard's
``same_ranks`` column names them, and its printed views show them as one row.

`leaderboard_sentence` puts the result in one plain sentence. Where no ideal measure exists (a
DomainBed sweep, `NO_IDEAL_NOTE`), `measure_rankings` gives each measure's ranking of the
algorithms instead.

>>> units = {
...     "scenario": ["s"] * 4, "seed": [0] * 4, "algorithm": ["A", "B", "C", "D"],
...     "n_given": [4] * 4, "ideal": [0.1, 0.2, 0.3, 0.4],
...     "average": [0.4, 0.3, 0.2, 0.1], "worst_plus_gap": [0.1, 0.2, 0.3, 0.4],
... }
>>> board = measure_leaderboard(units, ["worst_plus_gap", "average"], n_resamples=0)
>>> board["measure"].tolist(), board["spearman_mean"].tolist(), board["vs_average_wins"].tolist()
(['worst_plus_gap', 'average'], [1.0, -1.0], [1, 0])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.limits import check_confidence, check_resamples, check_seed
from oodeval.measures.meta._choice import TIE_DECIMALS, algorithm_ranks
from oodeval.measures.meta._correlation import BOOTSTRAP_RESAMPLES, CONFIDENCE
from oodeval.measures.meta._tables import choices, ideal_correlations
from oodeval.measures.meta._units import (
    UNIT_KEYS,
    Columns,
    column_array,
    python_value,
    records_to_columns,
    row_groups,
)
from oodeval.measures.registry import measure_label

__all__ = [
    "LEADERBOARD_STATISTICS",
    "NO_IDEAL_NOTE",
    "VERSUS",
    "bootstrap_means",
    "head_to_head",
    "leaderboard_cells",
    "leaderboard_sentence",
    "measure_leaderboard",
    "measure_rankings",
    "rank_identical_groups",
    "rho_slope",
    "smallest_wilcoxon_p",
]

VERSUS = ("average", "worst_plus_gap")
"""The measures every measure is compared with head to head: the usual one and the paper's."""

LEADERBOARD_STATISTICS = ("spearman", "kendall", "degradation", "ideal_choice", "trend")
"""The statistics with a point estimate and an interval (``<stat>_mean``/``_low``/``_high``;
``trend`` is ``trend_slope``/``_low``/``_high``)."""

NO_IDEAL_NOTE = (
    "no ideal measure exists for a DomainBed sweep: the ideal measure (Eq. 4) needs the errors "
    "of a model trained on all given environments on environments it never saw, which a sweep "
    "does not record, so no measure can be scored against it; shown instead: each measure's "
    "ranking of the algorithms"
)


def leaderboard_cells(units: Mapping[str, Any], measures: Sequence[str]) -> Columns:
    """Per (scenario, seed) cell and measure: rho and tau-b with the ideal measure, the choice
    degradation, whether the choice is the ideal measure's, and the cell's N.

    Parameters
    ----------
    units : table with scenario, seed, algorithm, n_given, ideal and the measure columns (as
        `unit_measures` returns it); cells with fewer than two algorithms have no correlation
        and are refused
    measures : measure columns

    Returns
    -------
    Columns: scenario, seed, measure, n_given, n_algorithms, spearman, kendall (NaN when a
    ranking is constant), degradation, ideal_choice (1.0 when the measure picks the ideal
    measure's choice, or an algorithm tied with it under the ideal measure, else 0.0); cells
    in order of first appearance, measures in given order
    """
    measures = list(dict.fromkeys(measures))
    corr = ideal_correlations(units, measures)
    chosen = choices(units, measures)
    keys = [column_array(units, k) for k in ("scenario", "seed")]
    n_given = column_array(units, "n_given")
    cell_n = {
        (python_value(keys[0][r[0]]), python_value(keys[1][r[0]])): int(n_given[r[0]])
        for r in row_groups(*keys)
    }
    out: Columns = {k: corr[k] for k in ("scenario", "seed", "measure")}
    out["n_given"] = np.array(
        [cell_n[(s, e)] for s, e in zip(corr["scenario"], corr["seed"], strict=True)],
        dtype=np.int64,
    )
    out["n_algorithms"] = corr["n_algorithms"]
    out["spearman"] = corr["spearman"]
    out["kendall"] = corr["kendall"]
    out["degradation"] = chosen["degradation"]
    # the ideal's choice when its ideal error ties the ideal's own pick (degradation 0 after
    # rounding): an ideal measure with tied algorithms has several choices
    picks_ideal = np.round(np.asarray(chosen["degradation"], float), TIE_DECIMALS) == 0
    out["ideal_choice"] = (chosen["matches_ideal"].astype(bool) | picks_ideal).astype(np.float64)
    return out


def bootstrap_means(values: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """The mean over the drawn cells of each row of `values`, ignoring undefined (NaN) cells.

    mean_b = sum_{c in draw b, defined} v_c / #{c in draw b, defined}; NaN when a draw holds
    no defined cell. `values` (M, C), `draws` (B, C) cell indices; returns (M, B).

    >>> bootstrap_means(np.array([[1.0, np.nan, 3.0]]), np.array([[0, 0, 2], [1, 1, 1]]))
    array([[1.66666667,        nan]])
    """
    taken = values[:, draws]  # (M, B, C)
    defined = np.isfinite(taken)
    count = defined.sum(axis=-1)
    total = np.where(defined, taken, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.where(count > 0, count, 1), np.nan)


def rho_slope(rho: np.ndarray, n_given: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Least-squares slope of rho against N over each draw's cells (defined rho only).

    slope = sum (x - x_bar)(y - y_bar) / sum (x - x_bar)^2 over the drawn cells with a defined
    rho (a cell drawn twice counts twice); NaN when those cells hold fewer than two distinct N.
    `rho` (M, C), `n_given` (C,), `draws` (B, C); returns (M, B).

    >>> rho_slope(np.array([[0.1, 0.3, 0.5]]), np.array([4, 5, 6]), np.array([[0, 1, 2]]))
    array([[0.2]])
    """
    y = rho[:, draws]  # (M, B, C)
    w = np.isfinite(y).astype(np.float64)
    x = np.broadcast_to(n_given.astype(np.float64)[draws], y.shape)
    y = np.where(w > 0, y, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        n = w.sum(axis=-1, keepdims=True)
        x_bar = (w * x).sum(axis=-1, keepdims=True) / n
        y_bar = (w * y).sum(axis=-1, keepdims=True) / n
        sxx = (w * (x - x_bar) ** 2).sum(axis=-1)
        sxy = (w * (x - x_bar) * (y - y_bar)).sum(axis=-1)
        # a spread of N below 1e-9 is a single N whose mean carries rounding noise
        return np.where(sxx > 1e-9, sxy / np.where(sxx > 1e-9, sxx, 1.0), np.nan)


def smallest_wilcoxon_p(n: int) -> float:
    """The smallest two-sided p the exact Wilcoxon signed-rank test can give on n pairs:
    2 / 2^n (every difference of one sign). Below 0.05 only from n = 6.

    >>> smallest_wilcoxon_p(3), smallest_wilcoxon_p(6)
    (0.25, 0.03125)
    """
    return float(min(1.0, 2.0 / 2.0**n)) if n > 0 else float("nan")


def head_to_head(rho: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """Wins, losses and ties of one measure's per-cell rho against a reference measure's, and
    the two-sided Wilcoxon signed-rank test of the differences.

    d_c = rho_c - rho_ref,c over the cells where both are defined, rounded to TIE_DECIMALS;
    wins = #{d > 0}, losses = #{d < 0}, ties = #{d = 0}. The test (`scipy.stats.wilcoxon`,
    zero_method "wilcox": ties dropped) runs on the n = wins + losses non-zero differences:
    exact for n <= 50 without tied |d|, else the normal approximation (chosen here, not by
    scipy's version-dependent "auto"); p is NaN when n = 0.

    Returns
    -------
    dict with wins, losses, ties, n (ints) and p (float)

    >>> head_to_head(np.array([0.5, 0.6, np.nan, 0.1]), np.array([0.2, 0.6, 0.3, 0.4]))
    {'wins': 1, 'losses': 1, 'ties': 1, 'n': 2, 'p': 1.0}
    """
    both = np.isfinite(rho) & np.isfinite(reference)
    d = np.round(rho[both] - reference[both], TIE_DECIMALS)
    wins, losses = int((d > 0).sum()), int((d < 0).sum())
    n = wins + losses
    p = float("nan")
    if n:
        from scipy import stats  # about a second to import: only when there is a test to run

        nonzero = d[d != 0]
        # The rule is ours, not scipy's "auto" (which differs between versions): the exact null
        # distribution when it is valid (n <= 50, no tied |d|), else the normal approximation.
        exact = n <= 50 and np.unique(np.abs(nonzero)).size == n
        method = "exact" if exact else "approx"
        p = float(stats.wilcoxon(nonzero, zero_method="wilcox", method=method).pvalue)
    return {"wins": wins, "losses": losses, "ties": int(d.size - n), "n": n, "p": p}


def _cell_matrices(cells: Columns, measures: list[str]) -> dict[str, np.ndarray]:
    """The per-cell statistics as (M, C) matrices, rows in `measures` order, and N as (C,)."""
    measure = cells["measure"]
    rows = [np.flatnonzero(measure == m) for m in measures]
    out = {
        stat: np.vstack([cells[stat][r].astype(np.float64) for r in rows])
        for stat in ("spearman", "kendall", "degradation", "ideal_choice")
    }
    out["n_given"] = cells["n_given"][rows[0]]
    return out


def _intervals(
    matrices: dict[str, np.ndarray], n_resamples: int, confidence: float, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(low, high) per measure of each statistic's percentile bootstrap interval over cells."""
    m, c = matrices["spearman"].shape
    if n_resamples <= 0:
        nan = np.full(m, np.nan)
        return {stat: (nan, nan) for stat in LEADERBOARD_STATISTICS}
    draws = np.random.default_rng(seed).integers(0, c, size=(int(n_resamples), c))
    boot = _resampled(matrices, draws)
    q = [(1 - confidence) / 2, (1 + confidence) / 2]
    out = {}
    for stat, values in boot.items():
        low, high = np.full(m, np.nan), np.full(m, np.nan)
        for k in range(m):
            valid = values[k][np.isfinite(values[k])]
            if valid.size:
                low[k], high[k] = np.quantile(valid, q)
        out[stat] = (low, high)
    return out


#: Draws resampled at once: the (measures, draws, cells) arrays of one chunk stay a few MB, so
#: memory does not grow with ``n_resamples`` (up to `MAX_RESAMPLES`).
DRAWS_PER_CHUNK = 1000


def _resampled(matrices: dict[str, np.ndarray], draws: np.ndarray) -> dict[str, np.ndarray]:
    """Each statistic's value per measure and draw, (M, B), computed `DRAWS_PER_CHUNK` draws
    at a time (the same numbers as all at once)."""
    chunks: dict[str, list[np.ndarray]] = {s: [] for s in LEADERBOARD_STATISTICS}
    for start in range(0, len(draws), DRAWS_PER_CHUNK):
        part = draws[start : start + DRAWS_PER_CHUNK]
        for stat in ("spearman", "kendall", "degradation", "ideal_choice"):
            chunks[stat].append(bootstrap_means(matrices[stat], part))
        chunks["trend"].append(rho_slope(matrices["spearman"], matrices["n_given"], part))
    return {stat: np.concatenate(parts, axis=1) for stat, parts in chunks.items()}


def rank_identical_groups(units: Mapping[str, Any], measures: Sequence[str]) -> list[list[str]]:
    """The `measures` grouped by identical rankings: two measures share a group when every
    (scenario, seed) cell of `units` gives each algorithm the same rank under both
    (`algorithm_ranks`: 1 = lowest, ties after rounding to `TIE_DECIMALS` share the smaller
    rank; an undefined score is a rank of its own). Groups and their members keep the order
    of `measures`; a measure alike to no other is a group of one.

    >>> units = {"scenario": ["s"] * 3, "seed": [0] * 3, "algorithm": ["A", "B", "C"],
    ...          "worst": [0.3, 0.1, 0.2], "scaled_worst": [0.6, 0.2, 0.4],
    ...          "average": [0.1, 0.2, 0.3]}
    >>> rank_identical_groups(units, ["worst", "average", "scaled_worst"])
    [['worst', 'scaled_worst'], ['average']]
    """
    by = [column_array(units, k) for k in ("scenario", "seed")]
    groups: dict[bytes, list[str]] = {}
    for measure in dict.fromkeys(measures):
        ranks = algorithm_ranks(column_array(units, measure).astype(np.float64), by=by)
        groups.setdefault(np.nan_to_num(ranks, nan=-1.0).tobytes(), []).append(measure)
    return list(groups.values())


def measure_leaderboard(
    units: Mapping[str, Any],
    measures: Sequence[str],
    *,
    versus: Sequence[str] = VERSUS,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Columns:
    """The leaderboard: every measure's statistics over the (scenario, seed) cells, best first.

    See the module's docstring for the statistics. Rows are ranked by mean Spearman's rho
    (highest first; equal means share the better rank; a measure with no defined rho last),
    then by name.

    Parameters
    ----------
    units : as `leaderboard_cells` takes it; it needs the `versus` columns too
    measures : measure columns to rank
    versus : measures every measure is compared with head to head
    n_resamples : bootstrap draws of cells (0: no intervals, NaN bounds)
    confidence : level of the intervals, in (0, 1)
    seed : seed of the draws (same seed, same intervals)

    Returns
    -------
    Columns: rank, measure, label, same_ranks (the other measures of its
    `rank_identical_groups` group, comma-separated; "" for none), n_cells, n_scenarios,
    n_seeds, then per statistic of
    `LEADERBOARD_STATISTICS` its ``_mean`` (``trend_slope``), ``_low`` and ``_high``, then per
    reference r of `versus`: ``vs_<r>_wins``, ``_losses``, ``_ties``, ``_n``, ``_p``
    """
    _check_options(n_resamples, confidence, seed)
    measures = list(dict.fromkeys(measures))
    if not measures:
        raise OodevalError("no measures to rank; name at least one")
    every = list(dict.fromkeys([*measures, *versus]))
    cells = leaderboard_cells(units, every)
    mats = _cell_matrices(cells, every)
    draws_all = np.arange(mats["spearman"].shape[1])[None, :]
    point = {
        stat: bootstrap_means(mats[stat], draws_all)[:, 0]
        for stat in ("spearman", "kendall", "degradation", "ideal_choice")
    }
    point["trend"] = rho_slope(mats["spearman"], mats["n_given"], draws_all)[:, 0]
    bounds = _intervals(mats, n_resamples, confidence, seed)
    alike = {m: g for g in rank_identical_groups(units, measures) for m in g}
    records = []
    for k, measure in enumerate(measures):
        record = _counts(units, cells, measure)
        record["same_ranks"] = ",".join(m for m in alike[measure] if m != measure)
        for stat in LEADERBOARD_STATISTICS:
            name = "trend_slope" if stat == "trend" else f"{stat}_mean"
            record[name] = float(point[stat][k])
            record[f"{stat}_low"], record[f"{stat}_high"] = (float(b[k]) for b in bounds[stat])
        for ref in versus:
            duel = head_to_head(mats["spearman"][k], mats["spearman"][every.index(ref)])
            record.update({f"vs_{ref}_{key}": value for key, value in duel.items()})
        records.append(record)
    return _ranked(records, versus)


def _counts(units: Mapping[str, Any], cells: Columns, measure: str) -> dict[str, Any]:
    mine = cells["measure"] == measure
    return {
        "measure": measure,
        "label": measure_label(measure),
        "n_cells": int(mine.sum()),
        "n_scenarios": len(set(cells["scenario"][mine].tolist())),
        "n_seeds": len(set(column_array(units, "seed").tolist())),
    }


def _ranked(records: list[dict[str, Any]], versus: Sequence[str]) -> Columns:
    """The records ordered by mean rho (highest first, NaN last, then name) with a rank."""
    rho = np.array([r["spearman_mean"] for r in records])
    ranks = algorithm_ranks(np.where(np.isnan(rho), np.inf, -rho))
    order = sorted(range(len(records)), key=lambda k: (ranks[k], records[k]["measure"]))
    for k in order:
        records[k]["rank"] = int(ranks[k])
    columns = ["rank", "measure", "label", "same_ranks", "n_cells", "n_scenarios", "n_seeds"]
    for stat in LEADERBOARD_STATISTICS:
        columns += ["trend_slope" if stat == "trend" else f"{stat}_mean"]
        columns += [f"{stat}_low", f"{stat}_high"]
    for ref in versus:
        columns += [f"vs_{ref}_{k}" for k in ("wins", "losses", "ties", "n", "p")]
    return records_to_columns([records[k] for k in order], columns)


def _check_options(n_resamples: Any, confidence: float, seed: Any) -> None:
    """The CLI's bounds (`oodeval.limits`): 0 to `MAX_RESAMPLES` draws, a level in (0, 1), a
    seed in [0, 2**32)."""
    check_resamples(n_resamples, "n_resamples")
    check_confidence(confidence)
    check_seed(seed, "seed")


def leaderboard_sentence(board: Mapping[str, Any], *, alpha: float = 0.05) -> str:
    """One plain sentence on a leaderboard: the leading measure, its mean rho with interval,
    and how it fares against worst+gap (or, when it is worst+gap, against average).

    >>> board = {"rank": [1], "measure": ["worst_plus_gap"], "label": ["worst+gap"],
    ...          "n_cells": [3], "n_scenarios": [3], "n_seeds": [1], "spearman_mean": [0.5],
    ...          "spearman_low": [0.2], "spearman_high": [0.8], "vs_average_wins": [2],
    ...          "vs_average_losses": [1], "vs_average_n": [3], "vs_average_p": [0.75]}
    >>> print(leaderboard_sentence(board))  # doctest: +NORMALIZE_WHITESPACE
    Over 3 cells (3 scenarios x 1 seed), worst+gap tracks the ideal measure best (mean
    Spearman's rho 0.500 [0.200, 0.800]); against average, worst+gap is ahead in 2 cells and
    behind in 1 (Wilcoxon signed-rank p = 0.75, n = 3): with 3 differing cells no test can
    reach p < 0.05 (the smallest p is 0.25), so this is no clear lead; add scenarios or seeds.
    """
    rank = np.asarray(board["rank"])
    if rank.size == 0 or not np.isfinite(np.asarray(board["spearman_mean"], float)[0]):
        return "No measure has a defined correlation with the ideal measure in any cell."
    groups = _leader_groups(board, rank)
    leaders = [" / ".join(g) for g in groups]
    named = [
        n + (" (the same ranks in every cell)" if len(g) > 1 else "")
        for n, g in zip(leaders, groups, strict=True)
    ]
    k = 0
    cells, scen, seeds = (int(board[c][k]) for c in ("n_cells", "n_scenarios", "n_seeds"))
    head = (
        f"Over {cells} cell{'s' if cells != 1 else ''} ({scen} scenario"
        f"{'s' if scen != 1 else ''} x {seeds} seed{'s' if seeds != 1 else ''}), "
        f"{' and '.join(named)} {'track' if len(leaders) > 1 else 'tracks'} the ideal measure "
        f"best (mean Spearman's rho {_interval(board, 'spearman', k)})"
    )
    ref = "average" if board["measure"][k] == "worst_plus_gap" else "worst_plus_gap"
    if f"vs_{ref}_n" not in board:
        return head + "."
    wins, losses, n = (int(board[f"vs_{ref}_{c}"][k]) for c in ("wins", "losses", "n"))
    p = float(board[f"vs_{ref}_p"][k])
    duel = f"against {measure_label(ref)}, {leaders[0]} is ahead in {wins} cell"
    duel += f"{'s' if wins != 1 else ''} "
    duel += f"and behind in {losses}"
    if n == 0:
        return f"{head}; {duel}: no cell tells them apart."
    duel += f" (Wilcoxon signed-rank p = {p:.2g}, n = {n})"
    if smallest_wilcoxon_p(n) >= alpha:
        verdict = (
            f"with {n} differing cell{'s' if n != 1 else ''} no test can reach p < {alpha:g} "
            f"(the smallest p is {smallest_wilcoxon_p(n):.2g}), so this is no clear lead; add "
            "scenarios or seeds"
        )
    elif p < alpha and wins > losses:
        verdict = f"a clear lead at the {alpha:g} level"
    else:
        verdict = f"not a clear lead at the {alpha:g} level"
    return f"{head}; {duel}: {verdict}."


def _leader_groups(board: Mapping[str, Any], rank: np.ndarray) -> list[list[str]]:
    """The labels of the rank-1 rows, rank-identical measures (``same_ranks``) in one group."""
    same = board.get("same_ranks", [""] * len(rank))
    label = dict(zip(board["measure"], board["label"], strict=True))
    shown: dict[frozenset[str], list[str]] = {}
    for measure, alike, r in zip(board["measure"], same, rank, strict=True):
        if r == rank[0]:
            key = frozenset([str(measure), *filter(None, str(alike or "").split(","))])
            shown.setdefault(key, []).append(str(label[measure]))
    return list(shown.values())


def _interval(board: Mapping[str, Any], stat: str, k: int) -> str:
    mean, low, high = (float(board[f"{stat}_{c}"][k]) for c in ("mean", "low", "high"))
    return f"{mean:.3f}" if np.isnan(low) else f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def measure_rankings(units: Mapping[str, Any], measures: Sequence[str]) -> Columns:
    """Each measure's ranking of the algorithms per (scenario, seed), where no ideal exists.

    rank = `algorithm_ranks` of the measure's scores within the cell (1 = lowest, ties share
    the smaller rank); ``choice`` is True for the rank-1 algorithms.

    Returns
    -------
    Columns: scenario, seed, algorithm, measure, score, rank, choice; one row per unit and
    measure, units in the given order

    >>> r = measure_rankings({"scenario": ["s", "s"], "seed": [0, 0], "algorithm": ["A", "B"],
    ...                       "average": [0.2, 0.1]}, ["average"])
    >>> r["algorithm"].tolist(), r["rank"].tolist()
    (['A', 'B'], [2, 1])
    """
    cols = {k: column_array(units, k) for k in (*UNIT_KEYS, *measures)}
    for measure in measures:
        if not np.isfinite(cols[measure].astype(np.float64)).all():
            raise OodevalError(f"measure {measure} has an undefined score; leave that unit out")
    records = []
    for measure in dict.fromkeys(measures):
        scores = cols[measure].astype(np.float64)
        ranks = algorithm_ranks(scores, by=[cols["scenario"], cols["seed"]])
        for i in range(len(scores)):
            records.append(
                {
                    **{k: python_value(cols[k][i]) for k in UNIT_KEYS},
                    "measure": measure,
                    "score": float(scores[i]),
                    "rank": int(ranks[i]),
                    "choice": bool(ranks[i] == 1),
                }
            )
    order = sorted(range(len(records)), key=lambda i: (i % len(scores), i // len(scores)))
    columns = [*UNIT_KEYS, "measure", "score", "rank", "choice"]
    return records_to_columns([records[i] for i in order], columns)
