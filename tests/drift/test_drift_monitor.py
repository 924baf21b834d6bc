"""The drift monitor: windows per pair, demotion and its end, pins, clearing; no server needed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import wait_until

from gatekeeper import metrics
from gatekeeper.drift.monitor import DriftMonitor
from gatekeeper.drift.window import DriftSettings
from gatekeeper.protocols.base import Call
from gatekeeper.store.profile import Profile
from gatekeeper.tiers import Tier

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
OFFERED = {"count": SCHEMA}
GOOD = Call("count", '{"n": 5}', True)
BAD_ARGS = Call("count", '{"n": "5"}', True)
INVENTED = Call("launch_missiles", "{}", False)


def profile(tier: Tier, tested_at: str = "2026-11-30T10:00:00+00:00") -> Profile:
    return Profile(
        model="m",
        provider="p",
        tier=tier,
        scores={},
        tokens_per_second=1.0,
        tested_at=tested_at,
        benchmark_version=1,
        tests_hash="abcd1234",
    )


@dataclass(frozen=True)
class Served:
    key: str
    tier: Tier
    source: str
    profile: Profile | None = None


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def remeasured() -> list[str]:
    return []


@pytest.fixture
def monitor(clock: Clock, remeasured: list[str]) -> Iterator[DriftMonitor]:
    settings = DriftSettings(window_calls=50, window_s=600, min_calls=10)
    mon = DriftMonitor(settings, remeasure=remeasured.append, clock=clock)
    yield mon
    mon.close()


LARGE = profile(Tier.LARGE)
MEASURED = Served("m@default", Tier.LARGE, "measured", LARGE)


def feed(mon: DriftMonitor, served: Served, calls: list[Call], times: int = 1) -> None:
    for _ in range(times):
        mon.submit(served, calls, OFFERED)
    mon.drain()


def test_a_sound_pair_is_tracked_and_not_demoted(monitor: DriftMonitor) -> None:
    feed(monitor, MEASURED, [GOOD, GOOD], times=30)
    report = monitor.report()["m@default"]
    assert report["window"]["calls"] == 50  # the window keeps the last 50
    assert not report["drifting"] and report["demoted"] is None
    assert monitor.demotion("m@default", LARGE) is None


def test_steady_bad_arguments_demote_one_tier_and_schedule_a_measurement(
    monitor: DriftMonitor, remeasured: list[str]
) -> None:
    before = metrics.DRIFT_DEMOTIONS.labels(from_tier="large", to_tier="medium")._value.get()
    feed(monitor, MEASURED, [GOOD, BAD_ARGS], times=10)
    demotion = monitor.demotion("m@default", LARGE)
    assert demotion is not None and (demotion.from_tier, demotion.to_tier) == (Tier.LARGE, Tier.MEDIUM)
    assert "invalidArgs" in demotion.reason
    assert demotion.examples[0] == {"fault": "invalidArgs", "name": "count", "arguments": '{"n": "5"}'}
    assert remeasured == ["m@default"]
    assert metrics.DRIFT_DEMOTIONS.labels(from_tier="large", to_tier="medium")._value.get() == before + 1
    events = [e["event"] for e in monitor.report()["m@default"]["history"]]
    assert events == ["demoted", "remeasure"]


def test_more_bad_calls_while_demoted_do_not_demote_again(monitor: DriftMonitor, remeasured: list[str]) -> None:
    feed(monitor, MEASURED, [BAD_ARGS], times=20)
    demoted = Served("m@default", Tier.MEDIUM, "demoted", LARGE)
    feed(monitor, demoted, [BAD_ARGS, INVENTED], times=20)
    assert remeasured == ["m@default"]
    assert monitor.demotion("m@default", LARGE).to_tier is Tier.MEDIUM  # type: ignore[union-attr]


def test_a_newer_profile_ends_the_demotion_and_starts_a_fresh_window(monitor: DriftMonitor) -> None:
    feed(monitor, MEASURED, [INVENTED], times=20)
    assert monitor.demotion("m@default", LARGE) is not None
    newer = profile(Tier.LARGE, tested_at="2026-11-30T11:00:00+00:00")
    assert monitor.demotion("m@default", newer) is None
    feed(monitor, Served("m@default", Tier.LARGE, "measured", newer), [GOOD])
    report = monitor.report()["m@default"]
    assert report["demoted"] is None and report["window"]["calls"] == 1
    assert report["history"][-1]["event"] == "ended" and "newer profile" in report["history"][-1]["detail"]


def test_a_landed_measurement_ends_the_demotion_even_with_the_same_timestamp(monitor: DriftMonitor) -> None:
    feed(monitor, MEASURED, [INVENTED], times=20)
    monitor.profile_landed("m@default", profile(Tier.MEDIUM))
    assert monitor.demotion("m@default", LARGE) is None
    assert monitor.report()["m@default"]["history"][-1]["detail"] == "re-measured: tier medium"


def test_an_admin_clears_a_demotion_and_its_evidence(monitor: DriftMonitor) -> None:
    feed(monitor, MEASURED, [BAD_ARGS], times=20)
    assert monitor.clear("m@default") is True
    assert monitor.demotion("m@default", LARGE) is None
    feed(monitor, MEASURED, [GOOD])
    assert monitor.demotion("m@default", LARGE) is None
    assert monitor.clear("m@default") is False


def test_pins_are_never_demoted_but_their_drift_is_visible(monitor: DriftMonitor, remeasured: list[str]) -> None:
    pinned = Served("p@default", Tier.LARGE, "pinned")
    feed(monitor, pinned, [BAD_ARGS], times=20)
    assert monitor.demotion("p@default", None) is None and remeasured == []
    report = monitor.report()["p@default"]
    assert report["drifting"] and report["demoted"] is None
    assert report["history"][0]["event"] == "drifting" and "pinned" in report["history"][0]["detail"]


def test_small_has_no_lower_tier(monitor: DriftMonitor) -> None:
    small = Served("s@default", Tier.SMALL, "measured", profile(Tier.SMALL))
    feed(monitor, small, [INVENTED], times=20)
    assert monitor.report()["s@default"]["drifting"] and monitor.demotion("s@default", profile(Tier.SMALL)) is None


def test_old_calls_leave_the_window_by_time(monitor: DriftMonitor, clock: Clock) -> None:
    feed(monitor, MEASURED, [BAD_ARGS], times=9)  # one short of a verdict
    clock.now += 601
    feed(monitor, MEASURED, [GOOD], times=1)
    assert monitor.report()["m@default"]["window"]["calls"] == 1
    assert monitor.demotion("m@default", LARGE) is None


def test_unmeasured_pairs_and_answers_without_calls_are_not_tracked(monitor: DriftMonitor) -> None:
    feed(monitor, Served("u@default", Tier.SMALL, "unmeasured"), [INVENTED], times=20)
    feed(monitor, MEASURED, [], times=5)
    assert monitor.report() == {}


def test_turned_off_it_records_nothing(clock: Clock) -> None:
    mon = DriftMonitor(DriftSettings(enabled=False), clock=clock)
    feed(mon, MEASURED, [INVENTED], times=50)
    assert mon.report() == {}


def test_the_worker_judges_without_being_asked(monitor: DriftMonitor) -> None:
    for _ in range(20):
        monitor.submit(MEASURED, [INVENTED], OFFERED)
    wait_until(lambda: monitor.demotion("m@default", LARGE) is not None, "the worker to judge the queued answers")


def test_new_settings_resize_the_windows_and_keep_the_demotions(monitor: DriftMonitor) -> None:
    feed(monitor, MEASURED, [BAD_ARGS], times=20)
    monitor.reconfigure(DriftSettings(window_calls=5, min_calls=5))
    report = monitor.report()["m@default"]
    assert report["window"]["calls"] == 5 and report["window"]["maxCalls"] == 5
    assert monitor.demotion("m@default", LARGE) is not None
    monitor.reconfigure(DriftSettings(enabled=False))
    assert monitor.demotion("m@default", LARGE) is None  # off: nothing demotes
