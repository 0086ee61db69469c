"""What `oodeval study analyze` writes and prints: the verdict block (the answer the study is run
for, in words), ``analysis.md`` with every table of `oodeval.study.analysis.paper.analyze`, and
one CSV per table (`write_analysis(DIR)` writes them to ``DIR/analysis/``). Tables are rendered by
the one table renderer, `oodeval.tables`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from oodeval._files import make_folder, refuse_links, write_files
from oodeval._text import safe_text
from oodeval.errors import OodevalError, option
from oodeval.measures import measure_label, meta
from oodeval.study.analysis.leaderboard import leaderboard_text
from oodeval.study.analysis.paper import (
    CORRELATION_MEASURES,
    PAPER_REFERENCES,
    VERDICT_RESAMPLES,
    analyze,
)
from oodeval.study.analysis.versions import measure_version_notes
from oodeval.study.store import Study, load_study
from oodeval.tables import csv_text, plus_minus, render_frame

__all__ = [
    "BOUNDS_SENTENCE",
    "NICO_PAPER_NOTE",
    "TABLE3_PAPER_NOTE",
    "TABLE5_PAPER_NOTE",
    "VERDICT_FOOTNOTE",
    "analysis_files",
    "analysis_markdown",
    "completeness_sentence",
    "verdict_markdown",
    "verdict_view",
    "verdict_warning",
    "write_analysis",
]


def _markdown(frame: pd.DataFrame) -> str:
    """`frame` as a GitHub-flavoured markdown table, floats to 3 decimals, every column
    left-aligned (``| --- |``), as ``analysis.md`` prints its tables.

    >>> print(_markdown(pd.DataFrame({"a": [1.23456], "b": ["x"]})))
    | a | b |
    | --- | --- |
    | 1.235 | x |
    """
    return render_frame(frame, "markdown", digits=3, right=[False] * len(frame.columns))


def completeness_sentence(study: Study) -> str:
    """How many of the study's units the analyses use, and how many are missing and why.

    E.g. "18 of 24 units done; 6 missing (4 pending, 2 failed): the verdict uses the 18."
    """
    counts = study.counts()
    done, planned = counts["done"], counts["planned"]
    if done >= planned:
        return f"All {planned} units done."
    parts = [f"{counts[k]} {k}" for k in ("pending", "failed") if counts[k]]
    if counts.get("damaged"):
        parts.append(f"{counts['damaged']} damaged (excluded)")
    missing = planned - done
    return (
        f"{done} of {planned} units done; {missing} missing ({', '.join(parts)}): the verdict "
        f"uses the {done}."
    )


def verdict_view(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The verdict table as printed: rho [low, high] per measure, the difference, the verdict."""

    def interval(stem: str) -> list[str]:
        return [
            "–" if math.isnan(v) else f"{v:.3f} [{lo:.3f}, {hi:.3f}]"
            for v, lo, hi in zip(
                verdicts[stem], verdicts[f"{stem}_low"], verdicts[f"{stem}_high"], strict=True
            )
        ]

    seeds = [
        f"{n} ({left} left out)" if left else f"{n}"
        for n, left in zip(verdicts["n_seeds"], verdicts["n_seeds_left_out"], strict=True)
    ]
    verdict = [
        f"undefined: {r}" if v == "undefined" else v
        for v, r in zip(verdicts["verdict"], verdicts["reason"], strict=True)
    ]
    return pd.DataFrame(
        {
            "scenario": verdicts["scenario"],
            "algorithms": verdicts["n_algorithms"],
            "seeds": seeds,
            "rho worst+gap [95% CI]": interval("rho_worst_plus_gap"),
            "rho average [95% CI]": interval("rho_average"),
            "difference [95% CI]": interval("difference"),
            "worst+gap vs average": verdict,
        }
    )


VERDICT_FOOTNOTE = (
    "rho: Spearman's rho across algorithms between a measure and the ideal measure (Eq. 4, the "
    "largest error over E_all of the model trained on all given environments), the mean over "
    "seeds as in Table 1. [low, high]: 95% percentile bootstrap interval from "
    f"{VERDICT_RESAMPLES} resamples of the algorithms with replacement; one draw serves every "
    "seed (seeds are repeated runs of the same algorithms) and both measures, so the difference "
    "(rho worst+gap - rho average) is paired. clearly ahead / clearly behind: the difference's "
    "interval excludes 0; ahead, not clearly / behind, not clearly: it covers 0, so only the sign "
    "is known and neither measure leads; tied: equal rho. A seed enters only with at least "
    f"{meta.MIN_VERDICT_ALGORITHMS} finished algorithms (with two, rho is +1 or -1 "
    "whatever the scores)."
)


