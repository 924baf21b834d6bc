"""The tests' own wealths (confidence.py, "stratified betting"): a lower bound on the least
total wealth, valid whenever sampling stops, and exact in the limit for a deterministic model."""

from __future__ import annotations

import math
import random

from gatekeeper.measuring.confidence import estimate, stratified_log_wealth, stratified_runs
from gatekeeper.measuring.design import _kelly, _moments


def _log_wealth(runs: list[tuple[float, float]], x: float) -> float:
    return sum(math.log(1 + c * (x - z) / (1 - x)) for z, c in runs)


def test_the_dual_never_exceeds_the_least_wealth_found_by_brute_force_and_comes_close():
    rng = random.Random(3)
    for _ in range(20):
        a = rng.uniform(0.2, 0.8)
        one = [(float(rng.random() < 0.2), rng.choice((0.3, 0.6, 0.9))) for _ in range(rng.randint(1, 12))]
        two = [(rng.choice((0.0, 0.5)), rng.choice((0.2, 0.8))) for _ in range(rng.randint(1, 12))]
        strata = [(a, stratified_runs(one)), (1 - a, stratified_runs(two))]
        for m in (0.1, 0.3, 0.6):
            # every split of m into a x1 + (1 - a) x2, on a fine grid of x1
            splits = [x1 for i in range(1, 4000) if 0 <= (m - a * (x1 := i / 4000)) / (1 - a) < 1]
            least = min(_log_wealth(one, x1) + _log_wealth(two, (m - a * x1) / (1 - a)) for x1 in splits)
            bound = stratified_log_wealth(strata, m)
            assert bound <= least + 1e-9
            assert bound >= least - 0.05 * max(1.0, abs(least))


def test_a_test_never_run_may_carry_the_whole_failure_rate():
    # Its rate is unconstrained (it may fail always): m up to its share is not ruled out at all.
    strata = [(0.3, stratified_runs([])), (0.7, stratified_runs([(0.0, 0.95)] * 50))]
    assert stratified_log_wealth(strata, 0.3) <= 1e-9
    assert stratified_log_wealth(strata, 0.5) > math.log(20)


def _strata(per_test: dict[str, list[tuple[float, float, float]]], shares: dict[str, float]):
    low = [(shares[t], stratified_runs([(z, c) for z, c, _ in per_test[t]])) for t in shares]
    high = [(shares[t], stratified_runs([(1 - z, c) for z, _, c in per_test[t]])) for t in shares]
    return low, high


def _run(rates: dict[str, float], shares: dict[str, float], runs: int, looks: int, seed: int) -> tuple[bool, float]:
    """One measurement: each round runs every test once, bets from the runs before it; whether
    the lower bound ever rose above the true score at a look, and the last lower bound."""
    rng = random.Random(seed)
    truth = 1 - sum(shares[t] * rates[t] for t in shares)
    seen: dict[str, list[float]] = {t: [] for t in shares}
    per_test: dict[str, list[tuple[float, float, float]]] = {t: [] for t in shares}
    failures: list[float] = []
    above, low = False, 0.0
    for i in range(1, runs + 1):
        z_round = 0.0
        for t in shares:
            mu, var = _moments(seen[t])
            c = _kelly(mu, var, mu + 0.1, 0.95 if seen[t] else 0.5)
            z = float(rng.random() < rates[t])
            per_test[t].append((z, c, 0.0))
            seen[t].append(z)
            z_round += shares[t] * z
        failures.append(z_round)
        if i % (runs // looks) == 0:
            low = estimate(failures, 0.05, None, _strata(per_test, shares)).low
            above = above or low > truth
    return above, low


def test_the_averaged_bound_rises_above_the_truth_at_most_risk_of_the_time():
    # Tests failing independently at known rates (true score 0.82), looked at 4 times in 40 rounds.
    shares = {"a": 0.5, "b": 0.3, "c": 0.2}
    rates = {"a": 0.1, "b": 0.2, "c": 0.4}
    above = sum(_run(rates, shares, 40, 4, seed)[0] for seed in range(200))
    assert above <= 0.05 * 200 + 2 * math.sqrt(0.05 * 0.95 * 200)  # 10 expected at most; 16 is 2 sd over


def test_a_deterministic_model_has_its_rate_ruled_out_just_past_its_exact_score():
    # The seed suite's `distracted` toolCalling, exactly 0.65: a chain failing 0.375 of its checks
    # every run (share 0.4), a trap failed every run (0.2), a test always passed (0.4). The pooled
    # wealth sees every whole observation alike and would too; here the tests' own alone, though
    # the trap's first run was bet on and lost, rule out a failure rate of 0.4 (score 0.6).
    runs = 80
    strata = [
        (0.4, stratified_runs([(0.375, 0.5)] + [(0.375, 0.95)] * (runs - 1))),
        (0.2, stratified_runs([(1.0, 0.5)] + [(1.0, 0.0)] * (runs - 1))),
        (0.4, stratified_runs([(0.0, 0.5)] + [(0.0, 0.95)] * (runs - 1))),
    ]
    assert stratified_log_wealth(strata, 0.4) > math.log(1 / (0.25 * 0.05))  # its share of the average
    assert stratified_log_wealth(strata, 0.35) < 0  # the exact rate is never ruled out
