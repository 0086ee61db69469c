"""Read users' long-form results (CSV or JSON lines) into validated per-seed error arrays.

One row per (algorithm, seed, split, environment):

=============  ==========================================================================
column         meaning
=============  ==========================================================================
algorithm      name of the DG algorithm
environment    name of the test environment
error          test error as a fraction in [0, 1] (or ``accuracy`` instead; with
               ``percent=True`` either may be given in [0, 100])
split          ``loo``: model trained without that given environment, tested on it;
               ``all``: model trained on all given environments, tested on an environment
               of E_all (used by the ideal measure, Eq. 4 of the worst+gap paper)
seed           optional; any label (integers are sorted numerically)
=============  ==========================================================================

Other columns are ignored. JSON lines files hold one object per line with the same fields.
Every problem is reported as one OodevalError line naming the file line and the fix; the file is
only ever parsed as text (never executed or unpickled).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from oodeval._text import read_text
from oodeval.errors import OodevalError, listing

__all__ = ["SPLITS", "LongResults", "read_results", "results_from_frame"]

SPLITS = ("loo", "all")
_KEYS = ("algorithm", "seed", "split", "environment")
_JSON_SUFFIXES = {".jsonl", ".ndjson", ".json"}
#: A seed written as an integer (read exactly, any length up to Python's int-parsing limit).
_INTEGER = re.compile(r"[+-]?[0-9]{1,4000}")


@dataclass(frozen=True)
class LongResults:
    """Validated results: LOO errors and (optionally) all-environment errors as dense arrays.

    Attributes
    ----------
    algorithms : tuple of str, in order of first appearance
    seeds : tuple of str, sorted (numerically when every seed is an integer); ``("",)`` when the
        file has no seed column
    has_seed : bool, whether the file had a seed column
    given_environments : tuple of str (the N environments of the loo rows)
    all_environments : tuple of str (E_all of the all rows; empty when there are none)
    loo : ndarray of shape (n_seeds, n_algorithms, N), error fractions
    full : ndarray of shape (n_seeds, n_algorithms, len(all_environments)) or None
    value_column : "error" or "accuracy", as found in the file
    notes : tuple of str, remarks on the input for the user (e.g. an algorithm whose values look
        like fractions in a file read as percentages)
    """

    algorithms: tuple[str, ...]
    seeds: tuple[str, ...]
    has_seed: bool
    given_environments: tuple[str, ...]
    all_environments: tuple[str, ...]
    loo: np.ndarray
    full: np.ndarray | None
    value_column: str
    notes: tuple[str, ...] = ()

    def errors_table(self) -> dict[str, np.ndarray]:
        """The errors as the long-form table of `oodeval.measures.meta`, labels coded.

        Columns seed, algorithm, split, environment, error; seed, algorithm and environment hold
        integer positions in `seeds`, `algorithms` and the split's environments (integer labels
        group fastest). Rows seed by seed, algorithm by algorithm, the loo rows (given
        environments in order) before the all rows.
        """
        parts = [("loo", self.loo)]
        if self.full is not None:
            parts.append(("all", self.full))
        columns: dict[str, list[np.ndarray]] = {
            k: [] for k in ("seed", "algorithm", "split", "environment", "error")
        }
        for split, cube in parts:
            s, a, e = (i.ravel() for i in np.indices(cube.shape))
            columns["seed"].append(s)
            columns["algorithm"].append(a)
            columns["split"].append(np.full(cube.size, split))
            columns["environment"].append(e)
            columns["error"].append(cube.ravel())
        return {k: np.concatenate(v) for k, v in columns.items()}


def _read_json_lines(text: str, name: str) -> pd.DataFrame:
    records: list[dict[str, str]] = []
    lines: list[int] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise OodevalError(
                f"{name} line {lineno} is not valid JSON ({exc.msg}); each line must be one "
                'JSON object such as {"algorithm": "ERM", "environment": "e1", '
                '"error": 0.2, "split": "loo"}'
            ) from None
        if not isinstance(obj, dict):
            raise OodevalError(
                f"{name} line {lineno} is a JSON {type(obj).__name__}, not an object; write one "
                "object with fields algorithm, environment, error|accuracy, split[, seed] per line"
            )
        records.append({str(k).strip().lower(): _json_cell(v) for k, v in obj.items()})
        lines.append(lineno)
    if not records:
        raise OodevalError(
            f"{name} is empty; expected JSON lines with fields algorithm, environment, "
            "error|accuracy, split[, seed]"
        )
    frame = _without_line_column(pd.DataFrame.from_records(records).fillna(""))
    frame.insert(0, "_line", lines)
    return frame


def _read_json_records(text: str, name: str) -> pd.DataFrame:
    """A JSON list of row objects (what ``--format json`` prints for a results table)."""
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OodevalError(
            f"{name} is not valid JSON ({exc.msg} at line {exc.lineno}); write a list of "
            "objects with fields algorithm, environment, error|accuracy, split[, seed]"
        ) from None
    if not isinstance(rows, list) or not rows:
        raise OodevalError(
            f"{name} holds no rows; write a non-empty JSON list of objects with fields "
            "algorithm, environment, error|accuracy, split[, seed]"
        )
    for k, obj in enumerate(rows, start=1):
        if not isinstance(obj, dict):
            raise OodevalError(
                f"{name} row {k} is a JSON {type(obj).__name__}, not an object; each row needs "
                "fields algorithm, environment, error|accuracy, split[, seed]"
            )
    records = [{str(k).strip().lower(): _json_cell(v) for k, v in obj.items()} for obj in rows]
    # messages then name rows, not lines
    return _without_line_column(pd.DataFrame.from_records(records).fillna(""))


def _without_line_column(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` without a user's own ``_line`` column: an ignored extra column to the user, but
    the name under which the readers keep each row's file line.

    >>> list(_without_line_column(pd.DataFrame({"_line": ["x"], "error": ["0.1"]})).columns)
    ['error']
    """
    return frame.drop(columns=[c for c in frame.columns if c == "_line"])