TABLE5_PAPER_NOTE = (
    "paper_*: the worst+gap paper's Table 5. Its SR-CMNIST row is the mean over all 12 Scale x "
    "Ratio scenarios, its C-Cats&Dogs (colored) and L-CIFAR10 (lined) rows the Ratio 4:1 "
    "scenarios only; each of our rows aggregates the same way (aggregation), unlike the "
    "'(mean)' rows above, which average every scenario of a family."
)

TABLE3_PAPER_NOTE = (
    "paper_*: the worst+gap paper's Table 3 (PACS-corrupted and VLCS-corrupted, Envs 1-1-1-1 "
    "and 2-2-2-2) or Table 4 (PACS-corrupted, Envs 1-0-1-1 and 2-0-2-2), per seed, 14 "
    "algorithms. Our seeds are training seeds: the corruptions of the given environments are "
    "drawn by the study's data seed, the same for every seed, where the paper's seed drew them "
    "too; seed k is set beside the paper's seed k as a repetition, not the same environments."
)

NICO_PAPER_NOTE = (
    "Accuracy (%) of the model trained on all given domains on each target domain, mean over "
    "seeds; Ova.: over all target images (weighted by the stored counts); Avg.: mean of the "
    "domains' accuracies; Std: their population standard deviation (ddof=0, as the paper's "
    "printed values are, though its Eq. 5 divides by K - 1). paper_*: the NICO++ paper's Table 2 "
    "(ResNet-50) or Table 5 (ResNet-18), after the study's model; ERM is its Deepall."
)

BOUNDS_SENTENCE = (
    "Theorem 3.4, carried to trained models in Eq. 39, says that under its assumptions the ideal "
    "measure (the worst error over E_all of the model trained on all given environments) is at "
    "most worst+gap of the LOO errors; share_within_worst_plus_gap is the share of each "
    "scenario's (algorithm, seed) units where that held, and share_within_worst where the worst "
    "LOO error alone, without the gap term, was already a bound."
)


def verdict_warning(verdicts: pd.DataFrame) -> str:
    """`meta.interval_warning` for the fewest algorithms of a scenario with a verdict
    ("" when every such scenario has enough, or none has a verdict)."""
    defined = verdicts[verdicts["verdict"] != "undefined"]
    if defined.empty:
        return ""
    return meta.interval_warning(int(defined["n_algorithms"].min()))


def verdict_markdown(study: Study, results: dict[str, pd.DataFrame]) -> str:
    """The verdict block: one sentence, the units it uses, the per-scenario table, the footnote.

    Printed first by `oodeval study analyze` and at the top of ``analysis.md``; a note on the
    data (`Study.data_note`) follows the count of units when there is one.
    """
    verdicts = results["verdict"]
    note = study.data_note()
    warning = verdict_warning(verdicts)
    return "\n".join(
        [
            safe_text(f"Verdict: {meta.verdict_sentence(verdicts, *CORRELATION_MEASURES)}"),
            "",
            completeness_sentence(study),
            "",
            *([safe_text(f"Note: {note}."), ""] if note else []),
            _markdown(verdict_view(verdicts)),
            "",
            *([safe_text(f"Warning: {warning}."), ""] if warning else []),
            VERDICT_FOOTNOTE,
            "",
        ]
    )


def analysis_files(results: dict[str, pd.DataFrame], out_dir: str | Path) -> dict[str, Path]:
    """{name: path} of the files `write_analysis` writes for `results` into `out_dir`: one CSV
    per table and ``analysis.md`` (``markdown``).

    >>> [str(p) for p in analysis_files({"verdict": pd.DataFrame()}, "s/analysis").values()]
    ['s/analysis/verdict.csv', 's/analysis/analysis.md']
    """
    written = {name: Path(out_dir) / f"{name}.csv" for name in results}
    written["markdown"] = Path(out_dir) / "analysis.md"
    return written


