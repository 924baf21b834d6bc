"""The bounds on known inputs: valid at small counts, never zero width, the tier on lower bounds."""

from __future__ import annotations

import math
import random

import pytest

from gatekeeper.measuring.confidence import (
    Estimate,
    Strata,
    _max_gain,
    _min_cost,
    estimate,
    samples_to_reach,
    settled,
    show,
    tier_of,
)
from gatekeeper.measuring.effort import chi2_sf, friedman_p
from gatekeeper.tiers import Thresholds

TOOL_CALLING = Strata.of([4, 2, 2, 1, 2, 2, 4], 0.9)  # the default suite's toolCalling weights


def test_agreeing_samples_keep_a_bound_below_a_perfect_score():
    # The old Student-t interval had zero width here; the bound says how much 8 samples can tell.
    found = estimate(TOOL_CALLING, 0.0, 8)
    assert found.mean == 1.0 and found.high == 1.0
    assert 0.90 < found.low < 0.91


def test_fewer_samples_give_wider_bounds():
    lows = [estimate(TOOL_CALLING, 0.0, n).low for n in (1, 2, 4, 8, 16, 30)]
    assert lows == sorted(lows) and 0.5 < lows[0] < 0.51 and lows[-1] < 1.0


def test_the_bound_sits_below_the_estimate_and_the_upper_end_above():
    for failures, n in ((0.3, 10), (2.35, 10), (5.0, 30), (0.0, 3)):
        found = estimate(TOOL_CALLING, failures, n)
        assert found.low <= found.mean <= found.high


def test_a_category_without_tests_scores_zero():
    assert estimate(Strata.of([], 0.9), 0.0, 5) == Estimate(0.0, 0.0, 0.0, 5)


def test_the_worst_spread_of_failures_is_found_in_closed_form():
    # Against a brute-force search over two tests' failure rates with a_1 x_1 + a_2 x_2 = p.
    shares, lam, p = (0.7, 0.3), 6.0, 0.2
    grid = [i / 2000 for i in range(2001)]
    costs, gains = [], []
    for x2 in grid:  # x2 = 0 is on the grid: the optimum may sit on that edge
        x1 = (p - shares[1] * x2) / shares[0]
        if 0 <= x1 <= 1:
            xs = (x1, x2)
            costs.append(sum(-math.log(1 - x * -math.expm1(-lam * a)) for x, a in zip(xs, shares, strict=True)))
            gains.append(sum(math.log1p(x * math.expm1(lam * a)) for x, a in zip(xs, shares, strict=True)))
    assert _min_cost(lam, shares, p) == pytest.approx(min(costs), abs=1e-5)
    assert _max_gain(lam, shares, p) == pytest.approx(max(gains), abs=1e-5)


def test_a_heavy_test_that_fails_half_the_time_is_not_certified_above_its_true_score():
    # The hard case: a weight-4 chain passing half the time (true toolCalling 0.882).
    # Run many short measurements: the lower bound may exceed the truth in at most 5% of them.
    rng = random.Random(7)
    true_score = 1 - 0.5 * 4 / 17
    above = 0
    for _ in range(400):
        failures = 0.0
        for n in range(1, 16):
            failures += (4 / 17) * (rng.random() < 0.5)
            if estimate(TOOL_CALLING, failures, n).low > true_score:
                above += 1  # any look counts: the bound must hold whenever sampling stops
                break
    assert above / 400 <= 0.05


def test_samples_to_reach_says_how_many_more_would_decide():
    assert samples_to_reach(TOOL_CALLING, 0.0, 4, 0.9, 0.05) == 4  # 8 samples certify 0.9
    assert samples_to_reach(TOOL_CALLING, 0.0, 8, 0.9, 0.05) == 0
    assert samples_to_reach(TOOL_CALLING, 1.2, 10, 0.9, 0.05) is None  # the estimate 0.88 is below 0.9


def test_the_tier_is_decided_on_lower_bounds():
    lucky = {
        "toolCalling": Estimate(0.93, 0.86, 1.0, 3),
        "instruction": Estimate(0.95, 0.9, 1.0, 3),
        "json": Estimate(0.95, 0.9, 1.0, 3),
    }
    assert tier_of(lucky, Thresholds()) == "medium"  # the means alone would be large


def test_sampling_settles_when_no_threshold_that_matters_lies_inside_the_bounds():
    clear = {c: Estimate(1, 0.95, 1, 9) for c in ("toolCalling", "instruction", "json")}
    assert settled(clear, Thresholds())
    straddling = dict(clear, json=Estimate(0.86, 0.8, 0.92, 9))  # 0.85 (large) is inside
    assert not settled(straddling, Thresholds())
    # toolCalling clearly below medium's 0.6: json around large's 0.85 cannot matter.
    hopeless = dict(straddling, toolCalling=Estimate(0.3, 0.2, 0.4, 9))
    assert settled(hopeless, Thresholds())


def test_scores_are_shown_with_the_bound_they_were_decided_on():
    assert show(0.82, [0.77, 0.87]) == "0.82 (>= 0.77)"
    assert show(0.82, None) == "0.82"


def test_chi_square_tail_matches_known_values():
    assert chi2_sf(3.841, 1) == pytest.approx(0.05, abs=1e-3)
    assert chi2_sf(5.991, 2) == pytest.approx(0.05, abs=1e-3)
    assert chi2_sf(9.488, 4) == pytest.approx(0.05, abs=1e-3)
    assert chi2_sf(11.07, 5) == pytest.approx(0.05, abs=1e-3)


def test_friedman_sees_a_consistent_difference_and_not_noise():
    consistent = [[1.0, 5.0] for _ in range(12)]  # the second level always spends more
    assert friedman_p(consistent) < 0.01
    assert friedman_p([[3.0, 3.0] for _ in range(12)]) == 1.0  # identical: no evidence at all
    rng = random.Random(1)
    noise = [[rng.random(), rng.random(), rng.random()] for _ in range(40)]
    assert friedman_p(noise) > 0.05
