"""The verdict: per-scenario rho with the ideal measure, paired bootstrap intervals over
algorithms, and the sentence, against brute force (scipy.stats.spearmanr in plain loops) and
hand-made tables."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from oodeval.errors import OodevalError
from oodeval.measures.meta import (
    VERDICTS,
    correlation_summary,
    correlation_verdicts,
    ideal_correlations,
    paired_spearman_ci,
    verdict_sentence,
)


def _scores(rng, n_seeds, n_algorithms, *, noise=(0.05, 0.3), missing=0.0):
    """Ideal scores and two measures of decreasing fidelity; `missing` of the cells set to NaN."""
    ideal = rng.uniform(0.2, 0.8, size=(n_seeds, n_algorithms))
    first = ideal + rng.normal(0, noise[0], size=ideal.shape)
    second = ideal + rng.normal(0, noise[1], size=ideal.shape)
    if missing:
        holes = rng.random(ideal.shape) < missing
        holes[:, :3] = False  # every seed keeps three algorithms
        for a in (ideal, first, second):
            a[holes] = np.nan
    return first, second, ideal


def _spearman(x, y):
    keep = ~np.isnan(y)
    x, y = np.round(x[keep], 12), np.round(y[keep], 12)
    if keep.sum() < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan
    return stats.spearmanr(x, y).statistic


def _brute_force(first, second, ideal, *, n_resamples, confidence, seed):
    """The documented bootstrap, one resample and one seed at a time with scipy."""
    n = ideal.shape[1]
    draws = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    rho_f, rho_s = [], []
    for idx in draws:
        f = [_spearman(first[k, idx], ideal[k, idx]) for k in range(ideal.shape[0])]
        s = [_spearman(second[k, idx], ideal[k, idx]) for k in range(ideal.shape[0])]
        rho_f.append(np.mean(f))  # NaN when any seed's rho is undefined
        rho_s.append(np.mean(s))
    rho_f, rho_s = np.array(rho_f), np.array(rho_s)
    valid = np.isfinite(rho_f) & np.isfinite(rho_s)
    q = [(1 - confidence) / 2, (1 + confidence) / 2]
    return {
        "first_ci": tuple(np.quantile(rho_f[valid], q)),
        "second_ci": tuple(np.quantile(rho_s[valid], q)),
        "difference_ci": tuple(np.quantile((rho_f - rho_s)[valid], q)),
        "n_valid": int(valid.sum()),
    }


@pytest.mark.parametrize(
    ("n_seeds", "n_algorithms", "missing"), [(1, 6, 0.0), (3, 9, 0.0), (3, 12, 0.25)]
)
def test_point_estimates_are_seed_means_of_scipys_spearman(n_seeds, n_algorithms, missing):
    first, second, ideal = _scores(
        np.random.default_rng(n_algorithms), n_seeds, n_algorithms, missing=missing
    )
    out = paired_spearman_ci(first, second, ideal, n_resamples=50)
    want_f = np.mean([_spearman(first[k], ideal[k]) for k in range(n_seeds)])
    want_s = np.mean([_spearman(second[k], ideal[k]) for k in range(n_seeds)])
    assert out["first"] == pytest.approx(want_f, abs=1e-12)
    assert out["second"] == pytest.approx(want_s, abs=1e-12)
    assert out["difference"] == pytest.approx(want_f - want_s, abs=1e-12)


@pytest.mark.parametrize(
    ("n_seeds", "n_algorithms", "missing"), [(1, 5, 0.0), (2, 8, 0.0), (3, 10, 0.3)]
)
def test_bootstrap_intervals_equal_a_brute_force_loop(n_seeds, n_algorithms, missing):
    rng = np.random.default_rng(100 + n_algorithms)
    first, second, ideal = _scores(rng, n_seeds, n_algorithms, missing=missing)
    out = paired_spearman_ci(first, second, ideal, n_resamples=300, confidence=0.9, seed=7)
    want = _brute_force(first, second, ideal, n_resamples=300, confidence=0.9, seed=7)
    assert out["n_valid"] == want["n_valid"] and out["n_resamples"] == 300
    for key in ("first_ci", "second_ci", "difference_ci"):
        assert out[key] == pytest.approx(want[key], abs=1e-12)


def test_same_seed_same_intervals_and_another_seed_other_intervals():
    first, second, ideal = _scores(np.random.default_rng(3), 2, 10)
    a = paired_spearman_ci(first, second, ideal, n_resamples=400, seed=11)
    b = paired_spearman_ci(first, second, ideal, n_resamples=400, seed=11)
    c = paired_spearman_ci(first, second, ideal, n_resamples=400, seed=12)
    assert a == b
    assert a["difference_ci"] != c["difference_ci"]


@pytest.mark.parametrize("trial", range(12))
def test_intervals_contain_the_point_estimate_in_typical_cases(trial):
    """12 algorithms, 3 seeds, measures that track the ideal measure with noise: the percentile
    interval of a smooth statistic brackets the estimate (not a theorem, a typical case)."""
    first, second, ideal = _scores(np.random.default_rng(trial), 3, 12)
    out = paired_spearman_ci(first, second, ideal, n_resamples=1000, seed=trial)
    for key in ("first", "second", "difference"):
        low, high = out[f"{key}_ci"]
        assert low <= out[key] <= high
    assert out["n_valid"] == 1000


def test_the_difference_is_paired():
    """Identical measures differ by exactly 0 in every resample; an unpaired bootstrap would not."""
    _, second, ideal = _scores(np.random.default_rng(5), 2, 9)
    out = paired_spearman_ci(second, second.copy(), ideal, n_resamples=200)
    assert out["difference"] == 0.0 and out["difference_ci"] == (0.0, 0.0)
    assert out["first_ci"] == out["second_ci"] and out["first_ci"][0] < out["first_ci"][1]


def test_bad_inputs_are_refused_with_a_reason():
    ideal = np.array([[0.1, 0.2, 0.3], [0.2, np.nan, 0.4]])
    with pytest.raises(OodevalError, match="same places"):
        paired_spearman_ci(np.nan_to_num(ideal), ideal, ideal)
    with pytest.raises(OodevalError, match=">= 2 algorithms in every seed"):
        paired_spearman_ci([[1, 2], [1, np.nan]], [[1, 2], [1, np.nan]], [[1, 2], [1, np.nan]])
    with pytest.raises(OodevalError, match="differ in shape"):
        paired_spearman_ci([1, 2, 3], [1, 2, 3], [1, 2, 3, 4])
    with pytest.raises(OodevalError, match="seed must be an integer"):
        paired_spearman_ci([1, 2, 3], [1, 2, 3], [1, 2, 3], seed=1.5)


# ----------------------------------------------------------------------------- per scenario


def _units(rng, scenarios, seeds, algorithms, *, drop=()):
    rows = []
    for s in scenarios:
        for seed in seeds:
            for k in range(algorithms):
                if (s, seed, k) in drop:
                    continue
                ideal = rng.uniform(0.2, 0.8)
                rows.append(
                    {
                        "scenario": s,
                        "seed": seed,
                        "algorithm": f"A{k}",
                        "ideal": ideal,
                        "worst_plus_gap": ideal + rng.normal(0, 0.05),
                        "average": ideal + rng.normal(0, 0.4),
                    }
                )
    return pd.DataFrame(rows)


def test_verdicts_rho_equals_table1s_seed_mean_and_a_brute_force_per_scenario():
    units = _units(np.random.default_rng(0), ["s1", "s2", "s3"], [0, 1, 2], 8)
    verdicts = pd.DataFrame(correlation_verdicts(units, n_resamples=200))
    table1 = pd.DataFrame(
        correlation_summary(ideal_correlations(units, ["worst_plus_gap", "average"]))
    )
    for row in verdicts.itertuples():
        mine = units[units.scenario == row.scenario]
        for m in ("worst_plus_gap", "average"):
            brute = np.mean(
                [stats.spearmanr(g[m], g["ideal"]).statistic for _, g in mine.groupby("seed")]
            )
            t1 = table1[(table1.scenario == row.scenario) & (table1.measure == m)]
            assert getattr(row, f"rho_{m}") == pytest.approx(brute, abs=1e-12)
            assert getattr(row, f"rho_{m}") == pytest.approx(t1.spearman_mean.item(), abs=1e-12)
        assert row.difference == pytest.approx(row.rho_worst_plus_gap - row.rho_average)
        assert (row.n_seeds, row.n_seeds_left_out, row.n_algorithms) == (3, 0, 8)
        assert row.verdict in VERDICTS and row.reason == ""


def test_verdict_labels_follow_the_sign_and_the_interval():
    ideal = np.linspace(0.1, 0.9, 10)
    rng = np.random.default_rng(1)
    cases = {
        "clear": (ideal, ideal[::-1]),  # rho 1 against -1
        "tie": (ideal + 1, ideal * 2),  # both order as the ideal measure
        "behind": (ideal[::-1], ideal),
        "noisy": (ideal + rng.normal(0, 0.3, 10), ideal + rng.normal(0, 0.31, 10)),
    }
    rows = [
        {
            "scenario": name,
            "seed": 0,
            "algorithm": f"A{k}",
            "ideal": ideal[k],
            "worst_plus_gap": wg[k],
            "average": avg[k],
        }
        for name, (wg, avg) in cases.items()
        for k in range(10)
    ]
    v = pd.DataFrame(correlation_verdicts(pd.DataFrame(rows), n_resamples=500)).set_index(
        "scenario"
    )
    assert v.loc["clear", "verdict"] == "clearly ahead"
    assert v.loc["tie", "verdict"] == "tied"
    assert v.loc["behind", "verdict"] == "clearly behind"
    noisy = v.loc["noisy"]
    sign = "ahead" if noisy.difference > 0 else "behind"
    clear = noisy.difference_low > 0 or noisy.difference_high < 0
    assert noisy.verdict == (f"clearly {sign}" if clear else f"{sign}, not clearly")


def test_undefined_scenarios_say_why_and_thin_seeds_are_left_out():
    rng = np.random.default_rng(2)
    units = _units(
        rng,
        ["few", "thin", "flat"],
        [0, 1],
        6,
        drop={("few", s, k) for s in (0, 1) for k in range(2, 6)}
        | {("thin", 1, k) for k in range(1, 6)},
    )
    units.loc[(units.scenario == "flat") & (units.seed == 1), "ideal"] = 0.5
    v = pd.DataFrame(correlation_verdicts(units, n_resamples=100)).set_index("scenario")
    assert v.loc["few", "verdict"] == "undefined"
    assert v.loc["few", "reason"] == "fewer than 3 algorithms in every seed"
    assert np.isnan(v.loc["few", "rho_worst_plus_gap"]) and v.loc["few", "n_algorithms"] == 2
    assert v.loc["flat", "verdict"] == "undefined"
    assert "ideal measure is equal for every algorithm" in v.loc["flat", "reason"]
    thin = v.loc["thin"]  # seed 1 has one algorithm: left out, seed 0 decides
    assert (thin.n_seeds, thin.n_seeds_left_out, thin.n_algorithms) == (1, 1, 6)
    seed0 = units[(units.scenario == "thin") & (units.seed == 0)]
    rho = stats.spearmanr(seed0.worst_plus_gap, seed0.ideal).statistic
    assert thin.rho_worst_plus_gap == pytest.approx(rho, abs=1e-12)


def test_a_repeated_unit_is_refused():
    units = _units(np.random.default_rng(4), ["s"], [0], 4)
    with pytest.raises(OodevalError, match="two rows for one"):
        correlation_verdicts(pd.concat([units, units.iloc[:1]]), n_resamples=10)


# ----------------------------------------------------------------------------- the sentence

_INTERVAL = "the 95% bootstrap interval of the difference in Spearman's rho"
_RULE = "well: mean rho >= 0.5 with its 95% interval above 0"


def _table(verdicts, reasons=None, *, rho=None):
    """A verdict table by hand: `rho` maps a measure to (rho, low, high) per row (default: a
    worst+gap that tracks the ideal well, 0.8 [0.4, 0.95], and an average that does not,
    0.3 [-0.2, 0.7]); undefined rows get NaN."""
    reasons = reasons or [
        "" if v != "undefined" else "fewer than 3 algorithms in every seed" for v in verdicts
    ]
    table = {"verdict": np.array(verdicts, dtype=object), "reason": np.array(reasons, dtype=object)}
    default = {"worst_plus_gap": (0.8, 0.4, 0.95), "average": (0.3, -0.2, 0.7)}
    for m in ("worst_plus_gap", "average"):
        rows = (rho or {}).get(m) or [default[m]] * len(verdicts)
        rows = [
            (np.nan,) * 3 if v == "undefined" else r for v, r in zip(verdicts, rows, strict=True)
        ]
        for k, suffix in enumerate(("", "_low", "_high")):
            table[f"rho_{m}{suffix}"] = np.array([r[k] for r in rows], dtype=float)
    return table


def test_a_clear_win_says_clearly_better_and_states_the_rhos():
    text = verdict_sentence(
        _table(
            ["clearly ahead"],
            rho={"worst_plus_gap": [(0.9, 0.6, 1.0)], "average": [(0.2, -0.4, 0.7)]},
        )
    )
    assert text == (
        f"worst+gap tracks the ideal measure clearly better than average ({_INTERVAL} excludes "
        f"0). worst+gap tracks the ideal measure well in 1 of 1, average in 0 ({_RULE}); "
        "rho worst+gap 0.90 [0.60, 1.00]; rho average 0.20 [-0.40, 0.70]."
    )
    behind = verdict_sentence(_table(["clearly behind"]))
    assert behind.startswith("average tracks the ideal measure clearly better than worst+gap")


@pytest.mark.parametrize("verdict", ["ahead, not clearly", "behind, not clearly", "tied"])
def test_an_interval_covering_0_says_no_clear_difference_whatever_the_sign(verdict):
    text = verdict_sentence(_table([verdict]))
    assert text.startswith(
        f"no clear difference between worst+gap and average ({_INTERVAL} includes 0). "
    )
    assert "better" not in text


def test_neither_tracks_the_ideal_even_when_one_measure_is_ahead_everywhere():
    """The issue's quick study: rho -0.33 / 0.02 / 0.55 and every difference positive; the old
    sentence said "better than average in 3 of 3 scenarios"."""
    rho = {
        "worst_plus_gap": [(-0.33, -0.9, 0.5), (0.02, -0.7, 0.8), (0.55, -0.2, 0.95)],
        "average": [(-0.5, -0.95, 0.4), (-0.1, -0.8, 0.7), (0.3, -0.4, 0.9)],
    }
    text = verdict_sentence(_table(["ahead, not clearly"] * 3, rho=rho))
    assert text.startswith(
        "worst+gap vs average over 3 scenarios: worst+gap tracks the ideal measure clearly "
        f"better in 0, average clearly better in 0, no clear difference in 3 ({_INTERVAL} "
        f"includes 0). Neither tracks the ideal measure well in any of the 3 ({_RULE}); "
        "rho worst+gap -0.33 [-0.90, 0.50], 0.02 [-0.70, 0.80], 0.55 [-0.20, 0.95]; "
    )
    assert "better than average in" not in text


def test_tracking_needs_both_the_threshold_and_an_interval_above_0():
    rho = {
        # tracks; high rho but interval covers 0; interval above 0 but rho below 0.5
        "worst_plus_gap": [(0.8, 0.3, 0.95), (0.7, -0.1, 0.9), (0.45, 0.1, 0.8)],
        "average": [(0.6, 0.2, 0.9), (0.2, -0.5, 0.6), (0.1, -0.5, 0.6)],
    }
    text = verdict_sentence(
        _table(["ahead, not clearly", "clearly ahead", "ahead, not clearly"], rho=rho)
    )
    assert (
        f"worst+gap tracks the ideal measure well in 1 of 3, average in 1, neither in 2 ({_RULE})"
        in text
    )
    assert "clearly better in 1, average clearly better in 0, no clear difference in 2" in text


def test_undefined_rows_are_counted_with_their_reasons():
    text = verdict_sentence(
        _table(["ahead, not clearly", "tied", "undefined", "undefined"]), confidence=0.9
    )
    assert text.startswith(
        "worst+gap vs average over 4 scenarios: worst+gap tracks the ideal measure clearly "
        "better in 0, average clearly better in 0, no clear difference in 2 (the 90% bootstrap "
        "interval of the difference in Spearman's rho includes 0); no verdict in 2 (fewer than "
        "3 algorithms in every seed). worst+gap tracks the ideal measure well in 2 of 2, "
        "average in 0 (well: mean rho >= 0.5 with its 90% interval above 0)."
    )
    mixed = _table(["undefined"] * 3, ["a", "b", "a"])
    assert verdict_sentence(mixed) == "no verdict in any of the 3 (a: 2; b)."
    assert verdict_sentence(_table(["undefined"])) == (
        "no verdict (fewer than 3 algorithms in every seed)."
    )
    assert verdict_sentence(_table([])) == (
        "No scenario has finished units yet, so there is no verdict."
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(VERDICTS), min_size=2, max_size=30))
def test_sentence_numbers_are_the_tables_counts(verdicts):
    text = verdict_sentence(_table(verdicts), "worst_plus_gap", "average")
    found = re.search(
        r"over (\d+) scenarios: worst\+gap tracks the ideal measure clearly better in (\d+), "
        r"average clearly better in (\d+), no clear difference in (\d+)",
        text,
    )
    clear, behind = verdicts.count("clearly ahead"), verdicts.count("clearly behind")
    undefined = verdicts.count("undefined")
    unclear = len(verdicts) - clear - behind - undefined
    defined = len(verdicts) - undefined
    if not defined:
        assert text.startswith(f"no verdict in any of the {len(verdicts)} (")
        return
    assert found and [int(g) for g in found.groups()] == [len(verdicts), clear, behind, unclear]
    assert (f"no verdict in {undefined} " in text) == (undefined > 0)
    # the default table: worst+gap tracks the ideal well everywhere, average nowhere
    assert f"worst+gap tracks the ideal measure well in {defined} of {defined}" in text
