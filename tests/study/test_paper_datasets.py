"""The paper tables of the image datasets beside a study's: Tables 3 and 4 of the worst+gap paper
(PACS-corrupted, VLCS-corrupted; per seed) and the NICO++ paper's Tables 2 (ResNet-50) and 5
(ResNet-18).

- the transcriptions, against the papers' markdown (parsed) and by hand, and against what the
  papers' text says of them (Section 5.3's counts; NICO++'s Avg. and Std recomputed from a row);
- `correlation_by_seed` against scipy, and the seed means it gives against Table 1's;
- `corrupted_vs_paper` and `nico_vs_paper` on hand-made frames with hand-computed values;
- end to end: a stored study of a PACS-corrupted and a NICO++ scenario through `analyze`,
  `write_analysis` and the HTML report's tables, and a study without datasets that gains nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oodeval.report.study_report import table_sections
from oodeval.study.analysis import (
    NICO_SPLITS,
    PAPER_NICO_TABLE2,
    PAPER_NICO_TABLE5,
    PAPER_TABLE3,
    PAPER_TABLE4,
    analyze,
    correlation_by_seed,
    correlation_with_ideal,
    corrupted_vs_paper,
    nico_vs_paper,
    scenario_meta,
    study_unit_measures,
    write_analysis,
)
from oodeval.study.store import ResultStore, UnitRecord, load_study
from tests.goldens.cases import quick_study
from tests.requires import SHARED, requires_path

PAPERS = SHARED / "papers"
SPLIT1, SPLIT2 = list(NICO_SPLITS)  # "G,Wa,R,A,I,Di", "S,G,Wa,R,I,O"
DOMAINS = ("grass", "water", "rock", "autumn", "indoor", "dim", "sand", "winter", "outdoor", "dark")


# --- the transcriptions -------------------------------------------------------------------------


def _paper_seed_tables(text: str) -> dict[tuple[str, str, int], tuple[float, ...]]:
    """Every row of the worst+gap paper's per-seed tables (3 and 4): (dataset, Envs, seed) ->
    the four values, the dataset and Envs cells carried down as the paper leaves them blank."""
    rows: dict[tuple[str, str, int], tuple[float, ...]] = {}
    lines = text.splitlines()
    starts = [k for k, line in enumerate(lines) if line.startswith("<i>Dataset</i>\t<i>Envs</i>")]
    assert len(starts) == 2, "the paper has two per-seed tables"
    for start in starts:
        dataset = envs = ""
        for line in lines[start + 2 :]:
            if not line.strip():
                break
            cells = [re.sub(r"</?b>", "", c).strip() for c in line.split("\t")]
            dataset, envs = cells[0] or dataset, cells[1] or envs
            key = (dataset, envs, int(cells[2]))
            assert key not in rows
            rows[key] = tuple(float(c) for c in cells[3:7])
    return rows


def test_tables_3_and_4_are_the_papers_printed_values() -> None:
    path = requires_path(PAPERS / "worst-plus-gap.md", "the worst+gap paper")
    printed = _paper_seed_tables(path.read_text(encoding="utf-8"))
    assert len(printed) == 18
    assert {**PAPER_TABLE3, **PAPER_TABLE4} == printed
    assert {k[:2] for k in PAPER_TABLE4} == {
        ("PACS-corrupted", "1-0-1-1"),
        ("PACS-corrupted", "2-0-2-2"),
    }


def test_tables_3_and_4_hand_copied_rows() -> None:
    # read off the paper by eye: (rho W+G, rho AVG, tau W+G, tau AVG)
    assert PAPER_TABLE3[("PACS-corrupted", "1-1-1-1", 0)] == (0.420, 0.335, 0.385, 0.256)
    assert PAPER_TABLE3[("VLCS-corrupted", "1-1-1-1", 1)] == (0.478, 0.456, 0.359, 0.385)
    assert PAPER_TABLE3[("VLCS-corrupted", "2-2-2-2", 2)] == (0.454, 0.427, 0.338, 0.323)
    assert PAPER_TABLE4[("PACS-corrupted", "1-0-1-1", 1)] == (0.265, 0.121, 0.179, 0.077)
    assert PAPER_TABLE4[("PACS-corrupted", "2-0-2-2", 2)] == (0.515, 0.447, 0.458, 0.301)


def test_table_3_says_what_section_5_3_says_of_it() -> None:
    # "worst+gap ... higher Spearman's rho across all 12 different seeds. For Kendall's tau ...
    # higher for 10 seeds, the same as the average measure for 1 seed, and lower for 1 seed";
    # Table 4: "consistently achieves a higher correlation for all experiment cases"
    assert len(PAPER_TABLE3) == 12 and len(PAPER_TABLE4) == 6
    assert all(v[0] > v[1] for v in PAPER_TABLE3.values())
    taus = [np.sign(v[2] - v[3]) for v in PAPER_TABLE3.values()]
    assert (taus.count(1), taus.count(0), taus.count(-1)) == (10, 1, 1)
    assert all(v[0] > v[1] and v[2] > v[3] for v in PAPER_TABLE4.values())


#: The DomainBed names of the paper's rows, by the name the paper prints (table -> name -> ours).
_NICO_ROWS = {
    "Table 2": {"Deepall": "ERM", "RSC": "RSC", "SagNet": "SagNet", "MLDG": "MLDG", "MMD": "MMD"}
    | {"CORAL": "CORAL", "GroupDRG": "GroupDRO", "IRM": "IRM", "Oracle": "Oracle"},
    "Table 5": {"Deepall": "ERM", "SagNet": "SagNet", "MLDG": "MLDG", "MMD": "MMD"}
    | {"CORAL": "CORAL", "GroupDRO": "GroupDRO", "IRM": "IRM", "Oracle": "Oracle"}
    | {"Oracle*": "Oracle*"},
}


def _nico_paper_table(text: str, number: int) -> dict[tuple[str, str], tuple[float, ...]]:
    """The rows of the NICO++ paper's Table `number` of the algorithms oodeval has, as
    {(split, DomainBed name): 7 values} (each split's 4 domains, Ova., Avg., Std)."""
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith(f"Table {number}: Results"))
    header = next(k for k in range(start, len(lines)) if lines[k].startswith("| | S | Wi | O | Da"))
    names = _NICO_ROWS[f"Table {number}"]
    rows = {}
    for line in lines[header + 1 :]:
        if not line.startswith("| "):
            break
        cells = [re.sub(r"</?u>|</?b>", "", c).strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].split(" (")[0]  # "CORAL (Sun & Saenko, 2016)"
        if name in names:
            values = [float(c) for c in cells[1:]]
            rows[(SPLIT1, names[name])] = tuple(values[:7])
            rows[(SPLIT2, names[name])] = tuple(values[7:])
    return rows


