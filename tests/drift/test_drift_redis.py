"""Demotions shared by replicas through a real redis-server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog
from conftest import wait_until
from scripted import free_port
from test_drift_monitor import BAD_ARGS, GOOD, MEASURED, OFFERED

from gatekeeper.drift.monitor import DriftMonitor
from gatekeeper.drift.window import DriftSettings
from gatekeeper.store.redis_demotions import DEMOTIONS, RedisDemotionBoard

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
        monitor = DriftMonitor(DriftSettings(), board=RedisDemotionBoard(server.url))
        opened.append(monitor)
        return monitor

    yield replica
    for monitor in opened:
        monitor.close()


CLIENT = "key:a"


def demote(monitor: DriftMonitor, clients: tuple[str, ...] = (CLIENT,)) -> None:
    for _ in range(20):
        for client in clients:
            monitor.submit(MEASURED, [BAD_ARGS], OFFERED, client)
    monitor.drain()
    assert monitor.demotion(KEY, clients[0]) is not None


def test_a_demotion_decided_by_one_replica_applies_to_all(replicas) -> None:
    one, two = replicas(), replicas()
    demote(one)
    wait_until(lambda: two.demotion(KEY, CLIENT) is not None, "the other replica to see the demotion")
    assert two.demotion(KEY, "key:b") is None  # still only that client's
    history = two.report()[KEY]["history"]
    assert history[-1]["event"] == "demoted" and "on another replica" in history[-1]["detail"]


def test_evidence_split_between_replicas_demotes_as_if_one_had_seen_it_all(replicas) -> None:
    # What demotes one replica (20 bad calls), sent half to each of two: neither alone has seen
    # enough, but a replica judges the other's evidence beside its own.
    alone = DriftMonitor(DriftSettings())
    for _ in range(10):
        alone.submit(MEASURED, [BAD_ARGS], OFFERED, CLIENT)
    alone.drain()
    assert alone.demotion(KEY, CLIENT) is None  # half the evidence is not enough
    alone.close()
    one, two = replicas(), replicas()
    for i in range(20):
        (one if i % 2 else two).submit(MEASURED, [BAD_ARGS], OFFERED, CLIENT)
    for monitor in (one, two):
        wait_until(lambda m=monitor: (m.drain(), m.demotion(KEY, CLIENT))[1] is not None, "a demotion on each")
    # The first replica to judge all 20 demotes; the other may take that demotion from the board
    # before the last of the first one's evidence reaches it (then its window holds fewer).
    calls = sorted(m.report()[KEY]["window"]["calls"] for m in (one, two))
    assert calls[-1] == 20 and calls[0] >= 10


def test_evidence_a_replica_cannot_read_is_skipped_and_logged(replicas) -> None:
    one = replicas()
    with structlog.testing.capture_logs() as logs:
        one._remote_evidence([{"key": KEY, "tier": "huge", "client": CLIENT, "at": 1.0, "calls": []}])
    assert [e["event"] for e in logs] == ["drift_evidence_skipped"] and "huge" in logs[0]["reason"]


def test_everyones_demotion_spreads_as_everyones(replicas) -> None:
    one, two = replicas(), replicas()
    demote(one, ("key:a", "key:b", "key:c"))
    wait_until(lambda: two.demotion(KEY, None) is not None, "the other replica to see everyone's demotion")


def test_a_replica_that_starts_later_finds_the_demotions_in_force(replicas, server) -> None:
    one = replicas()
    demote(one)
    wait_until(lambda: server.client().hexists(DEMOTIONS, f"{KEY}\t{CLIENT}"), "the demotion to reach Redis")
    late = replicas()
    wait_until(lambda: late.demotion(KEY, CLIENT) is not None, "the late replica to load it")


def test_clearing_on_one_replica_clears_everywhere(replicas, server) -> None:
    one, two = replicas(), replicas()
    demote(one)
    wait_until(lambda: two.demotion(KEY, CLIENT) is not None, "the demotion to spread")
    assert two.clear(KEY) is True
    wait_until(lambda: one.demotion(KEY, CLIENT) is None, "the clearing to spread")
    assert not server.client().hexists(DEMOTIONS, f"{KEY}\t{CLIENT}")
    one.submit(MEASURED, [GOOD], OFFERED, CLIENT)
    one.drain()
    assert one.demotion(KEY, CLIENT) is None


def test_a_resync_that_still_finds_a_demotion_cleared_here_does_not_bring_it_back(replicas, server) -> None:
    # The race CI met: Redis comes back, the listener resyncs and reads the demotion before this
    # replica's own clearing of it is written there.
    one = replicas()
    demote(one)
    slot = f"{KEY}\t{CLIENT}"
    wait_until(lambda: server.client().hexists(DEMOTIONS, slot), "the demotion to reach Redis")
    stale = json.loads(server.client().hget(DEMOTIONS, slot))
    assert one.clear(KEY) is True
    one._sync({slot: stale})  # what the listener does with what it read
    assert one.demotion(KEY, CLIENT) is None
    assert one.report()[KEY]["history"][-1]["event"] == "ended"


def test_an_outage_is_logged_once_and_never_with_the_password(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as gone:
        port = gone.port  # free again once it stops: connecting is refused
    board = RedisDemotionBoard(f"redis://:s3cret-pw@127.0.0.1:{port}/0", timeout_s=0.2)
    with structlog.testing.capture_logs() as logs:
        board.start(lambda record: None, lambda slot, why: None, lambda records: None)
        try:
            wait_until(lambda: len(logs) >= 1, "the outage to be logged")
            time.sleep(1.0)  # several reconnect attempts: the outage is still the same one
        finally:
            board.close()
    down = [entry for entry in logs if entry["event"] == "drift_redis_unavailable"]
    assert len(down) == 1, logs
    assert "s3cret-pw" not in repr(logs) and down[0]["store"] == f"redis://***@127.0.0.1:{port}/0"


def test_a_read_only_redis_queues_the_demotion_and_the_worker_goes_on(server) -> None:
    admin = server.client()
    admin.replicaof("127.0.0.1", free_port())  # a replica of nothing: READONLY to every write, as after a failover
    monitor = DriftMonitor(DriftSettings(), board=RedisDemotionBoard(server.url))
    try:
        demote(monitor)  # the board's write is refused: queued, not raised into the worker
        assert not admin.hexists(DEMOTIONS, f"{KEY}\t{CLIENT}")
        admin.replicaof("NO", "ONE")
        monitor.submit(MEASURED, [GOOD], OFFERED, "key:b")  # the next event sends the queue first
        monitor.clear(KEY)
        wait_until(lambda: monitor.report()[KEY]["history"][-1]["event"] == "ended", "the clearing")
        wait_until(lambda: not admin.hexists(DEMOTIONS, f"{KEY}\t{CLIENT}"), "the queue to be written")
        before = monitor.report()[KEY]["window"]["calls"]
        monitor.submit(MEASURED, [BAD_ARGS], OFFERED, CLIENT)
        monitor.drain()  # the worker still judges
        assert monitor.report()[KEY]["window"]["calls"] == before + 1
    finally:
        monitor.close()
