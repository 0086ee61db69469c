"""Hypothesis strategies for the fuzz tests: users' input files, valid and broken.

- `results_files`: long-form results (CSV, JSON lines, a JSON list) with the numbers they hold,
  so a test can compute every measure itself;
- `scored_predictions`, `model_predictions`: open-world predictions (CSV or .npz) with the
  samples they hold;
- `MUTATIONS`: ways of breaking a text file (truncated, binary junk, invalid UTF-8...);
- `lookalikes`, `repeated_key`, `nested_json`: hostile variants of a valid file's names, keys
  and values (a look-alike spelling of a name, a key written twice, nesting past the bound);
- `fuzz_settings`: the Hypothesis settings of every fuzz test (bounded for CI; the environment
  variable ``OODEVAL_FUZZ_SCALE`` multiplies the example counts for a longer campaign).

Names are drawn from printable Unicode without control, format (bidi) or line-separator
characters: how those are shown on a terminal is the safe-text item of the hardening issue, not
what these tests check.
"""

from __future__ import annotations

import csv
import io
import json
import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: Multiplies every fuzz test's example count (``OODEVAL_FUZZ_SCALE=20`` for a long campaign).
FUZZ_SCALE = float(os.environ.get("OODEVAL_FUZZ_SCALE", "1") or "1")