def test_nico_tables_2_and_5_are_the_papers_printed_rows() -> None:
    text = requires_path(PAPERS / "nico-plus-plus.md", "the NICO++ paper").read_text("utf-8")
    assert _nico_paper_table(text, 2) == PAPER_NICO_TABLE2
    assert _nico_paper_table(text, 5) == PAPER_NICO_TABLE5
    assert "RSC" not in {k[1] for k in PAPER_NICO_TABLE5}  # Table 5 has no RSC row


def test_nico_hand_copied_rows_and_splits() -> None:
    assert PAPER_NICO_TABLE2[(SPLIT1, "ERM")] == (80.95, 79.96, 73.30, 76.27, 77.50, 77.62, 3.05)
    assert PAPER_NICO_TABLE2[(SPLIT2, "GroupDRO")][4:] == (79.17, 79.05, 1.55)  # "GroupDRG"
    assert PAPER_NICO_TABLE5[(SPLIT2, "CORAL")] == (75.84, 73.37, 72.12, 71.04, 73.23, 73.09, 1.79)
    assert PAPER_NICO_TABLE5[(SPLIT1, "IRM")][:4] == (68.46, 69.26, 59.45, 64.61)
    assert NICO_SPLITS[SPLIT1] == (
        ("grass", "water", "rock", "autumn", "indoor", "dim"),
        ("sand", "winter", "outdoor", "dark"),
    )
    assert NICO_SPLITS[SPLIT2][1] == ("autumn", "winter", "dark", "dim")
    for train, test in NICO_SPLITS.values():
        assert sorted(train + test) == sorted(DOMAINS)


