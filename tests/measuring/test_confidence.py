"""The bounds on known inputs: valid at small counts, never zero width, the tier on lower bounds."""

from __future__ import annotations

import math
import random

import pytest

from gatekeeper.measuring.confidence import (
    Estimate,
    estimate,
    out_of_reach,
    samples_to_reach,
    settled,
    show,
    tier_of,
)
from gatekeeper.measuring.effort import chi2_sf, friedman_p
from gatekeeper.rules.tiers import Thresholds

CHAIN = 4 / 17  # a weight-4 chain as a share of toolCalling (of 17: the suite before issue 41)


def test_agreeing_samples_keep_a_bound_below_a_perfect_score():
    # The old Student-t interval had zero width here; the bound says how much 32 samples can tell.
    found = estimate([0.0] * 32)
    assert found.mean == 1.0 and found.high == 1.0
    assert 0.90 < found.low < 0.901


def test_no_bound_certifies_a_rate_that_clean_samples_cannot_rule_out():
    # A model failing a whole sample with probability 0.1 passes n in a row with probability
    # 0.9^n: at risk 0.05 no valid bound may certify 0.90 before 0.9^n <= 0.05, n = 29.
    assert estimate([0.0] * 28).low < 0.9


def test_fewer_samples_give_wider_bounds():
    lows = [estimate([0.0] * n).low for n in (1, 2, 4, 8, 16, 32, 64)]
    assert lows == sorted(lows) and lows[0] < 0.1 and lows[-1] < 1.0


def test_the_bound_sits_below_the_estimate_and_the_upper_end_above():
    for failures in ([0.3, 0.0, 0.1], [CHAIN] * 5 + [0.0] * 5, [1.0, 0.0], [0.0] * 3, [0.5] * 40):
        found = estimate(failures)
        assert found.low <= found.mean <= found.high


def test_a_sample_that_fails_whole_costs_more_than_one_that_fails_a_little():
    # The bound sees the failures' spread, not only their sum: 1.0 once is worse than 0.1 ten times.
    once = estimate([1.0] + [0.0] * 59)
    spread = estimate([0.1] * 10 + [0.0] * 50)
    assert once.mean == pytest.approx(spread.mean) and once.low < spread.low


def test_no_samples_and_the_seeds_rule():
    assert estimate([]) == Estimate(0.0, 0.0, 0.0, 0)
    assert estimate([0.2, 0.0], risk=1) == Estimate(0.9, 0.9, 0.9, 2)  # risk 1: the point estimate


def _covers(draw, runs: int, looks: int, seed: int) -> float:
    """How often the lower bound stays at or under the true score at every look (risk 0.05)."""
    rng, truth, bad = random.Random(seed), 1 - draw(None), 0
    for _ in range(runs):
        failures = []
        for _ in range(looks):
            failures.append(draw(rng))
            if estimate(failures).low > truth:
                bad += 1  # any look counts: the bound must hold whenever sampling stops
                break
    return 1 - bad / runs


def test_a_heavy_test_that_fails_half_the_time_is_not_certified_above_its_true_score():
    # The hard case: a weight-4 chain passing half the time (true toolCalling 0.882 in the suite of 17).
    def chain(rng):
        return 0.5 * CHAIN if rng is None else CHAIN * (rng.random() < 0.5)

    assert _covers(chain, 300, 40, seed=7) >= 0.95


def test_whole_samples_failing_together_do_not_break_the_bound():
    # Every test of a sample fails together with probability 0.12 (true score 0.88): the case a
    # bound counting a sample's tests as independent evidence got wrong 40% of the time.
    def whole(rng):
        return 0.12 if rng is None else float(rng.random() < 0.12)

    assert _covers(whole, 300, 60, seed=3) >= 0.95


def test_samples_to_reach_says_how_many_more_would_decide():
    assert samples_to_reach(1.0, 16, 0.9, 0.05) == 16  # 32 clean samples certify 0.9
    assert samples_to_reach(1.0, 32, 0.9, 0.05) == 0
    assert samples_to_reach(0.88, 10, 0.9, 0.05) is None  # the estimate is below 0.9
    more = samples_to_reach(0.97, 30, 0.9, 0.05)
    assert more is not None and more > 2


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


def test_sampling_stops_when_the_next_tier_is_out_of_reach():
    # Certified medium; large needs toolCalling 0.90, whose upper bound 0.93 is under halfway
    # from 0.90 to the design score 0.98 (0.94): no budget sized for 0.98 models would decide.
    found = {
        "toolCalling": Estimate(0.89, 0.8, 0.93, 60),
        "instruction": Estimate(1, 0.95, 1, 60),
        "json": Estimate(1, 0.95, 1, 60),
    }
    assert not settled(found, Thresholds()) and out_of_reach(found, Thresholds())
    hopeful = dict(found, toolCalling=Estimate(0.95, 0.88, 0.97, 60))
    assert not out_of_reach(hopeful, Thresholds())


def test_the_bound_is_the_smallest_rate_the_wealth_cannot_rule_out():
    # Against the definition, evaluated directly: K_n(m) = sum_j w_j prod_i (1 + c_j (m - Z_i) / (1 - m)).
    failures = [0.0] * 20 + [CHAIN, 1.0, 0.3]
    low = estimate(failures).low

    def wealth(m: float) -> float:
        return sum(0.5 * math.prod(1 + c * (m - z) / (1 - m) for z in failures) for c in (0.95, 0.8))

    assert wealth(1 - low + 1e-6) >= 20 > wealth(1 - low - 1e-6)


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