def write_analysis(
    directory: Study | str | Path,
    *,
    exclude_damaged: bool = False,
    results: dict[str, pd.DataFrame] | None = None,
    out_dir: str | Path | None = None,
) -> dict[str, Path]:
    """Compute `analyze` for the study in `directory`; write CSVs and ``analysis.md``.

    Returns {name: path} of the written files (in ``directory/analysis/``, or `out_dir`; the
    verdict in ``verdict.csv``). A damaged store is refused unless ``exclude_damaged`` (see
    `load_study`); then every file starts with the study's integrity notes (``# `` comment lines
    in the CSVs: read them with ``pd.read_csv(path, comment="#")``). `results`: `analyze`'s
    output for this study when the caller has it already. The files are written all or none
    (`oodeval._files.write_files`): a failed write (a full disk) leaves the folder as it was.
    """
    study = (
        directory
        if isinstance(directory, Study)
        else load_study(directory, exclude_damaged=exclude_damaged)
    )
    results = analyze(study) if results is None else results
    named_by_user = out_dir is not None  # a folder the user names may be a link
    if out_dir is None and Path(study.directory).is_file():
        raise OodevalError(
            f"{safe_text(study.directory)} is a study exported to one file; give "
            f"{option('out_dir', 'DIR')} for the analysis files"
        )
    if out_dir is None:  # a name of oodeval's own: never a link (`oodeval._files`)
        out_dir = Path(study.directory) / "analysis"
        refuse_links(out_dir)
    out_dir = Path(out_dir)
    written = analysis_files(results, out_dir)
    refuse_links(*written.values())  # all of them before the first is written
    notes = "".join(f"# WARNING: {note}\n" for note in study.integrity_notes())
    contents = {written[n]: notes + csv_text(f, float_format="%.6g") for n, f in results.items()}
    contents[written["markdown"]] = analysis_markdown(study, results)
    make_folder(out_dir, what="analysis folder", named_by_user=named_by_user)
    write_files(contents)
    return written


def analysis_markdown(study: Study, results: dict[str, pd.DataFrame]) -> str:
    """One markdown document with every table of `analyze`, the verdict first."""
    lines = _markdown_header(study)
    lines[2:2] = [verdict_markdown(study, results)]
    for key, title, table in _markdown_sections(results):
        lines += [f"## {PAPER_REFERENCES[key]}: {title}", "", _markdown(table), ""]
        lines += _beside_paper(key, results)
    if "bounds" in results:
        lines += [
            f"## {PAPER_REFERENCES['bounds']}: how often the ideal measure is within the bound",
            "",
            BOUNDS_SENTENCE,
            "",
            _markdown(results["bounds"].drop(columns=["family"], errors="ignore")),
            "",
        ]
    if "leaderboard" in results:
        lines += [
            f"## {PAPER_REFERENCES['leaderboard']}",
            "",
            *leaderboard_text(results["leaderboard"]),
        ]
    if "measure_digests" in results:
        lines += _digest_lines(study, results["measure_digests"])
    lines += [
        f"{PAPER_REFERENCES['figure5']}'s raw pairs are in `figure5.csv`; per-unit measures in "
        "`units.csv`.",
        "",
    ]
    return "\n".join(lines)


def _beside_paper(key: str, results: dict[str, pd.DataFrame]) -> list[str]:
    """The ``analysis.md`` lines that follow section `key`: its table next to the paper's values
    (Table 1, then Tables 3-4 and the NICO++ paper's tables; Table 5; Section 6.5's counts under
    Table 6), when the study has comparable rows."""
    sub: list[tuple[str, list[str], str]] = []
    if key == "table1":
        sub.append((f"{PAPER_REFERENCES[key]} next to the paper's means", [], "table1_vs_paper"))
        title = f"{PAPER_REFERENCES['table3_vs_paper']}: per seed, next to the paper"
        sub.append((title, [TABLE3_PAPER_NOTE, ""], "table3_vs_paper"))
        title = (
            f"{PAPER_REFERENCES['nico_vs_paper']}: accuracy per target domain, next to the paper"
        )
        sub.append((title, [NICO_PAPER_NOTE, ""], "nico_vs_paper"))
    if key == "table5":
        title = f"{PAPER_REFERENCES[key]} aggregated as the paper's rows, next to the paper"
        sub.append((title, [TABLE5_PAPER_NOTE, ""], "table5_vs_paper"))
    lines: list[str] = []
    if key == "table6":
        lines += [_markdown(results["selection_agreement"]), ""]
        title = (
            f"{PAPER_REFERENCES['selection_vs_paper']}'s counts on the SR-CMNIST scenarios, "
            "next to the paper"
        )
        sub.append((title, [], "selection_vs_paper"))
    for title, note, name in sub:
        if name in results and len(results[name]):
            lines += [f"### {title}", "", *note, _markdown(results[name]), ""]
    return lines