def test_nico_printed_std_is_the_population_std_of_the_printed_accuracies() -> None:
    # Each printed value is rounded to 0.01, so a recomputed Avg. or Std is within 0.005 (the
    # mean, and the ddof=0 std, move at most as far as the largest input) plus the printed
    # value's own 0.005 of the printed one.
    tolerance = 0.01 + 1e-9
    for row in [*PAPER_NICO_TABLE2.values(), *PAPER_NICO_TABLE5.values()]:
        accuracies = np.array(row[:4], dtype=np.float64)
        assert abs(accuracies.mean() - row[5]) <= tolerance
        assert abs(accuracies.std(ddof=0) - row[6]) <= tolerance
        assert abs(accuracies.std(ddof=1) - row[6]) > 0.1  # not Eq. 5's 1 / (K - 1)


# --- Tables 3 and 4: the per-seed correlations ---------------------------------------------------


def _frame(seed: int = 3) -> pd.DataFrame:
    """Units of two scenarios x 3 seeds x 6 algorithms with random measures (ties-free)."""
    rng = np.random.default_rng(seed)
    rows = []
    for scenario, dataset, pattern in (
        ("pacs/1-1-1-1", "PACS-corrupted", "1-1-1-1"),
        ("vlcs/2-2-2-2", "VLCS-corrupted", "2-2-2-2"),
    ):
        for seed_ in (0, 1, 2):
            for algorithm in "ABCDEF":
                rows.append(
                    {
                        "scenario": scenario,
                        "family": "corrupted",
                        "ratio": "",
                        "scale": pd.NA,
                        "dataset": dataset,
                        "pattern": pattern,
                        "algorithm": algorithm,
                        "seed": seed_,
                        "n_given": 4,
                        "ideal": rng.uniform(0.1, 0.9),
                        "worst_plus_gap": rng.uniform(0.1, 0.9),
                        "average": rng.uniform(0.1, 0.9),
                    }
                )
    frame = pd.DataFrame(rows)
    frame["scale"] = frame["scale"].astype("Int64")
    return frame


def test_correlation_by_seed_is_scipy_per_seed() -> None:
    frame = _frame()
    got = correlation_by_seed(frame)
    assert len(got) == 6
    assert list(got.columns[:6]) == ["scenario", "family", "ratio", "scale", "dataset", "pattern"]
    for row in got.itertuples(index=False):
        units = frame[(frame["scenario"] == row.scenario) & (frame["seed"] == row.seed)]
        assert row.n_algorithms == 6 and row.dataset == units["dataset"].iloc[0]
        for m in ("worst_plus_gap", "average"):
            rho = stats.spearmanr(units[m], units["ideal"]).statistic
            tau = stats.kendalltau(units[m], units["ideal"]).statistic
            assert getattr(row, f"rho_{m}") == pytest.approx(rho, abs=1e-12)
            assert getattr(row, f"tau_{m}") == pytest.approx(tau, abs=1e-12)


def test_correlation_by_seed_averages_to_table_1() -> None:
    frame = _frame(seed=11)
    by_seed = correlation_by_seed(frame).groupby("scenario")
    table1 = correlation_with_ideal(frame).set_index("scenario")
    for stat in ("rho", "tau"):
        for m in ("worst_plus_gap", "average"):
            means = by_seed[f"{stat}_{m}"].mean()
            stds = by_seed[f"{stat}_{m}"].std(ddof=1)
            for scenario in means.index:
                mean = table1.loc[scenario, f"{stat}_{m}_mean"]
                std = table1.loc[scenario, f"{stat}_{m}_std"]
                assert means[scenario] == pytest.approx(mean, abs=1e-12)
                assert stds[scenario] == pytest.approx(std, abs=1e-12)


def test_correlation_by_seed_without_dataset_columns_keeps_table_1s_meta() -> None:
    got = correlation_by_seed(_frame().drop(columns=["dataset", "pattern"]))
    assert "dataset" not in got.columns and list(got.columns[:5]) == [
        "scenario",
        "family",
        "ratio",
        "scale",
        "seed",
    ]
    assert corrupted_vs_paper(got).empty  # nothing says which dataset it is


