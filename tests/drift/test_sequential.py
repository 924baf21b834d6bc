"""The statistics of drift: the CUSUM's arithmetic, its false-alarm rate and delay on simulated
traffic with known rates (seeded), the evidence of many clients, and the check that restores."""

from __future__ import annotations

import math
import random

import pytest
from drift_traffic import first_alarm

from gatekeeper.drift.sequential import Cusum, Pooled, Tally, binomial_cdf, cusums_for, make_cusum, under_rate
from gatekeeper.drift.window import DriftSettings, Fault
from gatekeeper.rules.tiers import Tier

SETTINGS = DriftSettings()
LARGE = cusums_for(SETTINGS.ceilings_for(Tier.LARGE), SETTINGS)
ARGS, JSON = LARGE[Fault.INVALID_ARGS], LARGE[Fault.INVALID_JSON]
CEILINGS = {f: t.ceiling for f, t in LARGE.items()}


def simulate(rates: dict[Fault, float], calls: int, rng: random.Random) -> int | None:
    """The call on which the first of the pair's `large` tests alarms (None: none within `calls`)."""
    return first_alarm(LARGE, rates, calls, rng)


# -- the arithmetic -------------------------------------------------------------------------


def test_the_default_large_thresholds_are_the_documented_ones() -> None:
    # h = ln(N * p1 * k / alpha) with N = 10,000, k = 3, alpha = 0.01, p1 = 3c.
    assert ARGS.faulty == pytest.approx(0.06) and ARGS.threshold == pytest.approx(math.log(1.8e5))
    assert JSON.faulty == pytest.approx(0.03) and JSON.threshold == pytest.approx(math.log(9e4))
    assert round(ARGS.threshold, 1) == 12.1 and round(JSON.threshold, 1) == 11.4


@pytest.mark.parametrize("test", list(LARGE.values()), ids=lambda t: t.fault.value)
def test_the_score_is_a_supermartingale_for_every_healthy_rate(test: Cusum) -> None:
    def growth(p: float) -> float:  # E[exp(increment)] at fault rate p
        return p * math.exp(test.up) + (1 - p) * math.exp(test.down)

    assert growth(test.ceiling) == pytest.approx(1.0)
    assert all(growth(test.ceiling * f) < 1.0 for f in (0.0, 0.5, 0.9, 0.999))
    assert growth(test.ceiling * 1.01) > 1.0  # and only those: above the ceiling it grows


def test_a_large_ceiling_caps_the_tuned_rate_below_one() -> None:
    test = make_cusum(Fault.INVALID_ARGS, 0.4, 3.0, 10_000, 0.01, 3, 1.5)
    assert test.faulty == pytest.approx(0.7) and test.up > 0 > test.down
    assert test.restore == pytest.approx(0.55)  # between the ceiling and the tuned rate


def test_a_null_ceiling_is_not_judged() -> None:
    ceilings = SETTINGS.ceilings_for(Tier.LARGE).model_copy(update={"invalid_json": None})
    tests = cusums_for(ceilings, SETTINGS)
    assert set(tests) == {Fault.NOT_OFFERED, Fault.INVALID_ARGS}
    assert tests[Fault.INVALID_ARGS].threshold == pytest.approx(math.log(10_000 * 0.06 * 2 / 0.01))


# -- simulated traffic with known rates (seeded: the same figures every run) ----------------


def test_a_model_at_its_ceilings_is_rarely_demoted_within_the_horizon() -> None:
    rng = random.Random(21)
    runs = 3000
    alarms = sum(simulate(CEILINGS, 10_000, rng) is not None for _ in range(runs))
    # The bound is 1%; the simulation shows far less (the bound is conservative). 1% of 3,000
    # would be 30.
    assert alarms <= 15, alarms


