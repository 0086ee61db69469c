"""JSON results as long-form DataFrames of text cells, for `oodeval.results.longform`.

Two layouts: JSON lines (one object per line; `json_lines_frame`, which records each row's file
line in a ``_line`` column) and a JSON list of row objects (`json_records_frame`, what
``--format json`` prints). Values are rendered as the text a CSV cell would hold (`_json_cell`),
so both go through the same checks as a CSV. Every problem is one OodevalError line.

>>> json_lines_frame('{"algorithm": "ERM", "error": 0.25}', "r.jsonl").to_dict("list")
{'_line': [1], 'algorithm': ['ERM'], 'error': ['0.25']}
"""

from __future__ import annotations

import json

import pandas as pd

from oodeval._json import json_lines, load_json
from oodeval._text import parse_problem
from oodeval.errors import OodevalError

__all__ = ["json_lines_frame", "json_records_frame"]


def json_lines_frame(text: str, name: str) -> pd.DataFrame:
    records: list[dict[str, str]] = []
    lines: list[int] = []
    for lineno, line in enumerate(json_lines(text), start=1):
        if not line.strip():
            continue
        try:
            obj = load_json(line, where=f"{name} line {lineno}")
        except OodevalError:  # a repeated key, or nested too deep: its own message
            raise
        except ValueError as exc:  # JSONDecodeError, or int() refusing a huge number
            raise OodevalError(
                f"{name} line {lineno} is not valid JSON ({parse_problem(exc)}); each line must "
                'be one JSON object such as {"algorithm": "ERM", "environment": "e1", '
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


def json_records_frame(text: str, name: str) -> pd.DataFrame:
    """A JSON list of row objects (what ``--format json`` prints for a results table)."""
    try:
        rows = load_json(text, where=name)
    except OodevalError:
        raise
    except ValueError as exc:  # JSONDecodeError, or int() refusing a huge number
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise OodevalError(
            f"{name} is not valid JSON ({parse_problem(exc)}{where}); write a list of "
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