def _by_seed(rows: list[tuple[str, object, object, int, float]]) -> pd.DataFrame:
    records = []
    for scenario, dataset, pattern, seed, value in rows:
        record = {"scenario": scenario, "dataset": dataset, "pattern": pattern, "seed": seed}
        record["n_algorithms"] = 8
        for k, column in enumerate(
            ("rho_worst_plus_gap", "rho_average", "tau_worst_plus_gap", "tau_average")
        ):
            record[column] = value + k / 10
        records.append(record)
    return pd.DataFrame(records)


def test_corrupted_vs_paper_sets_each_seed_beside_its_row_of_table_3_or_4() -> None:
    by_seed = _by_seed(
        [
            ("pacs/1-1-1-1", "PACS-corrupted", "1-1-1-1", 0, 0.1),
            ("vlcs/2-2-2-2", "VLCS-corrupted", "2-2-2-2", 2, 0.2),
            ("pacs/1-0-1-1", "PACS-corrupted", "1-0-1-1", 1, 0.3),
            ("pacs/1-1-1-1", "PACS-corrupted", "1-1-1-1", 7, 0.4),  # a seed the paper lacks
            ("vlcs/1-0-1-1", "VLCS-corrupted", "1-0-1-1", 0, 0.5),  # a pattern it lacks
            ("sr-cmnist/ratio=3:1/scale=1", pd.NA, pd.NA, 0, 0.6),  # no dataset: not here
        ]
    )
    got = corrupted_vs_paper(by_seed)
    assert got["scenario"].tolist()[:3] == ["pacs/1-1-1-1", "vlcs/2-2-2-2", "pacs/1-0-1-1"]
    assert len(got) == 5
    assert got["paper_table"].tolist() == ["Table 3", "Table 3", "Table 4", "Table 3", ""]
    paper = ["paper_rho_worst_plus_gap", "paper_rho_average"]
    paper += ["paper_tau_worst_plus_gap", "paper_tau_average"]
    assert tuple(got.loc[0, paper]) == PAPER_TABLE3[("PACS-corrupted", "1-1-1-1", 0)]
    assert tuple(got.loc[1, paper]) == (0.454, 0.427, 0.338, 0.323)  # VLCS 2-2-2-2, seed 2
    assert tuple(got.loc[2, paper]) == (0.265, 0.121, 0.179, 0.077)  # Table 4, seed 1
    assert got.loc[3:4, paper].isna().all().all()
    # ours stay ours: the tuple order (rho W+G, rho AVG, tau W+G, tau AVG) lands column by column
    assert got.loc[2, "rho_average"] == pytest.approx(0.4)
    assert got.loc[2, "tau_average"] == pytest.approx(0.6)


# --- NICO++: accuracies per target domain ------------------------------------------------------


def _nico_errors(
    given: tuple[str, ...], scenario: str, algorithms: tuple[str, ...], seed: int = 5
) -> pd.DataFrame:
    """Long-form errors of a NICO++ scenario: a LOO row per given domain, a full-model row per
    domain of E_all (the 10 common domains), seeds 0 and 1, counts that differ by domain."""
    rng = np.random.default_rng(seed)
    rows = []
    for algorithm in algorithms:
        for seed_ in (0, 1):
            for domain in given:
                rows.append((scenario, seed_, algorithm, "loo", domain, rng.uniform(0.1, 0.4), 50))
            for k, domain in enumerate(DOMAINS):
                error = rng.uniform(0.1, 0.4)
                rows.append((scenario, seed_, algorithm, "all", domain, error, 100 + 37 * k))
    columns = ["scenario", "seed", "algorithm", "split", "environment", "error", "count"]
    return pd.DataFrame(rows, columns=columns)