def fuzz_settings(max_examples: int) -> settings:
    """Settings of one fuzz test: `max_examples` (times `FUZZ_SCALE`), no deadline (commands
    read files and may import modules on first use), and no health check on slow data."""
    return settings(
        max_examples=max(1, round(max_examples * FUZZ_SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        print_blob=True,
    )


#: Characters a name may hold: letters, digits, punctuation, symbols and spaces of any script
#: (so commas, quotes, emoji and CJK), never control/format/surrogate/line-separator ones.
NAME_CHARS = st.characters(
    blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"),
)


def names(max_size: int = 12) -> st.SearchStrategy[str]:
    """A label as a user writes it: no surrounding whitespace (the readers strip it)."""
    return (
        st.text(NAME_CHARS, min_size=1, max_size=max_size)
        .map(str.strip)
        .filter(lambda s: s != "" and not s.startswith(("[", "{")))
    )


def lookalike_key(name: str) -> str:
    """`name` with control and format characters (Cc, Cf) dropped, NFKC-normalised: two names
    with one key print alike, so a reader refuses them (written here from the definition)."""
    visible = "".join(c for c in name if unicodedata.category(c) not in ("Cc", "Cf"))
    folded = unicodedata.normalize("NFKC", visible)
    return "".join(c for c in folded if unicodedata.category(c) not in ("Cc", "Cf"))


def _distinct(strategy: st.SearchStrategy[str], lo: int, hi: int) -> st.SearchStrategy[list]:
    # "a" and "A" are two names; "ﬁ" and "fi" (one after NFKC) would be refused as look-alikes
    return st.lists(strategy, min_size=lo, max_size=hi, unique_by=lookalike_key)


#: Errors as fractions in [0, 1]: round decimals (as logs hold) or any float, edges included.
ERRORS = st.one_of(
    st.integers(0, 1000).map(lambda k: k / 1000),
    st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False),
    st.sampled_from([0.0, 1.0]),
)


@dataclass
class Results:
    """A valid long-form results table and the numbers it holds."""

    algorithms: list[str]
    environments: list[str]
    all_environments: list[str]
    seeds: list[int] | None
    loo: np.ndarray  # (seeds, algorithms, environments): error fractions
    full: np.ndarray | None
    column: str  # "error" or "accuracy"
    percent: bool
    extra: dict[str, str]  # ignored columns and one value each

    def cell(self, error: float) -> str:
        """The file's cell for `error`: the shortest round-trip repr of what the file holds."""
        value = 1.0 - error if self.column == "accuracy" else error
        return repr(value * 100 if self.percent else value)

    def errors(self, split: str) -> np.ndarray:
        """The error fractions the reader should find: what the cells parse back to."""
        cube = self.loo if split == "loo" else self.full
        assert cube is not None
        value = 1.0 - cube if self.column == "accuracy" else cube
        if self.percent:
            value = (value * 100) / 100
        return 1.0 - value if self.column == "accuracy" else value

    def rows(self) -> list[dict[str, str]]:
        out = []
        parts = [("loo", self.loo, self.environments)]
        if self.full is not None:
            parts.append(("all", self.full, self.all_environments))
        for split, cube, envs in parts:
            for s, seed in enumerate(self.seeds or [None]):
                for a, alg in enumerate(self.algorithms):
                    for e, env in enumerate(envs):
                        row = {"algorithm": alg, "environment": env, "split": split}
                        row[self.column] = self.cell(float(cube[s, a, e]))
                        if seed is not None:
                            row["seed"] = str(seed)
                        out.append({**row, **self.extra})
        return out


@st.composite
def results_tables(draw: st.DrawFn, *, min_envs: int = 3) -> Results:
    """A valid results table: 1-4 algorithms, `min_envs`-5 environments, optional seeds, `all`
    rows, accuracy or error, percentages or fractions, extra columns."""
    algorithms = draw(_distinct(names(), 1, 4))
    envs = draw(_distinct(names(), min_envs, 5))
    with_all = draw(st.booleans())
    all_envs = draw(_distinct(names(), 1, 4)) if with_all else []
    seeds = draw(st.none() | st.lists(st.integers(0, 2**31), min_size=1, max_size=2, unique=True))
    n_seeds = len(seeds or [None])

    def cube(n_envs: int) -> np.ndarray:
        values = draw(st.lists(ERRORS, min_size=n_seeds * len(algorithms) * n_envs,
                               max_size=n_seeds * len(algorithms) * n_envs))
        return np.array(values, dtype=np.float64).reshape(n_seeds, len(algorithms), n_envs)

    loo = cube(len(envs))
    full = cube(len(all_envs)) if with_all else None
    column = draw(st.sampled_from(["error", "accuracy"]))
    table = Results(algorithms, envs, all_envs, seeds, loo, full, column, False, {})
    cells = [float(table.cell(e)) * 100 for e in loo.ravel().tolist()]
    cells += [] if full is None else [float(table.cell(e)) * 100 for e in full.ravel().tolist()]
    # read with --percent, a file whose every value is <= 1 is refused as fractions
    percent = draw(st.booleans()) and max(cells) > 1
    reserved = {"algorithm", "environment", "split", "seed", "error", "accuracy"}
    extra_names = draw(st.lists(
        st.sampled_from(["_line", " _Line", "notes", "Run ID", "index", "Unnamed: 0"])
        | st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
        max_size=2, unique_by=lambda k: k.strip().lower(),
    ))
    extra = {k: draw(names(6)) for k in extra_names if k.strip().lower() not in reserved}
    return Results(algorithms, envs, all_envs, seeds, loo, full, column, percent, extra)


def csv_text(rows: list[dict[str, str]], columns: list[str], newline: str = "\n") -> str:
    """`rows` as CSV with `columns` in that order (quoted as needed), lines ending `newline`."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator=newline)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


@st.composite
def results_files(draw: st.DrawFn, *, min_envs: int = 3) -> tuple[Results, str, str]:
    """(table, suffix, text): a valid table written as CSV, JSON lines or a JSON list, its
    columns and rows in any order."""
    table = draw(results_tables(min_envs=min_envs))
    rows = draw(st.permutations(table.rows()))
    kind = draw(st.sampled_from(["csv", "jsonl", "json"]))
    if kind == "csv":
        columns = draw(st.permutations(list(rows[0])))
        return table, ".csv", csv_text(rows, columns)
    if draw(st.booleans()):  # JSON numbers rather than strings
        rows = [{**r, table.column: float(r[table.column])} for r in rows]
    if kind == "jsonl":
        return table, ".jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return table, ".json", json.dumps(rows, ensure_ascii=False, indent=1)


def reference_measures(loo: np.ndarray) -> dict[str, np.ndarray]:
    """The default measures of every (seed, algorithm), computed here from the errors."""
    worst, best = loo.max(axis=-1), loo.min(axis=-1)
    gap_term = (worst - best) / (loo.shape[-1] - 2)
    return {
        "average": loo.mean(axis=-1),
        "worst": worst,
        "best": best,
        "gap": worst - best,
        "worst_plus_gap": worst + gap_term,
        "worst_only": worst,
        "gap_only": gap_term,
    }


# --- broken text files -------------------------------------------------------------------------
#: (name, mutation, always refused): a mutation takes the valid file's bytes and a random
#: generator's draw (`st.DataObject`); an "always refused" one can never leave a valid file.
Mutation = Callable[[bytes, st.DataObject], bytes]


def _truncated(data: bytes, d: st.DataObject) -> bytes:
    return data[: d.draw(st.integers(0, max(0, len(data) - 1)), label="cut")]


def _junk(data: bytes, d: st.DataObject) -> bytes:
    junk = d.draw(st.binary(min_size=1, max_size=40), label="junk")
    at = d.draw(st.integers(0, len(data)), label="at")
    return data[:at] + junk + data[at:]


def _invalid_utf8(data: bytes, d: st.DataObject) -> bytes:
    at = d.draw(st.integers(0, len(data)), label="at")
    bad = d.draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80abc"]), label="b")
    return data[:at] + bad + data[at:]


def _nul(data: bytes, d: st.DataObject) -> bytes:
    at = d.draw(st.integers(0, len(data)), label="at")
    return data[:at] + b"\x00" + data[at:]


def _utf16(data: bytes, _d: st.DataObject) -> bytes:
    return data.decode("utf-8").encode("utf-16")


def _empty(_data: bytes, d: st.DataObject) -> bytes:
    return d.draw(st.sampled_from([b"", b"\n", b"  \n\n", b"\xef\xbb\xbf"]), label="empty")


def _dropped_line(data: bytes, d: st.DataObject) -> bytes:
    lines = data.splitlines(keepends=True)
    k = d.draw(st.integers(0, len(lines) - 1), label="line")
    return b"".join(lines[:k] + lines[k + 1 :])


def _duplicated_line(data: bytes, d: st.DataObject) -> bytes:
    lines = data.splitlines(keepends=True)
    k = d.draw(st.integers(0, len(lines) - 1), label="line")
    return b"".join(lines[: k + 1] + [lines[k]] + lines[k + 1 :])


#: Mutations of any text file; the second value says whether the result is always refused.
MUTATIONS: dict[str, tuple[Mutation, bool]] = {
    "truncated": (_truncated, False),
    "binary junk": (_junk, False),
    "invalid UTF-8": (_invalid_utf8, True),
    "NUL byte": (_nul, True),
    "UTF-16": (_utf16, True),
    "empty": (_empty, True),
    "dropped line": (_dropped_line, False),
    "duplicated line": (_duplicated_line, False),
}


def bom_and_newlines(text: str, d: st.DataObject) -> bytes:
    """`text` as bytes with an optional UTF-8 byte-order mark and its line ends mixed
    (``\\n``, ``\\r\\n``): the same content to a reader."""
    lines = text.split("\n")
    ends = [d.draw(st.sampled_from(["\n", "\r\n"]), label="end") for _ in lines[:-1]]
    body = "".join(line + end for line, end in zip(lines, ends, strict=False)) + lines[-1]
    bom = d.draw(st.booleans(), label="bom")
    return (b"\xef\xbb\xbf" if bom else b"") + body.encode("utf-8")


# --- open-world predictions --------------------------------------------------------------------
#: Detector scores: few distinct values (so ties happen) or any finite float.
SCORES = st.one_of(
    st.integers(-3, 3).map(float),
    st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False),
)


@dataclass
class Scored:
    """The already-scored form: one detector score, base flag and correctness per sample."""

    scores: np.ndarray
    is_base: np.ndarray
    correct: np.ndarray

    def columns(self, bool_words: tuple[str, str]) -> dict[str, list[str]]:
        true, false = bool_words
        return {
            "score": [repr(float(s)) for s in self.scores],
            "is_base": [true if b else false for b in self.is_base],
            "correct": [true if c else false for c in self.correct],
        }


@st.composite
def scored_predictions(draw: st.DrawFn) -> Scored:
    """At least one base and one new sample, up to 40 samples."""
    n = draw(st.integers(2, 40))
    is_base = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    is_base[0], is_base[-1] = True, False
    scores = np.array(draw(st.lists(SCORES, min_size=n, max_size=n)), dtype=np.float64)
    correct = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    return Scored(scores, is_base, correct)


def reference_openworld(s: Scored, tie: float) -> dict[str, float]:
    """BaseAcc, NewAcc, HM, AUROC and OpenworldAUC computed here, pair by pair."""
    base, new = s.scores[s.is_base], s.scores[~s.is_base]
    base_ok, new_ok = s.correct[s.is_base], s.correct[~s.is_base]
    wins = (base[:, None] > new[None, :]) + tie * (base[:, None] == new[None, :])
    base_acc, new_acc = float(base_ok.mean()), float(new_ok.mean())
    hm = 0.0 if base_acc + new_acc == 0 else 2 * base_acc * new_acc / (base_acc + new_acc)
    return {
        "n_base": int(s.is_base.sum()),
        "n_new": int((~s.is_base).sum()),
        "base_acc": base_acc,
        "new_acc": new_acc,
        "hm": hm,
        "auroc": float(wins.mean()),
        "openworld_auc": float((wins * base_ok[:, None] * new_ok[None, :]).mean()),
    }


@dataclass
class Outputs:
    """The outputs form: probabilities over all classes, labels and the base classes."""

    probs: np.ndarray  # (n, C), rows summing to 1
    labels: np.ndarray
    base: list[int]

    def scored(self) -> Scored:
        """The samples the suite scores: r = max base probability, g / h = argmax over the
        base / new columns (lowest id on ties), each sample's correctness by its own kind."""
        n_classes = self.probs.shape[1]
        new = [c for c in range(n_classes) if c not in self.base]
        is_base = np.isin(self.labels, self.base)
        g = np.array(self.base)[self.probs[:, self.base].argmax(axis=1)]
        h = np.array(new)[self.probs[:, new].argmax(axis=1)]
        correct = np.where(is_base, g == self.labels, h == self.labels)
        return Scored(self.probs[:, self.base].max(axis=1), is_base, correct)


@st.composite
def model_predictions(draw: st.DrawFn) -> Outputs:
    """2-6 classes, some base and some new, with samples of both kinds."""
    n_classes = draw(st.integers(2, 6))
    base = sorted(draw(st.sets(st.integers(0, n_classes - 1), min_size=1,
                               max_size=n_classes - 1)))
    new = [c for c in range(n_classes) if c not in base]
    n = draw(st.integers(2, 30))
    labels = draw(st.lists(st.integers(0, n_classes - 1), min_size=n, max_size=n))
    labels[0], labels[-1] = base[0], new[0]
    weights = np.array(
        draw(st.lists(st.integers(1, 20), min_size=n * n_classes, max_size=n * n_classes)),
        dtype=np.float64,
    ).reshape(n, n_classes)
    probs = weights / weights.sum(axis=1, keepdims=True)
    return Outputs(probs, np.array(labels), base)


# --- hostile variants: look-alike names, repeated keys, deep nesting ---------------------------
#: Characters that change a name's spelling but not how it prints: zero-width space, non-joiner
#: and joiner, word joiner, byte-order mark, soft hyphen, C0 and C1 controls, a bidi mark.
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\x01", "\x7f", "\u200e"]
@st.composite
def lookalikes(draw: st.DrawFn, name: str) -> str:
    """Another spelling of `name` with the same `lookalike_key`: an invisible character put
    inside it, or its NFD / NFKC form when that differs."""
    forms = [
        f
        for f in (unicodedata.normalize("NFD", name), unicodedata.normalize("NFKC", name))
        if f != name and f.strip() == f and lookalike_key(f) == lookalike_key(name)
    ]
    if forms and draw(st.booleans(), label="normal form"):
        return draw(st.sampled_from(forms), label="form")
    at = draw(st.integers(1, max(1, len(name) - 1)) if len(name) > 1 else st.just(1), label="at")
    mark = draw(st.sampled_from(INVISIBLE), label="mark")
    return name[:at] + mark + name[at:]


@st.composite
def repeated_key(draw: st.DrawFn, keys: list[str]) -> tuple[str, str]:
    """(a key of `keys`, the key a hostile file writes again): the same key, or one equal to it
    once stripped and case-folded (``error`` and ``Error``, `` error``)."""
    key = draw(st.sampled_from(keys), label="key")
    how = draw(st.sampled_from(["exact", "case", "spaced"]), label="how")
    if how == "exact":
        return key, key
    other = key.swapcase() if how == "case" and key.swapcase() != key else f" {key} "
    return key, other


@st.composite
def nested_json(draw: st.DrawFn, depth: int) -> str:
    """A JSON value nesting `depth` arrays and objects (a drawn pattern of both, repeated),
    innermost a number."""
    pattern = draw(st.lists(st.booleans(), min_size=1, max_size=8), label="pattern")
    kinds = [pattern[i % len(pattern)] for i in range(depth)]
    head = "".join('{"k": ' if obj else "[" for obj in kinds)
    tail = "".join("}" if obj else "]" for obj in reversed(kinds))
    return head + "0.5" + tail
