"""The Redis store against a real redis-server: same data as the file, events, leases, outages."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import make_profile, settings_for, wait_until
from fake_backend import FakeBackends
from redis_server import RedisServer, require_server

from gatekeeper import Gatekeeper
from gatekeeper.rules.tiers import Tier
from gatekeeper.store import JsonFileStore, open_store
from gatekeeper.store.redis import PROFILES, RedisStore


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    require_server()
    with RedisServer(tmp_path) as running:
        yield running


@pytest.fixture
def stores(server: RedisServer) -> Iterator[Callable[[], RedisStore]]:
    opened: list[RedisStore] = []

    def open_one() -> RedisStore:
        store = RedisStore(server.url)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def test_profiles_and_recommendations_round_trip_in_the_seed_format(server, stores, default_suite):
    profile = make_profile("m", Tier.MEDIUM, default_suite, effort="low")
    stores().save([profile], {"m": "low"})
    raw = server.client().hget(PROFILES, "m@low")
    assert json.loads(raw) == profile.to_json()
    data = RedisStore(server.url, listen=False).load()
    assert data.profiles == {"m@low": profile} and data.recommendations == {"m": "low"}


def test_a_bad_entry_is_skipped_and_left_untouched(server, stores, default_suite):
    server.client().hset(PROFILES, mapping={"bad@default": '{"model": "bad", "tier": "huge"}', "worse@x": "{oops"})
    store = stores()
    store.save([make_profile("m", Tier.LARGE, default_suite)])
    assert set(store.load().profiles) == {"m@default"}
    assert set(store.load().invalid) == {"bad@default", "worse@x"}
    assert server.client().hget(PROFILES, "worse@x") == b"{oops"


def test_a_save_on_one_replica_reaches_the_others(stores, default_suite):
    first, second = stores(), stores()
    first.save([make_profile("m", Tier.LARGE, default_suite)])
    wait_until(lambda: second.get("m@default") is not None, "the replicas to agree", timeout_s=10)
    assert second.delete("m@default") is True
    wait_until(lambda: first.get("m@default") is None, "the replicas to agree", timeout_s=10)


def test_change_listeners_hear_other_replicas(stores, default_suite):
    first, second = stores(), stores()
    heard: list[str] = []
    second.on_change(heard.append)
    first.save([make_profile("m", Tier.LARGE, default_suite)])
    wait_until(lambda: heard == ["m@default"], "the replicas to agree", timeout_s=10)


def test_a_warm_lookup_costs_no_round_trip(server, stores, default_suite):
    store = stores()
    store.save([make_profile("m", Tier.LARGE, default_suite)])
    server.stop()  # nothing to ask: the lookups below can only be answered locally
    try:
        assert all(store.get("m@default") is not None for _ in range(1000))
    finally:
        server.start()


def test_redis_down_serves_last_known_profiles_and_writes_when_back(server, stores, default_suite):
    store = stores()
    store.save([make_profile("known", Tier.LARGE, default_suite)])
    server.stop()
    assert store.get("known@default").tier == Tier.LARGE
    assert store.save([make_profile("late", Tier.MEDIUM, default_suite)]) is True  # queued
    assert store.get("late@default").tier == Tier.MEDIUM
    assert not store.up
    server.start()
    wait_until(
        lambda: server.client().hget(PROFILES, "late@default") is not None, "the replicas to agree", timeout_s=10
    )
    wait_until(lambda: store.up, "the replicas to agree", timeout_s=10)


def test_one_shot_commands_fail_loudly_when_redis_is_down(server):
    server.stop()
    try:
        with pytest.raises(Exception, match="Redis unavailable"):
            RedisStore(server.url, listen=False).load()
    finally:
        server.start()


def test_a_lease_is_exclusive_until_it_expires_and_tokens_grow(stores):
    a, b = stores().coordinator(), stores().coordinator()
    first = a.acquire("m@default", 0.3)
    assert first is not None and b.acquire("m@default", 0.3) is None
    assert a.renew(first, 0.3)
    second = wait_until(
        lambda: b.acquire("m@default", 5), "the lease to be freed", timeout_s=10
    )  # first's holder stopped renewing
    assert second.token > first.token
    assert a.renew(first, 0.3) is False
    a.release(first)  # releasing a lost lease leaves the new holder's alone
    assert a.acquire("m@default", 5) is None


def test_a_holder_that_lost_its_lease_cannot_overwrite_a_newer_result(stores, default_suite):
    store = stores()
    coordinator = store.coordinator()
    stale = coordinator.acquire("m@default", 0.2)
    newer = wait_until(lambda: coordinator.acquire("m@default", 5), "the lease to be freed", timeout_s=10)
    assert store.save([make_profile("m", Tier.SMALL, default_suite)], lease=newer) is True
    assert store.save([make_profile("m", Tier.LARGE, default_suite)], lease=stale) is False
    coordinator.release(newer)
    assert store.save([make_profile("m", Tier.LARGE, default_suite)], lease=stale) is False
    assert RedisStore(store.location, listen=False).get("m@default").tier == Tier.SMALL


def test_backoff_is_shared(stores):
    a, b = stores().coordinator(), stores().coordinator()
    assert a.record_failure("m@default", 30, 60) == (1, 30)
    assert 0 < b.backoff_s("m@default") <= 30
    b.clear_failures("m@default")
    assert a.backoff_s("m@default") == 0


def test_store_copy_moves_profiles_between_a_file_and_redis(server, tmp_path, default_suite):
    source = tmp_path / "source.json"
    JsonFileStore(source).save([make_profile("m", Tier.LARGE, default_suite, effort="low")], {"m": "low"})
    back = tmp_path / "back.json"
    for src, dst in ((str(source), server.url), (server.url, str(back))):
        done = subprocess.run(
            [sys.executable, "-m", "gatekeeper", "store", "copy", src, dst], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert "copied 1 profiles" in done.stdout
    assert json.loads(back.read_text()) == json.loads(source.read_text())


def test_open_store_picks_redis_for_redis_urls(server, tmp_path):
    store = open_store(server.url, listen=False)
    assert isinstance(store, RedisStore)
    store.close()
    assert isinstance(open_store(tmp_path / "x.json"), JsonFileStore)


def test_an_outage_longer_than_the_lease_costs_one_suite_run(server, tmp_path, default_suite):
    """Replica A finishes measuring while Redis is down: its result waits in memory, its lease
    expires. When Redis is back, replica B, asked for the pair at once, must not measure it again:
    it waits for A's queued result."""
    backends = FakeBackends(default_suite, held=True)
    settings = settings_for("http://127.0.0.1:9/v1", server.url, lazy={"lease_ttl_s": 1.0})
    with (
        Gatekeeper(settings, backend_factory=backends.factory) as a,
        Gatekeeper(settings, backend_factory=backends.factory) as b,
    ):
        flight = a.measure("m")
        wait_until(lambda: backends.calls["m"], "replica A to start measuring")
        server.stop()
        backends.release()
        assert flight.result(timeout=30).tier == Tier.LARGE  # saved in A's memory, queued for Redis
        assert a.store._pending, "the result should wait for Redis"
        time.sleep(2.5 * settings.lazy.lease_ttl_s)  # the outage outlasts A's lease
        server.start()
        assert b.tier_for("m")[1] in ("pending", "unmeasured")  # B's first request after the outage
        wait_until(lambda: b.lookup("m") is not None, "A's queued result to reach B", timeout_s=30)
        assert b.lookup("m").tier == Tier.LARGE
    assert backends.suite_runs("m") == 1