def _by_hand(errors: pd.DataFrame, algorithm: str, targets: tuple[str, ...]) -> dict[str, float]:
    """acc_k per target (seed mean), Ova. (per seed, count-weighted, then seed mean), Avg. and
    the ddof=0 Std of the seed-mean accuracies, with loops."""
    rows = errors[(errors["algorithm"] == algorithm) & (errors["split"] == "all")]
    out: dict[str, float] = {}
    for t in targets:
        out[t] = float(np.mean([100 * (1 - e) for e in rows[rows.environment == t]["error"]]))
    ovas = []
    for seed in (0, 1):
        mine = rows[(rows.seed == seed) & rows.environment.isin(targets)]
        hits = sum(n * 100 * (1 - e) for n, e in zip(mine["count"], mine["error"], strict=True))
        ovas.append(hits / mine["count"].sum())
    accuracies = [out[t] for t in targets]
    mean = sum(accuracies) / len(accuracies)
    out["ova"] = float(np.mean(ovas))
    out["avg"] = mean
    out["std"] = (sum((a - mean) ** 2 for a in accuracies) / len(accuracies)) ** 0.5
    return out


def _scenarios(*names: str, dataset: object = "NICO++") -> pd.DataFrame:
    return pd.DataFrame({"scenario": list(names), "dataset": [dataset] * len(names)})


def test_nico_vs_paper_is_the_hand_computation_beside_table_2() -> None:
    train, test = NICO_SPLITS[SPLIT1]
    errors = _nico_errors(train, "nico/one", ("ERM", "GroupDRO", "VREx"))
    got = nico_vs_paper(errors, _scenarios("nico/one"), "resnet50").set_index("algorithm")
    assert list(got.index) == ["ERM", "GroupDRO", "VREx"]
    accuracy_columns = [c for c in got.columns if c.startswith("acc_")]
    assert accuracy_columns == [f"acc_{t}" for t in test]  # the paper's column order
    for algorithm in got.index:
        want = _by_hand(errors, algorithm, test)
        for t in test:
            assert got.loc[algorithm, f"acc_{t}"] == pytest.approx(want[t], abs=1e-9)
        for key in ("ova", "avg", "std"):
            assert got.loc[algorithm, key] == pytest.approx(want[key], abs=1e-9)
    assert got["split"].tolist() == [SPLIT1] * 3 and got["n_seeds"].tolist() == [2, 2, 2]
    assert got["paper_table"].tolist() == ["Table 2"] * 3
    assert got.loc["ERM", "paper_algorithm"] == "Deepall"
    assert got.loc["GroupDRO", "paper_algorithm"] == "GroupDRG"
    printed = PAPER_NICO_TABLE2[(SPLIT1, "ERM")]
    assert got.loc["ERM", "paper_acc_outdoor"] == printed[2] == 73.30
    assert got.loc["ERM", ["paper_ova", "paper_avg", "paper_std"]].tolist() == [77.50, 77.62, 3.05]
    assert got.loc["VREx", ["paper_acc_sand", "paper_ova"]].isna().all()  # no VREx row
    assert got.loc["VREx", "acc_sand"] == pytest.approx(_by_hand(errors, "VREx", test)["sand"])
    # Ova. weighs the domains by their counts, Avg. does not: they differ here
    assert got.loc["ERM", "ova"] != pytest.approx(got.loc["ERM", "avg"], abs=1e-6)


def test_nico_vs_paper_follows_the_model_and_the_split() -> None:
    train, test = NICO_SPLITS[SPLIT2]
    errors = _nico_errors(tuple(d.capitalize() for d in train), "nico/two", ("ERM", "RSC"))
    errors["environment"] = errors["environment"].str.capitalize()  # names compared sans case
    resnet18 = nico_vs_paper(errors, _scenarios("nico/two"), "resnet18").set_index("algorithm")
    assert resnet18["paper_table"].tolist() == ["Table 5", "Table 5"]
    assert resnet18.loc["ERM", "paper_acc_Autumn"] == PAPER_NICO_TABLE5[(SPLIT2, "ERM")][0]
    assert resnet18.loc["ERM", "paper_std"] == 2.14
    assert np.isnan(resnet18.loc["RSC", "paper_ova"])  # Table 5 has no RSC row
    other = nico_vs_paper(errors, _scenarios("nico/two"), "mlp")
    assert other["paper_table"].tolist() == ["", ""] and other["split"].tolist() == [SPLIT2] * 2
    assert other.filter(like="paper_acc").isna().all().all()
    assert other["ova"].tolist() == pytest.approx(resnet18["ova"].tolist(), abs=1e-12)


