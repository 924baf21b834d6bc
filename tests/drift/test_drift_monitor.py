"""The drift monitor: evidence per client and for everyone, demotions and their ends, pins,
clearing; no server needed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import wait_until

from gatekeeper.drift.monitor import ANONYMOUS, DriftMonitor
from gatekeeper.drift.window import DriftSettings
from gatekeeper.observe import metrics
from gatekeeper.protocols.base import Call
from gatekeeper.rules.tiers import Tier
from gatekeeper.store.profile import Profile

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
    mon = DriftMonitor(DriftSettings(), remeasure=remeasured.append, clock=clock)
    yield mon
    mon.close()


LARGE = profile(Tier.LARGE)
MEASURED = Served("m@default", Tier.LARGE, "measured", LARGE)
KEY = MEASURED.key


def feed(mon: DriftMonitor, calls: list[Call], times: int = 1, client: str | None = "key:a", served=MEASURED) -> None:
    for _ in range(times):
        mon.submit(served, calls, OFFERED, client)
    mon.drain()


def tier_for(mon: DriftMonitor, client: str | None) -> Tier:
    demotion = mon.demotion(KEY, client)
    return demotion.to_tier if demotion is not None else Tier.LARGE


def test_a_sound_pair_is_tracked_and_not_demoted(monitor: DriftMonitor) -> None:
    feed(monitor, [GOOD, GOOD], times=600)
    report = monitor.report()[KEY]
    assert report["window"]["calls"] == 1000  # the window keeps the last 1000
    assert not report["drifting"] and report["demoted"] is None and report["clientsDemoted"] == {}
    assert report["rates"]["invalidArgs"]["score"] == 0.0 and report["rates"]["invalidArgs"]["threshold"] == 12.1
    assert monitor.demotion(KEY, "key:a") is None


def test_one_clients_failing_traffic_demotes_the_pair_for_that_client_only(
    monitor: DriftMonitor, remeasured: list[str]
) -> None:
    before = metrics.DRIFT_DEMOTIONS.labels(from_tier="large", to_tier="medium")._value.get()
    feed(monitor, [GOOD, BAD_ARGS], times=20, client="key:a")
    demotion = monitor.demotion(KEY, "key:a")
    assert demotion is not None and (demotion.from_tier, demotion.to_tier) == (Tier.LARGE, Tier.MEDIUM)
    assert demotion.client == "key:a" and "invalidArgs" in demotion.reason and "one client" in demotion.reason
    # The evidence names the tool, the fault and the arguments' shape, never their values.
    shape = {"type": "object", "chars": 10, "keys": {"n": "string(1)"}}
    assert demotion.examples[0] == {"fault": "invalidArgs", "name": "count", "shape": shape}
    assert monitor.demotion(KEY, "key:b") is None and monitor.demotion(KEY, None) is None
    assert monitor.demotion(KEY, ANONYMOUS) is None
    assert remeasured == []  # one client's traffic never costs a measurement
    assert metrics.DRIFT_DEMOTIONS.labels(from_tier="large", to_tier="medium")._value.get() == before + 1
    report = monitor.report()[KEY]
    assert report["demoted"] is None and list(report["clientsDemoted"]) == ["key:a"]
    assert [e["event"] for e in report["history"]] == ["demoted"]


def test_failing_traffic_from_min_clients_demotes_everyone_and_schedules_a_measurement(
    monitor: DriftMonitor, remeasured: list[str]
) -> None:
    for _ in range(60):
        for client in ("key:a", "key:b", "key:c"):
            feed(monitor, [GOOD, BAD_ARGS], client=client)
    demotion = monitor.demotion(KEY, None)
    assert demotion is not None and demotion.client is None and demotion.to_tier is Tier.MEDIUM
    assert all(tier_for(monitor, c) is Tier.MEDIUM for c in ("key:z", ANONYMOUS, None))
    assert remeasured == [KEY]
    assert "3 clients" in demotion.reason
    events = [e["event"] for e in monitor.report()[KEY]["history"]]
    assert events[-2:] == ["demoted", "remeasure"]


def test_one_client_flooding_failures_beside_healthy_ones_never_demotes_everyone(monitor: DriftMonitor) -> None:
    for _ in range(500):
        feed(monitor, [BAD_ARGS, INVENTED], client="key:attacker")
        for client in ("key:a", "key:b", "key:c"):
            feed(monitor, [GOOD], client=client)
    assert monitor.demotion(KEY, None) is None
    assert tier_for(monitor, "key:attacker") is Tier.MEDIUM  # it only demoted itself
    assert all(tier_for(monitor, c) is Tier.LARGE for c in ("key:a", "key:b", "key:c", ANONYMOUS))


def test_anonymous_clients_share_one_identity_that_never_counts_for_everyone(monitor: DriftMonitor) -> None:
    for _ in range(60):
        feed(monitor, [BAD_ARGS], client=None)
    assert tier_for(monitor, ANONYMOUS) is Tier.MEDIUM
    assert monitor.demotion(KEY, None) is None and tier_for(monitor, "key:a") is Tier.LARGE
    assert monitor.report()[KEY]["rates"]["invalidArgs"]["score"] == 0.0  # no evidence for everyone


def test_a_clients_demotion_lasts_while_the_fault_does_and_clean_traffic_ends_it(monitor: DriftMonitor) -> None:
    feed(monitor, [BAD_ARGS], times=20)
    feed(monitor, [GOOD, GOOD, GOOD, BAD_ARGS], times=500)  # 25%: still failing
    assert tier_for(monitor, "key:a") is Tier.MEDIUM
    feed(monitor, [GOOD], times=458)  # ln(100) / -ln(0.99) = 458.2 clean calls for the 1% ceiling
    assert tier_for(monitor, "key:a") is Tier.MEDIUM
    feed(monitor, [GOOD], times=1000)
    assert tier_for(monitor, "key:a") is Tier.LARGE
    history = monitor.report()[KEY]["history"]
    assert history[-1]["event"] == "ended" and "back under the ceilings" in history[-1]["detail"]


def test_another_clients_clean_traffic_does_not_end_a_clients_demotion(monitor: DriftMonitor) -> None:
    feed(monitor, [BAD_ARGS], times=20, client="key:a")
    feed(monitor, [GOOD], times=2000, client="key:b")
    assert tier_for(monitor, "key:a") is Tier.MEDIUM


def demote_everyone(monitor: DriftMonitor) -> None:
    for _ in range(30):
        for client in ("key:a", "key:b", "key:c"):
            feed(monitor, [BAD_ARGS], client=client)
    assert monitor.demotion(KEY, None) is not None


def test_one_client_flooding_clean_calls_cannot_end_everyones_demotion(monitor: DriftMonitor) -> None:
    demote_everyone(monitor)
    feed(monitor, [GOOD], times=5000, client="key:flooder")
    for client in ("key:a", "key:b"):
        feed(monitor, [GOOD], times=300, client=client)
    assert monitor.demotion(KEY, None) is not None
    since = monitor.report()[KEY]["demoted"]["since"]
    # The flooder holds at most `window_calls` (1,000) of the tally, and none of them counts.
    assert since["calls"] <= 1000 + 2 * 300 + 90 and since["calls"] - since["counted"] >= 1000


def test_clean_traffic_of_min_clients_ends_everyones_demotion(monitor: DriftMonitor) -> None:
    demote_everyone(monitor)  # and it kept failing for a while: those calls leave the window first
    for _ in range(800):
        for client in ("key:a", "key:b", "key:c"):
            feed(monitor, [GOOD], client=client)
    assert monitor.demotion(KEY, None) is not None
    for _ in range(300):
        for client in ("key:a", "key:b", "key:c"):
            feed(monitor, [GOOD], client=client)
    assert monitor.demotion(KEY, None) is None
    assert monitor.report()[KEY]["history"][-1]["event"] == "ended"


def test_a_measurement_during_a_demotion_does_not_end_it(monitor: DriftMonitor) -> None:
    feed(monitor, [INVENTED], times=20)
    newer = profile(Tier.LARGE, tested_at="2026-11-30T11:00:00+00:00")
    monitor.profile_landed(KEY, newer)
    feed(monitor, [GOOD], served=Served(KEY, Tier.LARGE, "measured", newer))
    assert tier_for(monitor, "key:a") is Tier.MEDIUM
    assert monitor.report()[KEY]["history"][-1]["event"] == "remeasured"


def test_an_admin_clears_every_demotion_and_its_evidence(monitor: DriftMonitor) -> None:
    feed(monitor, [BAD_ARGS], times=20, client="key:a")
    demote_everyone(monitor)
    assert monitor.clear(KEY) is True
    assert monitor.demotion(KEY, "key:a") is None and monitor.demotion(KEY, None) is None
    feed(monitor, [GOOD])
    assert monitor.demotion(KEY, "key:a") is None
    assert monitor.clear(KEY) is False


def test_pins_are_never_demoted_but_their_drift_is_visible(monitor: DriftMonitor, remeasured: list[str]) -> None:
    pinned = Served("p@default", Tier.LARGE, "pinned")
    feed(monitor, [BAD_ARGS], times=20, served=pinned)
    assert monitor.demotion("p@default", "key:a") is None and remeasured == []
    report = monitor.report()["p@default"]
    assert report["drifting"] and report["demoted"] is None and report["clientsDemoted"] == {}
    assert report["history"][0]["event"] == "drifting" and "pinned" in report["history"][0]["detail"]
    feed(monitor, [GOOD], times=1000, served=pinned)
    assert not monitor.report()["p@default"]["drifting"]
    assert monitor.report()["p@default"]["history"][-1]["event"] == "recovered"


def test_small_has_no_lower_tier(monitor: DriftMonitor) -> None:
    small = Served("s@default", Tier.SMALL, "measured", profile(Tier.SMALL))
    feed(monitor, [INVENTED], times=40, served=small)
    assert monitor.report()["s@default"]["drifting"] and monitor.demotion("s@default", "key:a") is None


def test_unmeasured_pairs_and_answers_without_calls_are_not_tracked(monitor: DriftMonitor) -> None:
    feed(monitor, [INVENTED], times=20, served=Served("u@default", Tier.SMALL, "unmeasured"))
    feed(monitor, [], times=5)
    assert monitor.report() == {}


def test_turned_off_it_records_nothing(clock: Clock) -> None:
    mon = DriftMonitor(DriftSettings(enabled=False), clock=clock)
    feed(mon, [INVENTED], times=50)
    assert mon.report() == {}


def test_the_worker_judges_without_being_asked(monitor: DriftMonitor) -> None:
    for _ in range(20):
        monitor.submit(MEASURED, [INVENTED], OFFERED, "key:a")
    wait_until(lambda: monitor.demotion(KEY, "key:a") is not None, "the worker to judge the queued answers")


def test_new_settings_keep_the_demotions(monitor: DriftMonitor) -> None:
    feed(monitor, [BAD_ARGS], times=600)
    monitor.reconfigure(DriftSettings(window_calls=460, detect_ratio=4))  # the least that can end a demotion
    report = monitor.report()[KEY]
    assert report["window"]["calls"] == 460 and report["window"]["maxCalls"] == 460
    assert monitor.demotion(KEY, "key:a") is not None
    monitor.reconfigure(DriftSettings(enabled=False))
    assert monitor.demotion(KEY, "key:a") is None  # off: nothing demotes


def test_calls_to_tools_the_tier_hid_are_no_evidence(monitor: DriftMonitor) -> None:
    hidden = Call("execute_command", "{}", False)  # offered by the client, hidden by the tier
    for _ in range(50):
        monitor.submit(MEASURED, [hidden, GOOD], OFFERED, "key:a", hidden=["execute_command"])
    monitor.drain()
    report = monitor.report()[KEY]
    assert report["window"]["calls"] == 50 and report["window"]["notOffered"] == 0
    assert monitor.demotion(KEY, "key:a") is None


def test_a_pair_keeps_a_bounded_number_of_client_demotions(clock: Clock, monkeypatch) -> None:
    monkeypatch.setattr("gatekeeper.drift.monitor.MAX_CLIENTS", 3)
    mon = DriftMonitor(DriftSettings(min_clients=10), clock=clock)
    for i in range(4):
        clock.now += 1
        feed(mon, [BAD_ARGS], times=12, client=f"key:{i}")
    assert [c for c in ("key:0", "key:1", "key:2", "key:3") if mon.demotion(KEY, c)] == ["key:1", "key:2", "key:3"]
    assert "dropped" in mon.report()[KEY]["history"][-2]["detail"]
    mon.close()


def test_evidence_shows_argument_values_only_when_the_operator_opts_in(clock: Clock) -> None:
    mon = DriftMonitor(DriftSettings(evidence_values=True), clock=clock)
    try:
        feed(mon, [GOOD, BAD_ARGS], times=20, client="key:a")
        demotion = mon.demotion(KEY, "key:a")
        assert demotion is not None
        assert demotion.examples[0]["arguments"] == '{"n": "5"}'
        assert demotion.examples[0]["shape"] == {"type": "object", "chars": 10, "keys": {"n": "string(1)"}}
    finally:
        mon.close()


def test_the_shape_of_arguments_names_keys_types_and_sizes_never_values() -> None:
    from gatekeeper.drift.window import shape

    secret = "sk-live-0123456789abcdef"
    text = json.dumps({"path": "/etc/x", "content": secret, "n": 2, "f": 1.5, "ok": True, "no": None, "l": [1, 2]})
    found = shape(text)
    assert found["keys"] == {
        "path": "string(6)",
        "content": f"string({len(secret)})",
        "n": "integer",
        "f": "number",
        "ok": "boolean",
        "no": "null",
        "l": "array(2)",
    }
    assert secret not in json.dumps(found)
    assert shape('{"cmd": "rm -rf /", NaN}') == {"json": False, "chars": 24}
    assert shape('"just a string"') == {"type": "string(13)", "chars": 15}
    many = shape(json.dumps({f"k{i}": i for i in range(40)}))
    assert len(many["keys"]) == 16 and many["moreKeys"] == 24
