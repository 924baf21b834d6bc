"""Interval maths on known inputs, sequential stopping, and the tier decided on lower bounds."""

from __future__ import annotations

import math

import pytest

from gatekeeper.measuring.confidence import Estimate, TestScores, estimate, settled, show, t975
from gatekeeper.measuring.runner import decide_tier
from gatekeeper.tiers import Thresholds


def test_one_sample_is_its_own_interval():
    found = estimate([TestScores("json", 1, (0.8,)), TestScores("json", 3, (0.4,))])
    assert found == Estimate(mean=0.5, low=0.5, high=0.5, samples=1)


def test_one_test_three_samples_gives_the_student_t_interval():
    # mean 0.75, s = 0.25, se = 0.25 / sqrt(3), t(0.975, 2) = 4.303
    found = estimate([TestScores("json", 1, (1.0, 0.5, 0.75))])
    half = 4.303 * 0.25 / math.sqrt(3)
    assert found.mean == pytest.approx(0.75)
    assert found.low == pytest.approx(0.75 - half) and found.low == pytest.approx(0.12891, abs=1e-5)
    assert found.high == 1.0  # 0.75 + 0.621 clipped to the score range
    assert found.samples == 3


def test_weighted_tests_combine_as_a_stratified_mean():
    # A (weight 2) always passes, B (weight 1) passes every other sample: mean (2*1 + 0.5)/3,
    # se = (1/3) * sqrt(var(0,1,0,1) / 4) = (1/3) * sqrt((1/3) / 4), t(0.975, 3) = 3.182
    found = estimate([TestScores("toolCalling", 2, (1, 1, 1, 1)), TestScores("toolCalling", 1, (0, 1, 0, 1))])
    se = (1 / 3) * math.sqrt((1 / 3) / 4)
    assert found.mean == pytest.approx(5 / 6)
    assert found.low == pytest.approx(5 / 6 - 3.182 * se)
    assert found.low == pytest.approx(0.52714, abs=1e-5)
    assert found.high == 1.0


def test_identical_samples_give_a_zero_width_interval():
    found = estimate([TestScores("json", 1, (0.6, 0.6, 0.6))])
    assert (found.low, found.mean, found.high) == pytest.approx((0.6, 0.6, 0.6))


def test_no_tests_scores_zero():
    assert estimate([]) == Estimate(0.0, 0.0, 0.0, 0)


def test_t_quantiles():
    assert t975(1) == 12.706 and t975(2) == 4.303 and t975(30) == 2.042 and t975(200) == 1.96
    with pytest.raises(ValueError):
        t975(0)


def test_the_tier_is_decided_on_lower_bounds_when_there_are_samples():
    lucky = {
        "toolCalling": Estimate(0.93, 0.86, 1.0, 3),
        "instruction": Estimate(0.95, 0.9, 1.0, 3),
        "json": Estimate(0.95, 0.9, 1.0, 3),
    }
    basis, tier = decide_tier(lucky, Thresholds())
    assert basis["toolCalling"] == 0.86 and tier == "medium"  # the mean (0.93) alone would be large
    one = {c: Estimate(e.mean, e.mean, e.mean, 1) for c, e in lucky.items()}
    assert decide_tier(one, Thresholds())[1] == "large"


def test_sampling_settles_when_no_threshold_that_matters_lies_inside_an_interval():
    clear = {"toolCalling": Estimate(1, 1, 1, 2), "instruction": Estimate(1, 1, 1, 2), "json": Estimate(1, 1, 1, 2)}
    assert settled(clear, Thresholds())
    straddling = dict(clear, json=Estimate(0.86, 0.8, 0.92, 2))  # 0.85 (large) is inside
    assert not settled(straddling, Thresholds())


def test_a_straddled_threshold_that_cannot_change_the_tier_does_not_keep_sampling():
    # toolCalling is clearly below medium (0.6): json around large's 0.85 cannot matter.
    found = {
        "toolCalling": Estimate(0.3, 0.2, 0.4, 2),
        "instruction": Estimate(1, 1, 1, 2),
        "json": Estimate(0.86, 0.8, 0.92, 2),
    }
    assert settled(found, Thresholds())


def test_scores_are_shown_with_their_interval():
    assert show(0.82, [0.77, 0.87]) == "0.82 ± 0.05"
    assert show(0.95, [0.81, 1.0]) == "0.95 ± 0.14"  # the wider side of a clipped interval
    assert show(0.82, None) == "0.82"