def test_a_fault_at_five_times_the_ceiling_is_caught_within_about_200_calls() -> None:
    rng = random.Random(5)
    rates = {f: 0.9 * c for f, c in CEILINGS.items()} | {Fault.INVALID_ARGS: 5 * ARGS.ceiling}
    delays = sorted(d for _ in range(400) if (d := simulate(rates, 5_000, rng)) is not None)
    assert len(delays) == 400
    assert delays[len(delays) // 2] <= 200, delays[len(delays) // 2]


# -- many clients -----------------------------------------------------------------------------


def feed(pooled: Pooled, client: str, fault: Fault | None, times: int) -> None:
    for _ in range(times):
        pooled.add([ARGS], client, fault, max_clients=100)


def test_one_client_alone_never_brings_everyones_evidence_past_the_threshold() -> None:
    pooled = Pooled()
    feed(pooled, "attacker", Fault.INVALID_ARGS, 500)
    assert pooled.standing(Fault.INVALID_ARGS, drop=0) > 10 * ARGS.threshold
    assert pooled.standing(Fault.INVALID_ARGS, drop=2) == 0.0
    assert pooled.clients(Fault.INVALID_ARGS) == 1


def test_three_failing_clients_do() -> None:
    pooled = Pooled()
    for _ in range(60):
        for client in ("a", "b", "c"):
            feed(pooled, client, Fault.INVALID_ARGS, 1)
            feed(pooled, client, None, 1)
    assert pooled.standing(Fault.INVALID_ARGS, drop=2) >= ARGS.threshold


def test_two_attackers_beside_healthy_clients_never_demote_everyone() -> None:
    rng = random.Random(3)
    pooled, worst = Pooled(), 0.0
    for _ in range(20_000):
        client = rng.choice(["attacker-1", "attacker-2", "h1", "h2", "h3", "h4"])
        healthy = client.startswith("h")
        fault = Fault.INVALID_ARGS if not healthy or rng.random() < ARGS.ceiling else None
        pooled.add([ARGS], client, fault, max_clients=100)
        worst = max(worst, pooled.standing(Fault.INVALID_ARGS, drop=2))
    assert worst < ARGS.threshold


def test_a_client_past_the_table_bound_brings_no_evidence() -> None:
    pooled = Pooled()
    pooled.add([ARGS], "first", Fault.INVALID_ARGS, max_clients=1)
    before = pooled.score[Fault.INVALID_ARGS]
    pooled.add([ARGS], "second", Fault.INVALID_ARGS, max_clients=1)
    assert pooled.score[Fault.INVALID_ARGS] == before
    pooled.add([ARGS], "second", None, max_clients=1)
    assert pooled.score[Fault.INVALID_ARGS] == pytest.approx(before + ARGS.down)


# -- restoring --------------------------------------------------------------------------------


def test_binomial_cdf_known_values() -> None:
    assert binomial_cdf(0, 10, 0.5) == pytest.approx(1 / 1024)
    assert binomial_cdf(5, 10, 0.5) == pytest.approx(638 / 1024)
    assert binomial_cdf(2, 5000, 0.01) == pytest.approx(0.99**5000 * (1 + 5000 / 99 + 5000 * 4999 / 2 / 99**2))
    assert binomial_cdf(10, 10, 0.3) == 1.0


def test_clean_calls_restore_once_the_upper_bound_is_under_the_restore_level() -> None:
    # R = 1.5c: with no fault, n >= ln(100) / -ln(1 - R) = 304.7 calls at c = 0.01, 151.2 at 0.02.
    assert (ARGS.restore, JSON.restore) == (pytest.approx(0.03), pytest.approx(0.015))
    assert not under_rate(0, 304, 0.015, 0.01) and under_rate(0, 305, 0.015, 0.01)
    assert not under_rate(0, 151, 0.03, 0.01) and under_rate(0, 152, 0.03, 0.01)
    assert not under_rate(15, 1000, 0.015, 0.01)  # at the level: never
    # 6 faults in 1,000 calls (0.6x the 1% ceiling) end it now; under the ceiling itself it took 2.
    assert under_rate(6, 1000, 0.015, 0.01) and not under_rate(3, 1000, 0.01, 0.01)


def test_a_tally_needs_every_judged_rate_clean() -> None:
    tally = Tally(size=1000)
    for _ in range(200):
        tally.add("a", None)
    assert tally.clean([ARGS], 0.01) and not tally.clean([ARGS, JSON], 0.01)
    for _ in range(105):
        tally.add("a", None)
    assert tally.clean([ARGS, JSON], 0.01)


def test_a_tally_keeps_only_its_last_calls() -> None:
    tally = Tally(size=3)
    for fault in (Fault.INVALID_ARGS, None, None, None):
        tally.add("a", fault)
    assert (tally.calls, tally.faults[Fault.INVALID_ARGS]) == (3, 0)


def test_the_busiest_clients_calls_do_not_count_towards_everyones_restoration() -> None:
    tally = Tally(size=10_000)
    for _ in range(2000):
        tally.add("flooder", None)
    for client in ("h1", "h2"):
        for _ in range(100):
            tally.add(client, None)
    tally.add("h1", Fault.INVALID_ARGS)
    assert tally.counted(drop=2) == 100
    assert not tally.clean([ARGS], 0.01, drop=2)
    assert tally.clean([ARGS], 0.01, drop=0)  # what one flooder could do without the discount


def test_three_clean_clients_restore_even_when_another_keeps_failing() -> None:
    tally = Tally(size=10_000)
    for _ in range(500):
        for client in ("a", "b", "c"):
            tally.add(client, None)
        tally.add("blocker", Fault.INVALID_ARGS)  # every fault counts in the pooled check ...
    assert not tally.clean([ARGS], 0.01, drop=0)
    assert tally.clean([ARGS], 0.01, drop=2)  # ... but three clients' own calls are clean
    assert tally.clean_clients([ARGS], 0.01, enough=10) == 3


def test_a_client_s_cap_replaces_only_its_own_oldest_calls() -> None:
    tally = Tally(size=10, per_client=3)
    for fault in (Fault.INVALID_ARGS, None, None):
        tally.add("h", fault)
    for _ in range(50):
        tally.add("flooder", None)
    assert dict(tally.by_client) == {"h": 3, "flooder": 3} and tally.calls == 6
    assert tally.faults[Fault.INVALID_ARGS] == 1 and tally.faults_without(Fault.INVALID_ARGS, 0) == 1
    tally.add("h", None)  # its own oldest (the faulty one) goes
    assert dict(tally.by_client) == {"h": 3, "flooder": 3} and tally.faults[Fault.INVALID_ARGS] == 0
    for client in "abcd":
        for _ in range(3):
            tally.add(client, None)
    assert tally.calls == 10  # the size still holds: the oldest of all go first
    assert len(tally._calls) <= 2 * tally.size + 64  # the places of removed calls are dropped


def test_a_capped_tally_counts_what_an_uncapped_one_would_without_a_flooder() -> None:
    rng = random.Random(3)
    capped, plain = Tally(size=300, per_client=10_000), Tally(size=300)
    for _ in range(5000):
        client = rng.choice("abc")
        fault = rng.choice([None, None, None, Fault.INVALID_ARGS, Fault.INVALID_JSON])
        capped.add(client, fault)
        plain.add(client, fault)
        assert capped.to_json(2) == plain.to_json(2) and capped.by_client == plain.by_client


EVERYONE = SETTINGS.window_calls * SETTINGS.min_clients  # the size of everyone's tally (3,000)
CAP = SETTINGS.window_calls  # the most calls of one client it keeps


def _traffic(tally: Tally, honest: int, weight: float, honest_fault: float, attacker_fault: Fault | None) -> int | None:
    """Calls into `tally` from `honest` clients (each faulting invalidArgs with probability
    `honest_fault`) and one client sending `weight` times one honest client's traffic; the call
    on which everyone's demotion ends (None: not within 20,000)."""
    rng = random.Random(7)
    clients, weights = [*(f"h{i}" for i in range(honest)), "attacker"], [1.0] * honest + [weight]
    for i in range(20_000):
        client = rng.choices(clients, weights)[0]
        if client == "attacker":
            tally.add(client, attacker_fault)
        else:
            tally.add(client, Fault.INVALID_ARGS if rng.random() < honest_fault else None)
        if i % 50 == 0 and tally.clean([ARGS, JSON], 0.01, drop=SETTINGS.min_clients - 1):
            return i
    return None


@pytest.mark.parametrize(("honest", "weight"), [(3, 5), (10, 3), (3, 30)])
def test_one_client_s_own_faults_cannot_hold_everyone_s_demotion(honest: int, weight: float) -> None:
    # The pair is sound again (0.25x its 2% invalidArgs ceiling); one client fails every call.
    assert _traffic(Tally(EVERYONE, CAP), honest, weight, 0.005, Fault.INVALID_ARGS) is not None


def test_without_the_cap_a_client_flooding_clean_calls_held_everyone_s_demotion() -> None:
    # 10x all the others' calls together pushed theirs out of the tally: never ended.
    assert _traffic(Tally(EVERYONE), 3, 30, 0.005, None) is None


@pytest.mark.parametrize("weight", [10, 30, 100])
def test_one_client_flooding_clean_calls_cannot_hold_everyone_s_demotion(weight: float) -> None:
    # 3x-33x all the others' calls together: capped, the others' calls stay in the tally.
    assert _traffic(Tally(EVERYONE, CAP), 3, weight, 0.005, None) is not None


@pytest.mark.parametrize("weight", [1, 5, 20, 100])
def test_one_client_s_clean_calls_cannot_end_everyone_s_demotion(weight: float) -> None:
    # The pair still drifts (5x its ceiling) for the three honest clients.
    assert _traffic(Tally(EVERYONE, CAP), 3, weight, 0.10, None) is None