def _digest_lines(study: Study, digests: pd.DataFrame) -> list[str]:
    """The ``analysis.md`` section on the measures' code: digests, then mixed-version warnings."""
    lines = [
        "## Measures: code digests",
        "",
        "SHA-256 (16 hex digits) of the source of the module defining each measure "
        "(`oodeval.measures.measure_code_digest`).",
        "",
        _markdown(digests),
        "",
    ]
    notes = measure_version_notes(study, digests)
    return lines + [x for note in notes for x in (safe_text(f"Warning: {note}."), "")]


def _markdown_header(study: Study) -> list[str]:
    counts = study.counts()
    lines = [
        safe_text(f"# Study analysis: {study.config.get('name', 'study')}"),
        "",
        safe_text(
            f"Units: {counts['done']} done, {counts['failed']} failed, "
            + (f"{counts['damaged']} damaged (excluded), " if counts.get("damaged") else "")
            + f"{counts['pending']} pending "
            f"(of {counts['planned']}). Source: `{study.config.get('source')}`, steps "
            f"{study.config.get('steps')}, model `{study.config.get('model')}`, precision "
            f"{(study.config.get('trainer') or {}).get('precision', 'fp32')}."
        ),
        "",
    ]
    for note in study.integrity_notes():
        lines += [safe_text(f"**Warning:** {note}"), ""]
    lines += [x for note in study.code_notes() for x in (safe_text(f"Warning: {note}."), "")]
    if study.outside_note():
        lines += [safe_text(f"Note: {study.outside_note()}."), ""]
    failed = study.units[study.units["status"] == "failed"]
    if len(failed):
        lines += ["Failed units (left out of every analysis):", ""]
        lines += [safe_text(f"- {u.unit_key}: {u.failure}") for u in failed.itertuples(index=False)]
        lines.append("")
    return lines


def _markdown_sections(
    results: dict[str, pd.DataFrame],
) -> list[tuple[str, str, pd.DataFrame]]:
    """(key, title, table) of each section of `analysis_markdown`, in order."""
    t1 = results["table1"]
    short = {"worst_plus_gap": "W+G", "average": "AVG"}
    compared = [c[4:-5] for c in t1.columns if c.startswith("rho_") and c.endswith("_mean")]
    table1 = pd.DataFrame(
        {
            "scenario": t1["scenario"],
            "seeds": t1["n_seeds"],
            "algorithms": t1["n_algorithms"],
            **{
                f"{stat} {label}": plus_minus(t1[f"{stat}_{m}_mean"], t1[f"{stat}_{m}_std"])
                for stat in ("rho", "tau")
                for m, label in ((m, short.get(m) or measure_label(m)) for m in compared)
            },
        }
    )
    t6 = results["table6"]
    column = t6["seed"].map(lambda s: f"seed {s}" if s != meta.SEED_MEAN else "average")
    table6 = (
        t6.assign(column=column + ": " + t6["measure"])
        .pivot_table(
            index="scenario", columns="column", values="selected", aggfunc="first", sort=False
        )
        .reset_index()
    )
    f7 = results["figure7"]
    return [
        ("table1", "correlation with the ideal measure (mean ± std over seeds)", table1),
        (
            "table5",
            "worst only, gap only, worst+gap (mean over seeds)",
            _no_family(results["table5"]),
        ),
        ("table6", "selected algorithm per measure", table6),
        (
            "figure6",
            "selection degradation (mean ± std over seeds)",
            _no_family(results["figure6"]),
        ),
        (
            "figure7",
            "|ideal - measure| by Scale, normalised to the smallest Scale",
            f7[f7["algorithm"] == "(all)"].drop(columns=["algorithm"], errors="ignore"),
        ),
        ("figure1", "ERM vs the ideal-best algorithm", _no_family(results["figure1"])),
    ]


def _no_family(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=["family"], errors="ignore")
