"""Demotions shared by replicas through a real redis-server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import wait_until
from test_drift_monitor import BAD_ARGS, GOOD, LARGE, MEASURED, OFFERED

from gatekeeper.drift.board import DEMOTIONS, RedisDemotionBoard
from gatekeeper.drift.monitor import DriftMonitor
from gatekeeper.drift.window import DriftSettings

redis_server = pytest.importorskip("redis_server", reason="tests/redis_server.py (the store's helper) is missing")
RedisServer = redis_server.RedisServer
pytestmark = pytest.mark.skipif(
    redis_server.server_binary() is None, reason="no redis-server (scripts/setup.sh installs it)"
)

KEY = MEASURED.key


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path) as running:
        yield running


@pytest.fixture
def replicas(server: RedisServer) -> Iterator[Callable[[], DriftMonitor]]:
    opened: list[DriftMonitor] = []

    def replica() -> DriftMonitor:
        monitor = DriftMonitor(DriftSettings(min_calls=10), board=RedisDemotionBoard(server.url))
        opened.append(monitor)
        return monitor

    yield replica
    for monitor in opened:
        monitor.close()


def demote(monitor: DriftMonitor) -> None:
    for _ in range(10):
        monitor.submit(MEASURED, [BAD_ARGS], OFFERED)
    monitor.drain()
    assert monitor.demotion(KEY, LARGE) is not None


def test_a_demotion_decided_by_one_replica_applies_to_all(replicas) -> None:
    one, two = replicas(), replicas()
    demote(one)
    wait_until(lambda: two.demotion(KEY, LARGE) is not None, "the other replica to see the demotion")
    history = two.report()[KEY]["history"]
    assert history[-1]["event"] == "demoted" and "on another replica" in history[-1]["detail"]


def test_a_replica_that_starts_later_finds_the_demotions_in_force(replicas, server) -> None:
    one = replicas()
    demote(one)
    wait_until(lambda: server.client().hexists(DEMOTIONS, KEY), "the demotion to reach Redis")
    late = replicas()
    wait_until(lambda: late.demotion(KEY, LARGE) is not None, "the late replica to load it")


def test_clearing_on_one_replica_clears_everywhere(replicas, server) -> None:
    one, two = replicas(), replicas()
    demote(one)
    wait_until(lambda: two.demotion(KEY, LARGE) is not None, "the demotion to spread")
    assert two.clear(KEY) is True
    wait_until(lambda: one.demotion(KEY, LARGE) is None, "the clearing to spread")
    assert not server.client().hexists(DEMOTIONS, KEY)
    one.submit(MEASURED, [GOOD], OFFERED)
    one.drain()
    assert one.demotion(KEY, LARGE) is None