def test_nico_vs_paper_other_splits_datasets_and_missing_counts() -> None:
    odd = _nico_errors(("grass", "water", "rock", "autumn", "indoor"), "nico/odd", ("ERM",))
    table1 = _nico_errors(NICO_SPLITS[SPLIT1][0], "nico/one", ("ERM",))
    errors = pd.concat([odd, table1], ignore_index=True)
    scenarios = pd.concat(
        [_scenarios("nico/odd", "nico/one"), _scenarios("pacs", dataset="PACS-corrupted")]
    )
    got = nico_vs_paper(errors, scenarios, "resnet50")
    assert got["scenario"].tolist() == ["nico/odd", "nico/one"]
    assert got["split"].tolist() == ["", SPLIT1]
    # the odd split's five targets come first, in E_all's order; the columns are their union
    odd_targets = ["dim", "sand", "winter", "outdoor", "dark"]
    assert [c for c in got.columns if c.startswith("acc_")] == [f"acc_{t}" for t in odd_targets]
    assert np.isnan(got.loc[1, "acc_dim"])  # not a target of the paper's split
    assert got.loc[0, "avg"] == pytest.approx(_by_hand(odd, "ERM", tuple(odd_targets))["avg"])
    without = nico_vs_paper(errors.drop(columns="count"), scenarios, "resnet50")
    assert without["ova"].isna().all() and not without["avg"].isna().any()
    empty = nico_vs_paper(errors, _scenarios("nico/one", dataset=pd.NA), "resnet50")
    assert empty.empty and {"paper_ova", "paper_std"} <= set(empty.columns)


# --- end to end: a stored study ----------------------------------------------------------------

