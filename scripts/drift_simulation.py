"""Drift's sequential test on simulated traffic whose true fault rates are known.

Prints, for the default settings:
  0. the window rule the test replaced, for comparison: its false demotions when looked at
     after every call;
  1. the false-demotion rate over 10,000 calls of a model at 0.9x and 1.0x every ceiling
     (`large` and `medium`), with a 95% upper bound on it, against the stated 1%;
  2. the delay (calls after the fault starts) until the demotion, at 1.5x, 2x and 5x one ceiling;
  3. through the real DriftMonitor (fake clock, no threads): what one client can do beside
     healthy ones, how fast faulty traffic spread over 3 or 10 clients demotes everyone, and how
     many clean calls end the demotion;
  4. what judging costs the worker thread per answer;
  5. how a demotion ends: calls until live traffic at 0x-1x the ceilings restores the pair, and
     how often traffic still at 2x-5x the ceilings restores it anyway (one client, `Tally`).

    python scripts/drift_simulation.py             # about 8 minutes on a busy core
    python scripts/drift_simulation.py --runs 2000 # under a minute, coarser
    python scripts/drift_simulation.py --only 5 --restore-ratio 1   # section 5 under another restore level
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the simulated traffic the tests use

from drift_traffic import first_alarm

from gatekeeper.drift.monitor import DriftMonitor
from gatekeeper.drift.sequential import Cusum, Tally, binomial_cdf, cusums_for
from gatekeeper.drift.window import DriftSettings, Fault
from gatekeeper.observe import logs
from gatekeeper.protocols.base import Call
from gatekeeper.rules.tiers import Tier
from gatekeeper.store.profile import Profile

SETTINGS = DriftSettings()


def tests(tier: Tier) -> dict[Fault, Cusum]:
    return cusums_for(SETTINGS.ceilings_for(tier), SETTINGS)


def upper95(hits: int, runs: int) -> float:
    """Clopper-Pearson one-sided 95% upper bound of hits / runs (bisection on the binomial CDF)."""
    lo, hi = hits / runs, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if binomial_cdf(hits, runs, mid) > 0.05 else (lo, mid)
    return hi


def old_rule(runs: int, rng: random.Random) -> None:
    """The rule the CUSUM replaced, for comparison: over the last 200 calls (at least 50), a
    kind's Wilson lower bound at 99% (one-sided) above its ceiling demotes; judged after every
    call, on `large`'s three kinds."""
    z = 2.326
    ceilings = {f: t.ceiling for f, t in tests(Tier.LARGE).items()}

    def lower(k: int, n: int) -> float:
        p = k / n
        centre, margin = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return (centre - margin) / (1 + z * z / n)

    print(f"0. The window rule it replaces, looked at after every call ({runs:,} runs)")
    for factor in (0.9, 1.0):
        within = {1000: 0, 5000: 0}
        for _ in range(runs):
            window: deque[Fault | None] = deque()
            counts = dict.fromkeys(ceilings, 0)
            for call in range(1, 5001):
                draw, fault, total = rng.random(), None, 0.0
                for kind, ceiling in ceilings.items():
                    total += factor * ceiling
                    if draw < total:
                        fault = kind
                        break
                window.append(fault)
                if fault is not None:
                    counts[fault] += 1
                if len(window) > 200 and (old := window.popleft()) is not None:
                    counts[old] -= 1
                n = len(window)
                if n >= 50 and any(counts[k] and lower(counts[k], n) > c for k, c in ceilings.items()):
                    for limit in within:
                        within[limit] += call <= limit
                    break
        shown = ", ".join(f"{hits / runs:.1%} within {limit:,} calls" for limit, hits in within.items())
        print(f"   `large` at {factor:.1f}x its ceilings: demoted {shown}")
    print()


def false_alarms(runs: int, rng: random.Random) -> None:
    print(f"1. False demotions within {SETTINGS.horizon_calls:,} calls (stated bound 1%)")
    print("   tier     rates             demoted   95% upper bound")
    for tier in (Tier.LARGE, Tier.MEDIUM):
        cusums = tests(tier)
        cell = runs if tier is Tier.LARGE else runs // 4  # medium's calls fault 4x as often: 4x the steps
        for factor in (0.9, 1.0):
            rates = {f: factor * t.ceiling for f, t in cusums.items()}
            hits = sum(first_alarm(cusums, rates, SETTINGS.horizon_calls, rng) is not None for _ in range(cell))
            shown = f"{hits / cell:7.3%}   {upper95(hits, cell):.3%}"
            print(f"   {tier.value:7}  {factor:.1f}x ceilings    {shown}   ({cell:,} runs)")


