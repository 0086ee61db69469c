"""Read DomainBed sweep folders: the finished runs' checkpoint records, validated.

A DomainBed sweep folder holds one sub-folder per run; each run writes ``results.jsonl`` (one JSON
record per checkpoint: ``args`` with algorithm, dataset, test_envs, hparams_seed and trial_seed,
plus ``step`` and ``env{i}_in_acc`` / ``env{i}_out_acc``) and an empty ``done`` file when it
finishes. `read_sweep` reads them into a `Sweep`; `checkpoint_table` turns its single-test-env
runs into the per-checkpoint frame model selection reads (`oodeval.results.selection`).
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from oodeval._json import json_lines, load_json, refuse_folded_keys
from oodeval._names import refuse_lookalikes
from oodeval._text import parse_problem
from oodeval.errors import OodevalError
from oodeval.limits import human_bytes, max_text_bytes
from oodeval.results.selection import CHECKPOINT_COLUMNS


class SweepWarning(UserWarning):
    """A problem in a sweep folder that was skipped (bad JSON line, run without records)."""


@dataclass(frozen=True)
class Sweep:
    """The finished runs of a DomainBed sweep folder, one row of `records` per checkpoint.

    `records` columns: run (sub-folder name), line (1-based line in results.jsonl), dataset,
    algorithm, test_envs (tuple of ints), hparams, trial, step, n_envs, and env{i}_in_acc /
    env{i}_out_acc for i < the dataset's number of environments (NaN beyond it).
    """

    path: Path
    records: pd.DataFrame
    n_runs: int
    unfinished_runs: int
    warnings: tuple[str, ...]
    env_counts: dict[str, int]

    @property
    def datasets(self) -> list[str]:
        """Dataset names in sorted order."""
        return sorted(self.env_counts)

    def n_envs(self, dataset: str) -> int:
        """Number of environments of `dataset` (from its records' env{i}_out_acc keys)."""
        return self.env_counts[dataset]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_accuracy(x: Any) -> bool:
    return (
        isinstance(x, (int, float))
        and not isinstance(x, bool)
        and math.isfinite(x)
        and 0.0 <= x <= 1.0
    )


def _parse_record(obj: Any) -> dict[str, Any] | str:
    """Return the fields we use from one checkpoint record, or a reason why it is unusable."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    args = obj.get("args")
    if not isinstance(args, dict):
        return "no 'args' object"
    for key in ("algorithm", "dataset"):
        if not isinstance(args.get(key), str) or not args[key]:
            return f"args.{key} missing or not a string"
    for key in ("hparams_seed", "trial_seed"):
        if not _is_int(args.get(key)):
            return f"args.{key} missing or not an integer"
    test_envs = args.get("test_envs")
    if (
        not isinstance(test_envs, list)
        or not test_envs
        or not all(_is_int(e) and e >= 0 for e in test_envs)
    ):
        return "args.test_envs missing or not a list of environment indices"
    step = obj.get("step")
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if not _is_int(step):
        return "'step' missing or not an integer"
    n_envs = 0
    while f"env{n_envs}_out_acc" in obj:
        n_envs += 1
    if n_envs < 2:
        return "fewer than two env{i}_out_acc entries"
    accs: dict[str, float] = {}
    for i in range(n_envs):
        for split in ("in", "out"):
            key = f"env{i}_{split}_acc"
            if not _is_accuracy(obj.get(key)):
                return f"{key} missing or not an accuracy in [0, 1]"
            accs[key] = float(obj[key])
    if max(test_envs) >= n_envs:
        return f"test_envs {test_envs} name an environment beyond the {n_envs} recorded"
    return {
        "dataset": args["dataset"],
        "algorithm": args["algorithm"],
        "test_envs": tuple(test_envs),
        "hparams": args["hparams_seed"],
        "trial": args["trial_seed"],
        "step": step,
        "n_envs": n_envs,
        **accs,
    }


def _record(line: str, where: str) -> Any:
    """One line of results.jsonl, parsed: a key twice in any object is refused, and two keys
    equal but for case among the record's own keys and its ``args`` (its ``hparams`` are an
    algorithm's own names, kept as written)."""
    obj = load_json(line, where=where, fold_case=False)
    for fields in (obj, obj.get("args") if isinstance(obj, dict) else None):
        if isinstance(fields, dict):
            refuse_folded_keys(fields, where=where)
    return obj


def _read_run(results: Path, notes: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        if not results.is_file() or results.stat().st_size > max_text_bytes():  # /dev/zero link
            bound = human_bytes(max_text_bytes())
            notes.append(f"skipped the run: {results} is not a regular file of at most {bound}")
            return rows
        data = results.read_bytes()
    except OSError as exc:  # one unreadable run is skipped like an unreadable line
        notes.append(f"skipped the run: cannot read {results} ({exc.strerror or exc})")
        return rows
    # A run killed mid-write may leave NUL padding or a cut UTF-8 sequence at the end of its
    # log: bad bytes only spoil their own line, which is skipped below like any invalid line.
    text = data.decode("utf-8", errors="replace").replace("\x00", "")
    for lineno, line in enumerate(json_lines(text), start=1):
        if not line.strip():
            continue
        try:
            obj = _record(line, f"{results} line {lineno}")
        except OodevalError:  # a repeated key or deep nesting: no truncated line looks so
            raise
        except json.JSONDecodeError:
            notes.append(f"skipped {results} line {lineno}: not valid JSON (truncated?)")
            continue
        except ValueError as exc:  # int() refuses a number of over 4300 digits
            notes.append(f"skipped {results} line {lineno}: not valid JSON ({parse_problem(exc)})")
            continue
        parsed = _parse_record(obj)
        if isinstance(parsed, str):
            notes.append(f"skipped {results} line {lineno}: {parsed}")
            continue
        parsed["run"] = results.parent.name
        parsed["line"] = lineno
        rows.append(parsed)
    return rows


def read_sweep(path: str | Path) -> Sweep:
    """Read the finished runs of a DomainBed sweep folder into a `Sweep`.

    Runs (sub-folders) without a ``done`` file are unfinished and skipped (counted in
    `Sweep.unfinished_runs`). Unreadable lines are skipped with a `SweepWarning` naming the file
    and line; the messages are also kept in `Sweep.warnings`.

    Parameters
    ----------
    path : str or Path
        The sweep's output folder (DomainBed's ``--output_dir``).

    Returns
    -------
    Sweep
    """
    root = Path(path)
    if not root.exists():
        raise OodevalError(f"sweep folder not found: {root}; check the path")
    if not root.is_dir():
        raise OodevalError(f"{root} is a file; pass the DomainBed sweep folder that holds the runs")
    if (root / "results.jsonl").is_file():
        raise OodevalError(
            f"{root} looks like a single run (it holds results.jsonl); pass the sweep folder "
            "that holds the run folders"
        )
    run_dirs = sorted(d for d in root.iterdir() if d.is_dir() and (d / "results.jsonl").is_file())
    if not run_dirs:
        raise OodevalError(
            f"no DomainBed runs in {root}: expected sub-folders holding results.jsonl"
        )
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    finished = 0
    unfinished = 0
    for run_dir in run_dirs:
        if not (run_dir / "done").exists():
            unfinished += 1
            continue
        finished += 1
        run_rows = _read_run(run_dir / "results.jsonl", notes)
        if not run_rows:
            notes.append(f"skipped run {run_dir.name}: no usable records in results.jsonl")
        rows.extend(run_rows)
    if not rows:
        reason = (
            f"all {unfinished} runs are unfinished (no `done` file)"
            if finished == 0
            else "no usable checkpoint records"
        )
        raise OodevalError(f"no finished DomainBed runs to read in {root}: {reason}")
    rows = _drop_inconsistent_env_counts(rows, notes)
    for what in ("algorithm", "dataset"):  # two spellings of one name would split its runs
        refuse_lookalikes(dict.fromkeys(r[what] for r in rows), what, str(root))
    for note in notes:
        warnings.warn(note, SweepWarning, stacklevel=2)
    records = _records_frame(rows)
    return Sweep(
        path=root,
        records=records,
        n_runs=int(records["run"].nunique()),
        unfinished_runs=unfinished,
        warnings=tuple(notes),
        env_counts={
            str(d): int(n) for d, n in records.groupby("dataset")["n_envs"].first().items()
        },
    )


_LEAD_COLUMNS = ("run", "line", "dataset", "algorithm", "test_envs", "hparams", "trial", "step")


def _records_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """`Sweep.records`: the lead columns, then env{i}_in_acc / env{i}_out_acc by i, by run."""
    records = pd.DataFrame(rows)
    acc_cols = sorted(
        (c for c in records.columns if c.startswith("env")),
        key=lambda c: (int(c[3 : c.index("_")]), c),
    )
    return records[[*_LEAD_COLUMNS, "n_envs", *acc_cols]].sort_values(
        ["run", "line"], ignore_index=True
    )


def _drop_inconsistent_env_counts(
    rows: list[dict[str, Any]], notes: list[str]
) -> list[dict[str, Any]]:
    """Keep, per dataset, only records with the dataset's most common number of environments."""
    counts: dict[str, Counter] = {}
    for r in rows:
        counts.setdefault(r["dataset"], Counter())[r["n_envs"]] += 1
    expected = {d: c.most_common(1)[0][0] for d, c in counts.items()}
    kept = []
    for r in rows:
        if r["n_envs"] != expected[r["dataset"]]:
            notes.append(
                f"skipped run {r['run']} line {r['line']}: {r['n_envs']} environments where "
                f"other {r['dataset']} records have {expected[r['dataset']]}"
            )
            continue
        kept.append(r)
    return kept


def checkpoint_table(sweep: Sweep) -> pd.DataFrame:
    """Tidy per-checkpoint frame of the runs with a single test environment.

    One row per (run, checkpoint) with columns `CHECKPOINT_COLUMNS`: dataset, algorithm,
    environment (the test environment's index), trial (trial_seed), hparams (hparams_seed), step,
    test_acc (test env in-split accuracy, the reported number), train_val_acc (mean out-split
    accuracy over the training environments, what training-domain validation maximises) and
    oracle_val_acc (test env out-split accuracy, what test-domain validation maximises).
    Studies can build the same frame and reuse the selection and variance functions.
    """
    recs = sweep.records[sweep.records["test_envs"].map(len) == 1]
    rows = []
    for r in recs.itertuples(index=False):
        rec = r._asdict()
        e = rec["test_envs"][0]
        train_outs = [rec[f"env{i}_out_acc"] for i in range(rec["n_envs"]) if i != e]
        # plain mean over the N - 1 training environments (DomainBed's np.mean of the same values)
        rows.append(
            {
                "dataset": rec["dataset"],
                "algorithm": rec["algorithm"],
                "environment": e,
                "trial": rec["trial"],
                "hparams": rec["hparams"],
                "step": rec["step"],
                "test_acc": rec[f"env{e}_in_acc"],
                "train_val_acc": sum(train_outs) / len(train_outs),
                "oracle_val_acc": rec[f"env{e}_out_acc"],
            }
        )
    return pd.DataFrame(rows, columns=list(CHECKPOINT_COLUMNS))
