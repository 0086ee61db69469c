"""Score long-form results: every measure per algorithm and seed, and, when the results have
`all` rows, the ideal measure, correlations with it, each measure's choice and its degradation.

`score` is the public entry point (`oodeval.score`): it takes a DataFrame, a file or a list of row
dicts and returns `Scores`, whose attributes are pandas DataFrames; `Scores.to_dict()` gives
JSON-ready records (NaN -> None). `score_results` does the work on already validated
`LongResults`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodeval._text import safe_text
from oodeval.errors import OodevalError, option
from oodeval.limits import check_flag, check_resamples, check_seed
from oodeval.measures.meta import (
    CONFIDENCE,
    TIE_DECIMALS,
    Columns,
    algorithm_ranks,
    answer_line,
    choices,
    correlation_summary,
    degradation_summary,
    dense_unit_measures,
    environment_warning,
    ideal_correlations,
    interval_warning,
    tie_text,
)
from oodeval.measures.registry import (
    MEASURES,
    check_measures,
    get_measure,
    undefined_measures,
)
from oodeval.report.notebook import Displayed, HtmlParts
from oodeval.results.longform import LongResults, read_results, results_from_frame
from oodeval.tables import Table, frame_records, heading, render_frame

__all__ = ["Scores", "score", "score_results"]


#: The retired names of `Scores`' tables -> (their name now, the warning's class, its text).
RETIRED: dict[str, tuple[str, type[Warning], str]] = {
    "selection": (
        "choice",
        DeprecationWarning,
        "Scores.selection is deprecated, use Scores.choice (the algorithm each measure chooses)",
    ),
    "selections": (
        "choices",
        FutureWarning,
        "warning: Scores.selections is deprecated, use Scores.choices (the algorithm each "
        "measure chooses); Scores.selections goes in the next release",
    ),
}


@dataclass(repr=False)
class Scores(Displayed):
    """The meta-evaluation of a set of results: every table `oodeval measures` prints.

    Returned by `oodeval.score`. Measures are errors (lower is better), as fractions in [0, 1].
    The seed column appears only when the results have seeds.

    Attributes
    ----------
    measures : pandas.DataFrame
        One row per (seed,) algorithm; a column per measure, plus ``ideal`` when the results
        have ``all`` rows.
    correlations : pandas.DataFrame or None
        (seed, measure, spearman, kendall[, bootstrap bounds]) with the ideal measure; None
        without ``all`` rows or with a single algorithm. `correlation` is the same, never None.
    correlation_summary : pandas.DataFrame or None
        (measure, n_seeds, spearman_mean, spearman_std, kendall_mean, kendall_std) over seeds,
        std with ddof=1; None unless correlations exist and there are several seeds.
    choices : pandas.DataFrame
        (seed, measure, selected, tied, score[, ideal_of_selected, degradation]): the algorithm
        each measure chooses; also available as `choice` (`selections` and `selection` are its
        deprecated names).
    degradation_summary : pandas.DataFrame or None
        (measure, n_seeds, degradation_mean, degradation_std); None unless the ideal measure
        exists and there are several seeds.
    notes : list of str
        Remarks on the input and on skipped or undefined parts.
    info : dict
        Counts and environment names.

    Examples
    --------
    >>> rows = [{"algorithm": a, "environment": e, "split": "loo", "error": err}
    ...         for a, errs in {"ERM": (0.1, 0.2, 0.6), "IRM": (0.3, 0.3, 0.4)}.items()
    ...         for e, err in zip(("e1", "e2", "e3"), errs)]
    >>> s = score(rows, measures=["average", "worst_plus_gap"])
    >>> s.answer
    'worst+gap picks IRM; average picks ERM (they disagree)'
    >>> s.rankings
      algorithm  average  worst_plus_gap
    0       ERM        1               2
    1       IRM        2               1
    """

    measures: pd.DataFrame
    correlations: pd.DataFrame | None
    correlation_summary: pd.DataFrame | None
    choices: pd.DataFrame
    degradation_summary: pd.DataFrame | None
    notes: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def rankings(self) -> pd.DataFrame:
        """Each algorithm's rank under each measure, per seed: 1 = lowest error; tied algorithms
        share the better rank (values compared after rounding to 12 decimals)."""
        keys = [c for c in ("seed", "algorithm") if c in self.measures.columns]
        values = [c for c in self.measures.columns if c not in keys]
        ranked = self.measures[keys].copy()
        by = [self.measures["seed"]] if "seed" in keys else []
        for c in values:
            ranks = algorithm_ranks(self.measures[c].astype(float), by)
            ranked[c] = pd.Series(ranks, index=ranked.index).astype("Int64")
        return ranked

    @property
    def correlation(self) -> pd.DataFrame:
        """Spearman's rho and Kendall's tau-b of each measure with the ideal measure, per seed;
        an empty frame (same columns) when there is no ideal measure or a single algorithm."""
        if self.correlations is not None:
            return self.correlations
        columns = ["seed"] * bool(self.info.get("seeds")) + ["measure", "spearman", "kendall"]
        return pd.DataFrame(columns=columns)

    @property
    def choice(self) -> pd.DataFrame:
        """The algorithm each measure chooses (argmin, ties to the first name in sorted order),
        per seed; the ``tied`` column names every algorithm tied at the minimum."""
        return self.choices

    @property
    def selections(self) -> pd.DataFrame:
        """Deprecated name of `choices`, the table of the algorithm each measure chooses (a
        `FutureWarning`); kept for one release. *Selection* now means checkpoint selection
        only."""
        return self._retired("selections")

    @property
    def selection(self) -> pd.DataFrame:
        """Deprecated name of `choice` (a `DeprecationWarning`); kept for one release.
        *Selection* now means checkpoint selection only."""
        return self._retired("selection")

    def _retired(self, old: str) -> pd.DataFrame:
        """The attribute `old` is now, after the warning `RETIRED` gives for it."""
        new, category, message = RETIRED[old]
        warnings.warn(message, category, stacklevel=3)
        return getattr(self, new)

    @property
    def degradation(self) -> pd.DataFrame:
        """Per seed and measure, how much worse (on the ideal measure) the measure's pick is
        than the ideal measure's: |R_IDEAL(A*_IDEAL) - R_IDEAL(A*_measure)|; empty without the
        ideal measure (``all`` rows)."""
        keys = ["seed"] * bool(self.info.get("seeds")) + ["measure", "selected"]
        columns = [*keys, "ideal_of_selected", "degradation"]
        if "degradation" not in self.choices.columns:
            return pd.DataFrame(columns=columns)
        frame = self.choices[columns]
        return frame[frame["measure"] != "ideal"].reset_index(drop=True)

    @property
    def answer(self) -> str:
        """The one-line answer (`oodeval.measures.meta.answer_line`): which algorithm
        worst+gap and average pick (or the measures scored, without them), whether they
        disagree and, with the ideal measure, which picks its choice; over several seeds, by
        each measure's mean over the seeds."""
        return answer_line(self.measures)

    def sections(self) -> list[tuple[str, str, pd.DataFrame]]:
        """(key, title, table) for every non-empty table, in print order."""
        correlation_title = "Rank correlation with the ideal measure (Spearman rho; Kendall tau-b)"
        if self.correlations is not None and "spearman_low" in self.correlations.columns:
            correlation_title += "; percentile bootstrap intervals resampling algorithms"
        choice_title = "Selected algorithm per measure (argmin; ties -> first name in sorted order)"
        if "degradation" in self.choices.columns:
            choice_title += "; degradation = |R_IDEAL(A*_IDEAL) - R_IDEAL(A*_measure)|"
        tables = [
            ("measures", "Measures per algorithm (lower is better)", self.measures),
            ("correlations", correlation_title, self.correlations),
            (
                "correlation_summary",
                "Correlation with the ideal measure over seeds (mean, std with ddof=1)",
                self.correlation_summary,
            ),
            ("selections", choice_title, self.choices),
            (
                "degradation_summary",
                "Selection degradation over seeds (mean, std with ddof=1)",
                self.degradation_summary,
            ),
        ]
        return [(key, title, table) for key, title, table in tables if table is not None]

    def header(self, source: str = "results") -> str:
        """The line under the answer: what `source` holds (algorithms, seeds, environments).

        >>> rows = [{"algorithm": a, "environment": e, "split": "loo", "error": 0.1}
        ...         for a in ("ERM", "IRM") for e in ("e1", "e2", "e3")]
        >>> score(rows).header("sweep.csv")
        'sweep.csv: 2 algorithms, N=3 given environments (loo); errors as fractions'
        """
        info = self.info
        n_seeds, n_algs = len(info["seeds"]), len(info["algorithms"])
        seeds = f", {n_seeds} seed{'s' if n_seeds != 1 else ''}" if n_seeds else ""
        text = (
            f"{source}: {n_algs} algorithm{'s' if n_algs != 1 else ''}{seeds}, "
            f"N={info['n_given']} given environments (loo)"
        )
        if info["n_all"]:
            text += f", {info['n_all']} environments in E_all (all)"
        return text + "; errors as fractions"

    def warning_lines(self) -> list[str]:
        """The warnings `oodeval measures` prints after the tables: picks over too few given
        environments (`environment_warning`) and correlations over too few algorithms
        (`interval_warning`); empty when neither applies."""
        found = [environment_warning(self.info["n_given"])]
        if self.correlations is not None:
            found.append(interval_warning(len(self.info["algorithms"])))
        return [w for w in found if w]

    def render(self, fmt: str = "table", source: str = "results") -> str:
        """What ``oodeval measures --format table|markdown`` prints: the answer, the `header`
        line, then every table of `sections` under its title (floats with 4 decimals).

        >>> rows = [{"algorithm": a, "environment": e, "split": "loo", "error": err}
        ...         for a, errs in {"ERM": (0.1, 0.2, 0.6), "IRM": (0.3, 0.3, 0.4)}.items()
        ...         for e, err in zip(("e1", "e2", "e3"), errs)]
        >>> print(score(rows, measures=["average"]).render().splitlines()[0])
        average picks ERM
        """
        if fmt not in ("table", "markdown"):
            raise OodevalError(f"fmt is {fmt!r}; Scores.render writes table or markdown")
        parts = [safe_text(self.answer)]
        if fmt == "markdown":
            parts.append(safe_text(f"_{self.header(source)}_"))
            for _, title, df in self.sections():
                table = render_frame(df, "markdown", compact_rule=True)
                parts.append(f"{heading(title, 'markdown')}\n\n{table}")
        else:
            parts.append(safe_text(self.header(source)))
            for _, title, df in self.sections():
                parts.append(f"{safe_text(title)}\n{render_frame(df, 'table')}")
        return "\n\n".join(parts) + "\n"

    def __repr__(self) -> str:
        """Two lines: the answer, and what the results hold with the names of the tables."""
        # the attributes' names: `sections` keys the choices "selections", as the JSON does
        names = [{"selections": "choices"}.get(key, key) for key, _, _ in self.sections()]
        tables = ", ".join(names)
        first = safe_text(f"<Scores: {self.answer}>")
        return f"{first}\n{safe_text(self.header())}; tables: {tables} (print() shows them)"

    def html_parts(self) -> HtmlParts:
        """The answer, then every table of `render`, with the header line and the notes and
        warnings (a notebook's display, `Displayed`)."""
        tables = [Table(title, df, digits=4) for _, title, df in self.sections()]
        notes = [*self.notes, *(f"Warning: {w}" for w in self.warning_lines())]
        return HtmlParts(self.answer, tables, [self.header()], notes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: info, one list of records per table, notes; NaN becomes None."""
        out: dict[str, Any] = {"info": self.info}
        for key, _, table in self.sections():
            out[key] = frame_records(table)
        out["notes"] = list(self.notes)
        return out


def score(
    results: pd.DataFrame | str | Path | Sequence[Mapping[str, Any]],
    *,
    measures: Sequence[str] | None = None,
    percent: bool = False,
    bootstrap: int = 0,
    seed: int = 0,
) -> Scores:
    """Score algorithms evaluated under distribution shift: every measure, and how well each
    tracks the ideal measure.

    The results are in long form, one row per (algorithm, seed, split, environment): columns
    ``algorithm``, ``environment``, ``error`` (or ``accuracy``), ``split`` (``loo``: the model
    trained without that environment, tested on it; ``all``: the model trained on all given
    environments, tested on an environment of E_all, which defines the ideal measure) and an
    optional ``seed`` (see `oodeval.results.longform`).

    Parameters
    ----------
    results : pandas.DataFrame, str, Path or list of dict
        A long-form DataFrame; a path to a CSV, JSON lines or JSON list file; or the rows as
        dicts (e.g. ``oodeval.read_domainbed(...).to_dict("records")``).
    measures : sequence of str, optional
        Names from `oodeval.measures.MEASURES` (default: all).
    percent : bool, default False
        Values are percentages in [0, 100].
    bootstrap : int, default 0
        When > 0, add percentile bootstrap intervals (this many resamples of the algorithms,
        95% level) to the correlations with the ideal measure; at most
        `oodeval.limits.MAX_RESAMPLES`, as ``oodeval measures --bootstrap``.
    seed : int, default 0
        Seed of the bootstrap resampling (same seed, same intervals), in [0, 2**32) as
        ``--seed`` (`oodeval.limits.SEED_LIMIT`). A refusal names these keywords
        (``percent=True``), where the command line names its flags.

    Returns
    -------
    Scores
        DataFrames ``measures``, ``rankings``, ``correlation``, ``choice``,
        ``degradation`` and the one-line ``answer``.

    Raises
    ------
    OodevalError
        Bad input, with a one-line message that names the problem and the fix.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({
    ...     "algorithm": ["ERM"] * 3 + ["IRM"] * 3,
    ...     "environment": ["e1", "e2", "e3"] * 2,
    ...     "split": "loo",
    ...     "accuracy": [0.9, 0.8, 0.4, 0.7, 0.7, 0.6],
    ... })
    >>> s = score(df)
    >>> s.measures[["algorithm", "average", "worst_plus_gap"]].round(3)
      algorithm  average  worst_plus_gap
    0       ERM    0.300             1.1
    1       IRM    0.333             0.5
    >>> s.answer
    'worst+gap picks IRM; average picks ERM (they disagree)'
    """
    check_flag(percent, "percent")
    check_resamples(bootstrap, "bootstrap")  # the bounds and messages of `oodeval measures`
    check_seed(seed, "seed")
    if isinstance(results, pd.DataFrame):
        long = results_from_frame(results, percent=percent, name="the DataFrame")
    elif isinstance(results, (str, Path)):
        long = read_results(results, percent=percent)
    elif isinstance(results, Sequence) and not isinstance(results, (bytes, bytearray)):
        bad = next((k for k, row in enumerate(results) if not isinstance(row, Mapping)), None)
        if bad is not None:
            raise OodevalError(
                f"results row {bad + 1} is a {type(results[bad]).__name__}, not a dict; give "
                "one dict per row with keys algorithm, environment, error|accuracy, split[, seed]"
            )
        if not results:
            raise OodevalError(
                "results is an empty list; give one dict per row with keys algorithm, "
                "environment, error|accuracy, split[, seed]"
            )
        long = results_from_frame(pd.DataFrame.from_records(results), percent=percent, name="rows")
    else:
        raise OodevalError(
            f"results is a {type(results).__name__}; give a pandas DataFrame in long form, a "
            "path to a CSV or JSON lines file, or a list of row dicts"
        )
    if isinstance(measures, str):
        measures = [m.strip() for m in measures.split(",") if m.strip()]
    return score_results(long, measures=measures, bootstrap=bootstrap, bootstrap_seed=seed)


def score_results(
    results: LongResults,
    *,
    measures: Sequence[str] | None = None,
    bootstrap: int = 0,
    confidence: float = CONFIDENCE,
    bootstrap_seed: int = 0,
) -> Scores:
    """Compute every table of `oodeval measures` from validated results.

    All numbers come from `oodeval.measures.meta` (the layer `oodeval study analyze`
    uses too): `unit_measures`, `ideal_correlations`, `correlation_summary`, `choices` and
    `degradation_summary`; this function picks their columns and words the notes.

    Parameters
    ----------
    results : LongResults from `oodeval.results.longform.read_results`
    measures : names from `oodeval.measures.MEASURES` (default: all)
    bootstrap : int
        When > 0, add percentile bootstrap intervals (resampling algorithms, this many
        resamples; see `oodeval.measures.meta.bootstrap_correlation_ci`) to the correlations:
        columns spearman_low, spearman_high, kendall_low, kendall_high, n_valid.
    confidence, bootstrap_seed : interval level and resampling seed for `bootstrap`; every
        measure uses the same resamples of algorithms, so their intervals are comparable

    Returns
    -------
    Scores
    """
    names = _measure_names(results, measures)
    units = _unit_measures(results, names)
    units["seed"] = np.asarray(results.seeds, dtype=object)[units["seed"]]
    units["algorithm"] = np.asarray(results.algorithms, dtype=object)[units["algorithm"]]
    has_ideal = "ideal" in units
    measures_df = pd.DataFrame(units)[["seed", "algorithm", *names, *(["ideal"] * has_ideal)]]
    notes: list[str] = list(results.notes)
    correlations = correlation_table = None
    if has_ideal and len(results.algorithms) < 2:
        notes.append(
            f"correlations with the ideal measure need >= 2 algorithms, got 1 "
            f"({results.algorithms[0]}); they are skipped"
        )
    elif has_ideal:
        correlations, correlation_table = _correlations(
            results, units, names, notes, bootstrap, confidence, bootstrap_seed
        )
    elif bootstrap > 0:
        notes.append(
            "bootstrap intervals are for the correlations with the ideal measure, which need "
            "split 'all' rows (a model trained on every environment); these results have only "
            "'loo' rows, so no interval is computed"
        )
    selectors = names + ["ideal"] * has_ideal
    selected, degradation = _choice_table(results, units, selectors, notes)
    if not results.has_seed:
        measures_df = measures_df.drop(columns="seed")
        selected = selected.drop(columns="seed")
        if correlations is not None:
            correlations = correlations.drop(columns="seed")
    return Scores(
        measures=measures_df,
        correlations=correlations,
        correlation_summary=correlation_table,
        choices=selected,
        degradation_summary=degradation,
        notes=notes,
        info=_info(results),
    )


def _unit_measures(results: LongResults, names: Sequence[str]) -> Columns:
    """`unit_measures` of ``results.errors_table()``: `dense_unit_measures` of the error arrays.

    The units are (seed, algorithm) in the table's order, each with the same environments, so
    ``loo.reshape(units, N)`` is the matrix `unit_measures` would assemble row by row and the
    measures see the same numbers; the long table (8 copies of every error's labels) is never
    built, which keeps ``oodeval measures`` on a big file within a few times the file's size.
    """
    n_seeds, n_algorithms, _ = results.loo.shape
    units = n_seeds * n_algorithms
    seed, algorithm = (i.ravel() for i in np.indices((n_seeds, n_algorithms)))
    out: Columns = {"scenario": np.full(units, "", object), "seed": seed, "algorithm": algorithm}
    out["n_given"] = np.full(units, results.loo.shape[2], dtype=np.int64)
    out.update(dense_unit_measures(results.loo.reshape(units, -1), names))
    if results.full is not None:
        out.update(dense_unit_measures(results.full.reshape(units, -1), split="all"))
    return out


def _measure_names(results: LongResults, measures: Sequence[str] | None) -> list[str]:
    names = check_measures(measures)
    n_given = len(results.given_environments)
    undefined = undefined_measures(names, n_given)
    if undefined:
        cheap = [n for n in names if n not in undefined] or [
            n for n in MEASURES if not undefined_measures([n], n_given)
        ]
        others = [n for n in undefined if n not in ("worst_plus_gap", "gap_only")]
        if others:  # not Eq. 6's 1/(N-2): say which measures and what each needs
            needs = ", ".join(f"{n} needs >= {get_measure(n).min_envs}" for n in others)
            raise OodevalError(
                f"{needs} given environments and there are N={n_given}: add loo rows or pass "
                f"{option('measures', cheap)}"
            )
        raise OodevalError(
            f"worst+gap (Eq. 6) is undefined for N={n_given} given environments (1/(N-2)); it "
            f"needs >= 3 environments: add loo rows or pass {option('measures', cheap)}"
        )
    return names


def _seed_text(results: LongResults, seed: str) -> str:
    return f" for seed {seed}" if results.has_seed else ""


def _correlations(
    results: LongResults,
    units: Columns,
    names: list[str],
    notes: list[str],
    bootstrap: int,
    confidence: float,
    bootstrap_seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Per-seed correlations with the ideal, their summary over seeds (None for one seed), and a
    note for every undefined correlation."""
    table = ideal_correlations(
        units, names, bootstrap=bootstrap, confidence=confidence, bootstrap_seed=bootstrap_seed
    )
    for seed, measure, rho in zip(table["seed"], table["measure"], table["spearman"], strict=True):
        if math.isnan(rho):
            ideal = units["ideal"][units["seed"] == seed]
            const = "the ideal measure" if np.ptp(np.round(ideal, TIE_DECIMALS)) == 0 else measure
            notes.append(
                f"correlation of {measure} with the ideal is undefined"
                + _seed_text(results, seed)
                + f": {const} is the same for every algorithm"
            )
    columns = ["seed", "measure", "spearman", "kendall"]
    if bootstrap > 0:
        columns += ["spearman_low", "spearman_high", "kendall_low", "kendall_high", "n_valid"]
    summary = None
    if len(results.seeds) > 1:
        summary = pd.DataFrame(correlation_summary(table)).drop(
            columns=["scenario", "n_algorithms"]
        )
    return pd.DataFrame(table)[columns], summary


def _choice_table(
    results: LongResults, units: Columns, selectors: list[str], notes: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The choice per seed and measure, the degradation over seeds (None without the ideal
    or with one seed), and a note for every tie."""
    table = choices(units, selectors)
    for seed, measure, name, tied in zip(
        table["seed"], table["measure"], table["selected"], table["tied"], strict=True
    ):
        if len(tied) > 1:
            notes.append(
                f"{measure} ties between {', '.join(tied)}"
                + _seed_text(results, seed)
                + f"; selected {name} (first in sorted order)"
            )
    frame = pd.DataFrame(table)
    frame["tied"] = [tie_text(t) if len(t) > 1 else "" for t in table["tied"]]
    columns = ["seed", "measure", "selected", "tied", "score"]
    summary = None
    if "degradation" in table:
        columns += ["ideal_of_selected", "degradation"]
        if len(results.seeds) > 1:
            summary = pd.DataFrame(degradation_summary(table)).drop(columns="scenario")
    return frame[columns], summary


def _info(results: LongResults) -> dict[str, Any]:
    return {
        "algorithms": list(results.algorithms),
        "seeds": list(results.seeds) if results.has_seed else [],
        "given_environments": list(results.given_environments),
        "all_environments": list(results.all_environments),
        "n_given": len(results.given_environments),
        "n_all": len(results.all_environments),
        "value_column": results.value_column,
        "units": "error fractions in [0, 1]",
        "kendall_variant": "tau-b (as scipy.stats.kendalltau, variant b)",
        "std_ddof": 1,
    }
