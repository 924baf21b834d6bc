"""Drift demotions shared by the replicas of a gateway, through the Redis that holds their profiles.

Each replica judges the traffic it relays and the evidence the others publish (its windows stay
local: counters in Redis would put a round trip on every answer); a demotion decided by any of
them applies to all of them:

    {gatekeeper}:demotions   hash     slot -> demotion JSON (those in force)
    {gatekeeper}:drift       pub/sub  {"op": "demoted", "demotion": {...}} | {"op": "ended", "key": slot, "why"}
                                      | {"op": "evidence", "items": [...]}

A slot is `model@effort` for a demotion that applies to everyone, `model@effort<TAB>client` for
one that applies to one client identity.

Each replica also publishes the evidence it judged (a batch of classified calls per judging
round, never the calls themselves) and judges the others' beside its own, so N replicas behind
one balancer gather evidence as one would; evidence published while Redis is down is dropped
(logged once per outage): a replica then judges its own calls only, as without Redis.

Every replica mirrors the hash (loaded on connect, kept fresh by the channel), so resolving a
tier never waits on Redis. While Redis is down each replica keeps its own demotions, queues what
it must tell the others, and says so in the log; on reconnect it sends the queue, then resyncs.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import redis

from gatekeeper.observe import logs
from gatekeeper.observe.redact import redact_url
from gatekeeper.store.redis import connect, listen

log = logs.get_logger(__name__)

DEMOTIONS, CHANNEL = "{gatekeeper}:demotions", "{gatekeeper}:drift"
# Redis down, or refusing writes (READONLY after a failover, OOM): the event waits in `_pending`.
_ERRORS = (redis.RedisError, OSError)

Record = dict[str, Any]  # a demotion as stored (see `DriftMonitor` for its fields)


class RedisDemotionBoard:
    """Publishes this replica's demotions and their ends; mirrors everyone's."""

    def __init__(self, url: str, *, timeout_s: float = 1.0) -> None:
        self.location = redact_url(url)  # what logs show: never the password
        self.origin = uuid.uuid4().hex[:12]
        self._redis = connect(url, timeout_s)  # fails fast: the worker thread never hangs on Redis
        self._pending: list[tuple[str, Any]] = []  # ("demoted", record) | ("ended", (slot, why)) while down
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        self._stopped = threading.Event()
        self._unreachable = False  # logged once per outage
        self._thread: threading.Thread | None = None
        self._on_demoted: Callable[[Record], None] = lambda record: None
        self._on_ended: Callable[[str, str], None] = lambda key, why: None
        self._on_sync: Callable[[dict[str, Record]], None] = lambda records: None
        self._on_evidence: Callable[[list[Record]], None] = lambda items: None
        self._unshared = False  # evidence dropped in this outage (logged once)

    def start(
        self,
        on_demoted: Callable[[Record], None],
        on_ended: Callable[[str, str], None],
        on_sync: Callable[[dict[str, Record]], None],
        on_evidence: Callable[[list[Record]], None] | None = None,
    ) -> None:
        """Listen: `on_demoted`/`on_ended`/`on_evidence` for other replicas' events, `on_sync`
        with every demotion in force after each (re)connect."""
        self._on_demoted, self._on_ended, self._on_sync = on_demoted, on_ended, on_sync
        if on_evidence is not None:
            self._on_evidence = on_evidence
        self._thread = threading.Thread(target=self._listen, name="gatekeeper-drift-redis", daemon=True)
        self._thread.start()

    def publish(self, record: Record) -> None:
        self._send("demoted", record)

    def retract(self, slot: str, why: str) -> None:
        self._send("ended", (slot, why))

    def share(self, evidence: list[Record]) -> None:
        """Publish a batch of judged calls; not queued while Redis is down (evidence ages out of
        a window within minutes, and a replica's own judgement goes on meanwhile)."""
        try:
            self._redis.publish(CHANNEL, json.dumps({"op": "evidence", "origin": self.origin, "items": evidence}))
            self._unshared = False
        except _ERRORS as exc:
            if not self._unshared:
                log.warning("drift_evidence_unshared", store=self.location, reason=f"redis unavailable: {exc}")
            self._unshared = True

    def close(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._pending:
            log.error("drift_events_lost", count=len(self._pending), reason="closed while Redis was unavailable")
        with contextlib.suppress(Exception):  # closing a broken connection may fail; nothing to do
            self._redis.close()

    # -- sending ----------------------------------------------------------------------------

    def _send(self, op: str, what: Any) -> None:
        with self._lock:
            self._pending.append((op, what))  # in order, after any still waiting
        try:
            self._write_pending()
        except _ERRORS as exc:
            log.warning("drift_event_queued", op=op, reason=f"redis unavailable: {exc}")

    def _write_pending(self) -> None:
        """Write the queued events in order; an error leaves the rest queued. One writer at a
        time (the worker's sends and the listener's resync), so none is written twice or lost."""
        with self._writing:
            while True:
                with self._lock:
                    if not self._pending:
                        return
                    op, what = self._pending[0]
                self._write(op, what)
                with self._lock:
                    self._pending.pop(0)

    def _write(self, op: str, what: Any) -> None:
        pipe = self._redis.pipeline(transaction=True)
        if op == "demoted":
            pipe.hset(DEMOTIONS, what.get("slot") or what["key"], json.dumps(what))
            pipe.publish(CHANNEL, json.dumps({"op": op, "origin": self.origin, "demotion": what}))
        else:
            key, why = what
            pipe.hdel(DEMOTIONS, key)
            pipe.publish(CHANNEL, json.dumps({"op": op, "origin": self.origin, "key": key, "why": why}))
        pipe.execute()

    # -- listening --------------------------------------------------------------------------

    def _listen(self) -> None:
        listen(
            self._redis, CHANNEL, self._stopped, self._connected, self._on_message, self._down, "drift_listener_error"
        )

    def _connected(self) -> None:
        self._resync()
        self._unreachable = False

    def _down(self, exc: BaseException) -> None:
        if not self._unreachable:  # once per outage
            log.error(
                "drift_redis_unavailable", store=self.location, error=str(exc), serving="this replica's own demotions"
            )
        self._unreachable = True

    def _resync(self) -> None:
        # First what this replica could not tell the others while Redis was down (an error
        # leaves it queued and sends us round the reconnect loop).
        self._write_pending()
        raw: dict[bytes, bytes] = self._redis.hgetall(DEMOTIONS)  # type: ignore[assignment]
        records = {k.decode(): json.loads(v) for k, v in raw.items()}
        self._on_sync(records)

    def _on_message(self, raw: bytes) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if not isinstance(event, dict) or event.get("origin") == self.origin:
            return
        if event.get("op") == "demoted" and isinstance(event.get("demotion"), dict):
            self._on_demoted(event["demotion"])
        elif event.get("op") == "evidence" and isinstance(event.get("items"), list):
            self._on_evidence(event["items"])
        elif event.get("op") == "ended" and isinstance(event.get("key"), str):
            self._on_ended(event["key"], str(event.get("why") or "ended on another replica"))