def _json_cell(v: object) -> str:
    """Render a JSON value as the text a CSV cell would hold (numbers keep full precision)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()  # stays non-numeric, so it is reported rather than read as 0/1
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def _read_csv(text: str, name: str) -> pd.DataFrame:
    if not text.strip():
        raise OodevalError(
            f"{name} is empty; expected a CSV header with columns algorithm, environment, "
            "error|accuracy, split[, seed]"
        )
    try:
        reader = csv.reader(io.StringIO(text))
        header = [c.strip().lower() for c in next(reader)]
        repeated = sorted({c for c in header if header.count(c) > 1})
        if repeated:  # pandas would rename the second one ("error.1") and read only the first
            raise OodevalError(
                f"{name}: column {repeated[0]!r} appears more than once in the header; keep one"
            )
        width = len(header)
        for row in reader:
            if len(row) > width:
                raise OodevalError(
                    f"{name} is not a readable CSV (line {reader.line_num} has {len(row)} fields, "
                    f"the header {width}); every row needs the header's columns"
                )
        frame = pd.read_csv(
            io.StringIO(text),
            dtype=str,
            keep_default_na=False,
            skipinitialspace=True,
            index_col=False,
        )
    except (pd.errors.ParserError, csv.Error) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OodevalError(
            f"{name} is not a readable CSV ({first}); every row needs the header's columns"
        ) from None
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    frame = _without_line_column(frame)
    frame.insert(0, "_line", np.arange(len(frame)) + 2)  # line 1 is the header
    return frame


def read_results(path: str | Path, *, percent: bool = False) -> LongResults:
    """Read a long-form results CSV or JSON lines file (format sniffed) and validate it.

    Parameters
    ----------
    path : str or Path
        A file whose first character is ``[`` is read as a JSON list of row objects (what
        ``--format json`` prints, e.g. ``oodeval import domainbed -f json``); ``.jsonl``,
        ``.ndjson`` and ``.json`` files, and files whose first character is ``{``, as JSON lines;
        anything else as CSV.
    percent : bool
        Values are percentages in [0, 100] (divided by 100).

    Returns
    -------
    LongResults
    """
    path = Path(path)
    name = path.name
    text = read_text(path, what="results file", save_as="a UTF-8 CSV or JSON lines file")
    if text.lstrip().startswith("["):
        frame = _read_json_records(text, name)
    elif path.suffix.lower() in _JSON_SUFFIXES or text.lstrip().startswith("{"):
        frame = _read_json_lines(text, name)
    else:
        frame = _read_csv(text, name)
    return results_from_frame(frame, percent=percent, name=name)


def _seed_labels(raw: pd.Series) -> pd.Series:
    """Normalise integer-like seeds ("1", "+1", "1.0", "1e3") to "1", "1", "1", "1000" when every
    seed is one; keep other labels as written.

    Integers are read exactly, however long (never through a float or int64: seeds past 2**63
    would wrap, past 2**53 collide); a decimal is normalised only while exact (below 2**53).

    >>> _seed_labels(pd.Series(["1.0", "99999999999999999999", "-0"])).tolist()
    ['1', '99999999999999999999', '0']
    >>> _seed_labels(pd.Series(["1", "a"])).tolist()
    ['1', 'a']
    """
    normal: dict[str, str] = {}
    for label in pd.unique(raw):
        text = str(label)
        if _INTEGER.fullmatch(text):
            normal[label] = str(int(text))
            continue
        try:
            value = float(text) if "_" not in text else math.nan
        except ValueError:
            return raw
        if not (math.isfinite(value) and value.is_integer() and abs(value) < 2**53):
            return raw
        normal[label] = str(int(value))
    return raw.map(normal)


def _sorted_seeds(labels: list[str]) -> tuple[str, ...]:
    try:
        return tuple(sorted(labels, key=int))
    except ValueError:
        return tuple(sorted(labels))


def results_from_frame(
    frame: pd.DataFrame, *, percent: bool = False, name: str = "results"
) -> LongResults:
    """Validate a long-form DataFrame (string or numeric cells) and build the error arrays.

    `frame` may carry a ``_line`` column with the file line of each row (used in messages);
    otherwise rows are called "row 1", "row 2", ... Raises OodevalError, one line, on: missing
    columns, both error and accuracy columns, empty cells, non-numeric / NaN / infinite values,
    values outside [0, 1] (or [0, 100] with ``percent=True``), unknown splits, duplicate rows, no
    loo rows, and algorithms (or seeds) missing an environment that others have.
    """
    frame = frame.copy()
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    where = "line" if "_line" in frame.columns else "row"
    if "_line" not in frame.columns:
        frame.insert(0, "_line", np.arange(len(frame)) + 1)
    if len(frame) == 0:
        raise OodevalError(
            f"{name} has a header but no rows; add one row per algorithm, environment and split"
        )
    value_col = _value_column(frame, name)
    has_seed = "seed" in frame.columns
    if not has_seed:
        frame["seed"] = ""

    def at(k: int) -> str:
        return f"{name} {where} {int(frame['_line'].iloc[k])}"

    _clean_labels(frame, has_seed, at)
    values, notes = _parse_values(frame, value_col, percent=percent, at=at, name=name)
    frame["error"] = 1.0 - values if value_col == "accuracy" else values
    _check_duplicates(frame, has_seed, name, where)

    algorithms = tuple(dict.fromkeys(frame["algorithm"]))
    seeds = _sorted_seeds(list(dict.fromkeys(frame["seed"])))
    loo_rows = frame[frame["split"] == "loo"]
    all_rows = frame[frame["split"] == "all"]
    if loo_rows.empty:
        raise OodevalError(
            f"{name} has no loo rows; the measures need leave-one-environment-out errors "
            "(split=loo), one per algorithm and given environment"
        )
    given = tuple(dict.fromkeys(loo_rows["environment"]))
    loo = _dense(loo_rows, "loo", algorithms, seeds, given, has_seed, name)
    full = None
    all_envs: tuple[str, ...] = ()
    if not all_rows.empty:
        all_envs = tuple(dict.fromkeys(all_rows["environment"]))
        full = _dense(all_rows, "all", algorithms, seeds, all_envs, has_seed, name)
    return LongResults(
        algorithms=algorithms,
        seeds=seeds,
        has_seed=has_seed,
        given_environments=given,
        all_environments=all_envs,
        loo=loo,
        full=full,
        value_column=value_col,
        notes=tuple(notes),
    )


def _value_column(frame: pd.DataFrame, name: str) -> str:
    """``error`` or ``accuracy``, after checking the long form's columns are there."""
    has_error, has_acc = "error" in frame.columns, "accuracy" in frame.columns
    if has_error and has_acc:
        raise OodevalError(
            f"{name} has both an error and an accuracy column; keep exactly one of them"
        )
    missing = [c for c in ("algorithm", "environment", "split") if c not in frame.columns]
    if not (has_error or has_acc):
        missing.append("error (or accuracy)")
    if missing:
        found = listing(c for c in frame.columns if c != "_line") or "none"
        raise OodevalError(
            f"{name} is missing column(s) {', '.join(missing)} (found: {found}); the long form "
            "needs algorithm, environment, error|accuracy, split[, seed]"
        )
    return "accuracy" if has_acc else "error"


def _clean_labels(frame: pd.DataFrame, has_seed: bool, at: Callable[[int], str]) -> None:
    """Strip the label columns in place, lower-case the split and refuse empty or unknown ones."""
    text_cols = ["algorithm", "environment", "split"] + (["seed"] if has_seed else [])
    for col in text_cols:
        frame[col] = frame[col].astype(str).str.strip()
        empty = np.flatnonzero((frame[col] == "").to_numpy())
        if empty.size:
            raise OodevalError(
                f"{at(empty[0])}: {col} is empty or missing; fill it in or drop the row"
            )
    frame["split"] = frame["split"].str.lower()
    bad_split = np.flatnonzero(~frame["split"].isin(SPLITS).to_numpy())
    if bad_split.size:
        k = bad_split[0]
        raise OodevalError(
            f"{at(k)}: unknown split {frame['split'].iloc[k]!r}; split must be 'loo' (trained "
            "without that environment) or 'all' (trained on all given environments)"
        )
    if has_seed:
        frame["seed"] = _seed_labels(frame["seed"])


def _check_duplicates(frame: pd.DataFrame, has_seed: bool, name: str, where: str) -> None:
    dup = frame.duplicated(subset=list(_KEYS), keep=False).to_numpy()
    if dup.any():
        first = frame.loc[dup].iloc[0]
        same = frame.loc[dup & (frame[list(_KEYS)] == first[list(_KEYS)]).all(axis=1).to_numpy()]
        lines = " and ".join(str(int(v)) for v in same["_line"].iloc[:2])
        seed = f", seed {first['seed']}" if has_seed else ""
        raise OodevalError(
            f"{name} has duplicate rows for algorithm {first['algorithm']}{seed}, split "
            f"{first['split']}, environment {first['environment']} ({where}s {lines}); keep one "
            "row per algorithm, seed, split and environment"
        )


def _parse_values(
    frame: pd.DataFrame, col: str, *, percent: bool, at: Callable[[int], str], name: str
) -> tuple[np.ndarray, list[str]]:
    """Parse column `col` as floats; report the first unusable cell; return fractions and notes.

    With ``percent=True`` the scale is checked too (`_percent_scale`).
    """
    raw = frame[col].astype(str).str.strip()
    nums = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    for k in np.flatnonzero(~np.isfinite(nums))[:1]:
        v = nums[k]
        text = raw.iloc[k]
        ident = (
            f"(algorithm {frame['algorithm'].iloc[k]}, environment {frame['environment'].iloc[k]})"
        )
        if text == "":
            raise OodevalError(
                f"{at(k)}: {col} is empty or missing {ident}; fill it in or drop the row"
            )
        if text.lower() in {"nan", "na", "n/a", "null", "none"} or (
            math.isnan(v) and text.lower().lstrip("+-") == "nan"
        ):
            raise OodevalError(
                f"{at(k)}: {col} is NaN {ident}; a failed or missing run must be rerun or "
                "dropped for every algorithm"
            )
        if math.isinf(v):
            raise OodevalError(f"{at(k)}: {col} is infinite {ident}; fix the value")
        raise OodevalError(
            f"{at(k)}: {col} {text!r} is not a number {ident}; write a plain decimal such as 0.25"
        )
    scale = 100.0 if percent else 1.0
    low = np.flatnonzero(nums < 0)
    if low.size:
        k = low[0]
        raise OodevalError(f"{at(k)}: {col} {nums[k]:g} is negative; values must lie in [0, 1]")
    high = np.flatnonzero(nums > scale)
    if high.size:
        k = high[0]
        if percent:
            raise OodevalError(
                f"{at(k)}: {col} {nums[k]:g} > 100 is not a percentage; check the value"
            )
        raise OodevalError(
            f"{at(k)}: {col} {nums[k]:g} > 1 looks like percentages; pass --percent or divide "
            "by 100"
        )
    notes = _percent_scale(frame["algorithm"], nums, col, name) if percent else []
    return nums / scale, notes


def _percent_scale(algorithms: pd.Series, nums: np.ndarray, col: str, name: str) -> list[str]:
    """Check that values read with --percent are percentages; return a note on mixed scales.

    Every value <= 1 means the file holds fractions: read as percentages they would all be
    near-perfect, so the file is refused. An algorithm whose values are all <= 1 while another's
    exceed 1 was probably written as fractions among percentages; it would then "win", so the
    returned note names it (the values are still read as percentages).

    >>> algs = pd.Series(["A", "A", "B", "B"])
    >>> _percent_scale(algs, np.array([20.0, 30.0, 0.2, 0.3]), "error", "r.csv")[0][:55]
    '--percent: B has every error <= 1 while other algorithm'

    """
    if nums.size and float(nums.max()) <= 1.0:
        raise OodevalError(
            f"{name}: every {col} is <= 1, so these are fractions, not percentages; drop --percent"
        )
    top = pd.Series(nums).groupby(algorithms.to_numpy(), sort=False).max()
    low = [str(a) for a, v in top.items() if v <= 1.0]
    if not low:
        return []
    shown = listing(low)
    verb = "has" if len(low) == 1 else "have"
    return [
        f"--percent: {shown} {verb} every {col} <= 1 while other algorithms exceed 1; if "
        f"{shown} {'was' if len(low) == 1 else 'were'} written as fractions, multiply "
        f"{'its' if len(low) == 1 else 'their'} values by 100"
    ]


def _dense(
    rows: pd.DataFrame,
    split: str,
    algorithms: tuple[str, ...],
    seeds: tuple[str, ...],
    envs: tuple[str, ...],
    has_seed: bool,
    name: str,
) -> np.ndarray:
    """Pivot `rows` into (seeds, algorithms, envs), naming the first hole precisely."""
    out = np.full((len(seeds), len(algorithms), len(envs)), np.nan)
    s_idx = {s: i for i, s in enumerate(seeds)}
    a_idx = {a: i for i, a in enumerate(algorithms)}
    e_idx = {e: i for i, e in enumerate(envs)}
    out[
        rows["seed"].map(s_idx).to_numpy(),
        rows["algorithm"].map(a_idx).to_numpy(),
        rows["environment"].map(e_idx).to_numpy(),
    ] = rows["error"].to_numpy()
    holes = np.argwhere(np.isnan(out))
    if holes.size:
        s, a, e = holes[0]
        present = np.flatnonzero(~np.isnan(out[s, :, e]))
        seed_txt = f" (seed {seeds[s]})" if has_seed else ""
        if present.size:
            other = algorithms[present[0]]
            raise OodevalError(
                f"{name}: algorithm {algorithms[a]}{seed_txt} has no {split} row for environment "
                f"{envs[e]}, which algorithm {other} has; add the row or remove environment "
                f"{envs[e]} for every algorithm"
            )
        other_seed = np.flatnonzero(~np.isnan(out[:, a, e]))
        if other_seed.size:
            raise OodevalError(
                f"{name}: algorithm {algorithms[a]} has no {split} row for environment "
                f"{envs[e]} in seed {seeds[s]}, but has one in seed {seeds[other_seed[0]]}; "
                "give every seed the same environments"
            )
        raise OodevalError(  # environment present only for another seed and another algorithm
            f"{name}: no algorithm has a {split} row for environment {envs[e]} in seed "
            f"{seeds[s]}; give every seed the same environments"
        )
    return out