def delays(runs: int, rng: random.Random) -> None:
    print(f"\n2. Calls from the start of a fault to the demotion (`large`; the other kinds at 0.9x; {runs:,} runs)")
    print("   fault (ceiling)         rate   median    p90   caught within 10,000")
    cusums = tests(Tier.LARGE)
    for fault in (Fault.INVALID_ARGS, Fault.INVALID_JSON):
        for factor in (1.5, 2.0, 5.0):
            rates = {f: 0.9 * t.ceiling for f, t in cusums.items()} | {fault: factor * cusums[fault].ceiling}
            found = [first_alarm(cusums, rates, 100_000, rng) for _ in range(runs)]
            got = sorted(d if d is not None else 10**9 for d in found)
            median, p90 = got[len(got) // 2], got[int(len(got) * 0.9)]
            within = sum(d <= 10_000 for d in got) / runs
            shown = [f"{v:6,}" if v < 10**9 else " >100k" for v in (median, p90)]
            label = f"{fault.value} ({cusums[fault].ceiling})"
            print(f"   {label:22} {factor:4.1f}x  {shown[0]}  {shown[1]}   {within:6.1%}")


# -- through the real monitor ---------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
OFFERED = {"count": SCHEMA}
GOOD, BAD = Call("count", '{"n": 5}', True), Call("count", '{"n": "5"}', True)
PROFILE = Profile(
    model="m",
    provider="p",
    tier=Tier.LARGE,
    scores={},
    tokens_per_second=1.0,
    tested_at="2026-12-01T10:00:00+00:00",
    benchmark_version=1,
    tests_hash="abcd1234",
)


class Served:
    key, tier, source, profile = "m@default", Tier.LARGE, "measured", PROFILE


class Monitor:
    """A DriftMonitor judged call by call (drain after each answer), on a fake clock."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.mon = DriftMonitor(SETTINGS, clock=lambda: self.now)

    def send(self, client: str, faulty: bool) -> None:
        self.mon.submit(Served(), [BAD if faulty else GOOD], OFFERED, client)
        self.mon.drain()
        self.now += 0.01

    def demoted(self, client: str | None) -> bool:
        return self.mon.demotion("m@default", client) is not None


def one_client_alone(runs: int, rng: random.Random) -> None:
    calls = 10_000
    everyone = own = 0
    for _ in range(runs):
        m = Monitor()
        for i in range(calls):
            if i % 4 == 0:
                m.send("key:attacker", True)  # a quarter of the traffic, every call faulty
            else:
                m.send(f"key:h{i % 3}", rng.random() < 0.9 * 0.02)
        everyone += m.demoted(None)
        own += m.demoted("key:attacker")
    print(f"\n3. Through DriftMonitor (min_clients {SETTINGS.min_clients}; {runs} runs each)")
    print(
        f"   one client failing every call beside 3 healthy ones (0.9x), {calls:,} calls: demoted for everyone "
        f"{everyone}/{runs}, for itself {own}/{runs}"
    )


def spread(runs: int, clients: int, rng: random.Random) -> None:
    to_everyone: list[int] = []
    to_own: list[int] = []
    restored: list[int] = []
    for _ in range(runs):
        m = Monitor()
        for i in range(2000):  # healthy first
            m.send(f"key:{i % clients}", rng.random() < 0.9 * 0.02)
        first_own = None
        for i in range(20_000):
            m.send(f"key:{i % clients}", rng.random() < 5 * 0.02)
            if first_own is None and m.demoted(f"key:{i % clients}"):
                first_own = i + 1
            if m.demoted(None):
                to_everyone.append(i + 1)
                break
        to_own.append(first_own or 20_000)
        for i in range(50_000):  # the fault is fixed: invalidArgs at 0.225x its 2% ceiling
            m.send(f"key:{i % clients}", rng.random() < 0.9 * 0.005)
            if not m.demoted(None):
                restored.append(i + 1)
                break
    print(
        f"   invalidArgs at 5x, spread evenly over {clients:2} clients: the first client demoted after a median "
        f"of {statistics.median(to_own):.0f} calls, everyone after {statistics.median(to_everyone):.0f} "
        f"(max {max(to_everyone)}, {len(to_everyone)}/{runs} within 20,000); restored after "
        f"{statistics.median(restored):.0f} clean calls (max {max(restored)}, {len(restored)}/{runs})"
    )


def worker_cost(answers: int = 5000) -> None:
    """What judging costs the worker thread per answer (never the request: it only queues)."""
    two = [GOOD, Call("count", '{"n": 7}', True)]
    best = math.inf
    for _ in range(5):
        m = Monitor()
        started = time.perf_counter()
        for i in range(answers):
            m.mon.submit(Served(), two, OFFERED, f"key:{i % 10}")
        m.mon.drain()
        best = min(best, (time.perf_counter() - started) / answers)
        m.mon.close()
    print(f"\n4. The worker's cost: {best * 1e6:.0f} us per answer of two calls (classify, validate, judge; best of 5)")


def restoring(runs: int, rng: random.Random) -> None:
    """After a demotion, judged after every call as the monitor does (one client's tally,
    `window_calls` long): how soon traffic at or under the ceilings ends it, and how often
    traffic that still has one fault kind at 2x-5x its ceiling ends it anyway."""
    judged = tests(Tier.LARGE)
    alpha = 1 - SETTINGS.confidence
    print(f"\n5. How a demotion ends (`large`, restore_ratio {SETTINGS.restore_ratio}; {runs} runs each)")

    def first_restore(factors: dict[Fault, float], calls: int) -> int | None:
        tally = Tally(SETTINGS.window_calls)
        for i in range(calls):
            u, fault = rng.random(), None
            for f, factor in factors.items():  # at most one fault per call: the rates are small
                if u < factor * judged[f].ceiling:
                    fault = f
                    break
                u -= factor * judged[f].ceiling
            tally.add("key:c", fault)
            if tally.clean(judged.values(), alpha):
                return i + 1
        return None

    for factor in (0.0, 0.5, 0.9, 1.0):
        ends = [first_restore(dict.fromkeys(judged, factor), 20_000) for _ in range(runs)]
        done = [n for n in ends if n is not None]
        median = f"{statistics.median(done):6.0f}" if done else "     -"
        print(f"   every kind at {factor:.1f}x: restored within 20,000 calls {len(done)}/{runs}, median {median} calls")
    for kind in (Fault.INVALID_ARGS, Fault.INVALID_JSON):
        for factor in (2.0, 3.0, 5.0):
            factors = {**dict.fromkeys(judged, 0.9), kind: factor}
            hits = sum(first_restore(factors, 10_000) is not None for _ in range(runs))
            print(
                f"   {kind.value} still at {factor:.1f}x (the others 0.9x): restored within 10,000 calls "
                f"{hits}/{runs} (95% upper bound {upper95(hits, runs):.1%})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20_000, help="runs per false-alarm cell (default 20,000)")
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument(
        "--restore-ratio", type=float, help="drift.restore_ratio for section 5 (default: the setting's)"
    )
    parser.add_argument("--only", type=int, choices=range(6), help="run one section only")
    args = parser.parse_args()
    global SETTINGS
    if args.restore_ratio is not None:
        SETTINGS = DriftSettings(restore_ratio=args.restore_ratio)
    logs.configure("error")  # the figures, not a log line per demotion
    started = time.perf_counter()

    def rng(section: int) -> random.Random:  # one stream per section: each reproducible alone
        return random.Random(args.seed * 100 + section)

    def through_the_monitor() -> None:
        one_client_alone(max(args.runs // 2000, 3), rng(3))
        for clients in (3, 10):
            spread(max(args.runs // 2000, 3), clients, rng(clients))

    sections: list[Callable[[], None]] = [
        lambda: old_rule(max(args.runs // 20, 100), rng(0)),
        lambda: false_alarms(args.runs, rng(1)),
        lambda: delays(max(args.runs // 10, 200), rng(2)),
        through_the_monitor,
        worker_cost,
        lambda: restoring(max(args.runs // 100, 20), rng(5)),
    ]
    for i, section in enumerate(sections):
        if args.only is None or args.only == i:
            section()
    print(f"\n({time.perf_counter() - started:.0f} s, seed {args.seed})")


if __name__ == "__main__":
    main()
