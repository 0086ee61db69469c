"""The base:new ratios of the OpenworldAUC paper: Table 3's Fwd and Bwd, Tables 11-12's sweep."""

from __future__ import annotations

import numpy as np
import pytest

from oodeval.openworld.base_new import RATIO_PRESETS, parse_ratio, resample_to_ratio

#: Table 3's caption (App. C.2 says the same: "Forward (Fwd) means base domain number is 5 times
#: the new domain number, while Backward (Bwd) means the opposite").
TABLE_3_CAPTION = (
    "Fwd means base domain number is 5x larger than new domain, and Bwd means the opposite."
)


def test_fwd_has_five_times_more_base_samples_and_bwd_five_times_more_new_ones():
    assert "base domain number is 5x larger than new domain" in TABLE_3_CAPTION
    labels = np.repeat(np.arange(4), 60)  # base classes 0, 1; new classes 2, 3
    base = [0, 1]
    fwd = np.isin(labels[resample_to_ratio(labels, base, "Fwd", seed=0)], base)
    assert fwd.sum() == 5 * (~fwd).sum() == 120
    bwd = np.isin(labels[resample_to_ratio(labels, base, "Bwd", seed=0)], base)
    assert (~bwd).sum() == 5 * bwd.sum() == 120
    assert parse_ratio("Fwd") == parse_ratio("fwd") == (5.0, 1.0) == RATIO_PRESETS["fwd"]
    assert parse_ratio("BWD") == (1.0, 5.0) == RATIO_PRESETS["bwd"]


@pytest.mark.parametrize(("name", "base_new"), [("Fwd", "5:1"), ("Bwd", "1:5")])
def test_fwd_and_bwd_are_the_base_new_ratios_of_table_3(name, base_new):
    assert parse_ratio(name) == parse_ratio(base_new)