PACS_ENVS = ["art+fog", "cartoon+snow", "photo+blur", "sketch+noise"]
PACS_ALL = [*PACS_ENVS, "art", "cartoon", "photo", "sketch"]
ALGORITHMS = ["CORAL", "ERM", "GroupDRO", "IRM", "MMD"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    directory = tmp_path_factory.mktemp("datasets")
    rng = np.random.default_rng(17)
    train, _test = NICO_SPLITS[SPLIT1]
    scenarios = {
        "corrupted/PACS-corrupted/1-1-1-1": (
            "corrupted",
            {"dataset": "PACS-corrupted", "pattern": "1-1-1-1", "severity": 3},
            PACS_ENVS,
            PACS_ALL,
        ),
        "domains/NICO++/split1": (
            "domains",
            {"dataset": "NICO++", "given": list(train)},
            train,
            DOMAINS,
        ),
        "toy/ratio=3:1/scale=1": (
            "toy",
            {"ratio": "3:1", "scale": 1},
            ["g0", "g1", "g2"],
            ["a0", "a1"],
        ),
    }
    config = {
        "name": "datasets",
        "algorithms": ALGORITHMS,
        "seeds": [0, 1],
        "scenarios": [{"family": f, **p} for f, p, _g, _a in scenarios.values()],
        "measures": ["average", "worst_plus_gap", "worst_only", "gap_only"],
        "source": "images",
        "steps": 1,
        "model": "resnet50",
    }
    stored_rows = {}
    with ResultStore(directory, create=True) as store:
        store.bind_config(config)
        for scenario, (family, params, given, every) in scenarios.items():
            for algorithm in ALGORITHMS:
                for seed in (0, 1):
                    rows = [(g, g, float(rng.uniform(0.05, 0.5)), 40) for g in given]
                    rows += [
                        ("all", e, float(rng.uniform(0.05, 0.9)), 60 + 11 * k)
                        for k, e in enumerate(every)
                    ]
                    stored_rows[(scenario, algorithm, seed)] = rows
                    store.record_unit(
                        UnitRecord(
                            scenario,
                            family,
                            params,
                            algorithm,
                            seed,
                            {},
                            1,
                            "resnet50",
                            "done",
                            rows=rows,
                        )
                    )
    return directory, stored_rows


def test_scenario_meta_reads_dataset_and_pattern(stored: tuple[Path, dict]) -> None:
    study = load_study(stored[0])
    meta = scenario_meta(study).set_index("scenario")
    assert meta.loc["corrupted/PACS-corrupted/1-1-1-1", ["dataset", "pattern"]].tolist() == [
        "PACS-corrupted",
        "1-1-1-1",
    ]
    assert meta.loc["domains/NICO++/split1", "dataset"] == "NICO++"
    assert pd.isna(meta.loc["domains/NICO++/split1", "pattern"])
    assert pd.isna(meta.loc["toy/ratio=3:1/scale=1", "dataset"])
    # the other tables keep their columns: no dataset meta in the units
    assert "dataset" not in study_unit_measures(study).columns


def test_analyze_sets_a_stored_study_beside_tables_3_and_nico(
    stored: tuple[Path, dict], tmp_path: Path
) -> None:
    directory, rows = stored
    results = analyze(directory)
    table3 = results["table3_vs_paper"]
    assert table3["scenario"].unique().tolist() == ["corrupted/PACS-corrupted/1-1-1-1"]
    assert table3["seed"].tolist() == [0, 1] and table3["paper_table"].tolist() == ["Table 3"] * 2
    for row in table3.itertuples(index=False):
        units = [rows[(row.scenario, a, row.seed)] for a in ALGORITHMS]
        loo = [[r[2] for r in u if r[0] != "all"] for u in units]
        ideal = [max(r[2] for r in u if r[0] == "all") for u in units]
        wg = [max(e) + (max(e) - min(e)) / (len(e) - 2) for e in loo]  # Eq. 6
        assert row.rho_worst_plus_gap == pytest.approx(stats.spearmanr(wg, ideal).statistic)
        assert row.tau_average == pytest.approx(
            stats.kendalltau([np.mean(e) for e in loo], ideal).statistic
        )
        want = PAPER_TABLE3[("PACS-corrupted", "1-1-1-1", row.seed)]
        assert row.paper_rho_worst_plus_gap == want[0] and row.paper_tau_average == want[3]

    nico = results["nico_vs_paper"].set_index("algorithm")
    assert list(nico.index) == ALGORITHMS and set(nico["paper_table"]) == {"Table 2"}
    targets = NICO_SPLITS[SPLIT1][1]
    for algorithm in ALGORITHMS:
        full = [
            (seed, env, error, count)
            for seed in (0, 1)
            for fold, env, error, count in rows[("domains/NICO++/split1", algorithm, seed)]
            if fold == "all" and env in targets
        ]
        sand = np.mean([100 * (1 - e) for _s, env, e, _n in full if env == "sand"])
        assert nico.loc[algorithm, "acc_sand"] == pytest.approx(sand, abs=1e-9)
        ovas = [
            sum(n * 100 * (1 - e) for s, _env, e, n in full if s == seed)
            / sum(n for s, _env, _e, n in full if s == seed)
            for seed in (0, 1)
        ]
        assert nico.loc[algorithm, "ova"] == pytest.approx(np.mean(ovas), abs=1e-9)
    assert nico.loc["IRM", "paper_ova"] == PAPER_NICO_TABLE2[(SPLIT1, "IRM")][4]

    written = write_analysis(directory, out_dir=tmp_path / "analysis")
    for name in ("table3_vs_paper", "nico_vs_paper"):
        csv = pd.read_csv(written[name])
        assert len(csv) == len(results[name])
    markdown = written["markdown"].read_text(encoding="utf-8")
    assert "### Tables 3 and 4: per seed, next to the paper" in markdown
    assert "### NICO++ paper, Tables 2 and 5: accuracy per target domain" in markdown
    titles = [t.title for t in table_sections(results).tables]
    assert "Tables 3 and 4: each seed beside the paper's" in titles
    assert any(
        t.startswith("NICO++ paper, Tables 2 and 5: domains/NICO++/split1 (Table 2") for t in titles
    )
    nico_table = next(t for t in table_sections(results).tables if t.title.startswith("NICO++"))
    assert "acc sand: ours / paper" in nico_table.frame.columns


def test_a_study_without_datasets_has_no_such_tables(tmp_path: Path) -> None:
    results = analyze(quick_study(tmp_path))
    assert "table3_vs_paper" not in results and "nico_vs_paper" not in results
    titles = [t.title for t in table_sections(results).tables]
    assert not any(t.startswith(("Tables 3 and 4", "NICO++")) for t in titles)
