"""The Redis store: one view of profiles, leases and backoff for every replica of a gateway.

Layout (every key carries the hash tag `{gatekeeper}` so the scripts also run on Redis Cluster):

    {gatekeeper}:profiles         hash  model@effort -> profile JSON (the seed's format)
    {gatekeeper}:recommendations  hash  model -> effort
    {gatekeeper}:tokens           hash  lease name -> newest fencing token granted
    {gatekeeper}:written          hash  model@effort -> token of the last fenced write
    {gatekeeper}:lease:NAME       string "token|owner" with an expiry (SET NX PX)
    {gatekeeper}:failures:KEY     int   failed measurements in a row;  ...:backoff:KEY  expiry only
    {gatekeeper}:signed-out:ID    string  a console session signed out, expiring with the session
    {gatekeeper}:wrong-keys:SRC   int     wrong admin keys from one source in the current window
    {gatekeeper}:events           pub/sub channel: {"op": "saved", "profiles": {...}} | {"op": "deleted", "key"}

Each process keeps a full local mirror of the profiles, loaded when it connects and kept fresh
by the events, so looking up a warm pair never costs a round trip. When Redis is unreachable the
mirror keeps serving (logged with its age), writes wait in memory and land when Redis is back,
and a listener thread reconnects with backoff.

A measurement that finished during an outage waits in memory with its fencing token; its lease
may expire meanwhile. So that another replica does not measure the pair again before the queued
result lands, no replica takes a lease while it sees Redis down, nor for `_RECONNECT_GRACE_S`
after Redis comes back from an outage: longer than any replica needs to reconnect and flush.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from gatekeeper.errors import StoreError
from gatekeeper.observe import logs
from gatekeeper.observe.redact import redact_url
from gatekeeper.store.base import ChangeListener, Lease, StoreData, read_entries, read_entry
from gatekeeper.store.file import owner_id
from gatekeeper.store.profile import Profile

log = logs.get_logger(__name__)

T = TypeVar("T")
_NS = "{gatekeeper}"
PROFILES, RECOMMENDATIONS = f"{_NS}:profiles", f"{_NS}:recommendations"
TOKENS, WRITTEN, EVENTS = f"{_NS}:tokens", f"{_NS}:written", f"{_NS}:events"
_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
_STALE_LOG_EVERY_S = 10.0
_LISTENER_MAX_WAIT_S = 2.0  # longest pause between the listener's reconnect attempts
# A replica back from an outage reconnects within one pause and one connect timeout (1 s by
# default), and flushes its queued writes first thing: no lease for 5 s after an outage.
_RECONNECT_GRACE_S = 5.0

# SET NX PX with a token taken from a counter that only grows: the fencing token.
_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local token = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('SET', KEYS[1], token .. '|' .. ARGV[2], 'PX', ARGV[3])
return token
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# A fenced write lands only if no other holder has the lease now and no newer grant has written.
_FENCED_SAVE = """
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[2] then return 0 end
local newest = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local written = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
local token = tonumber(ARGV[3])
if token < newest or token < written then return 0 end
redis.call('HSET', KEYS[3], ARGV[1], token)
redis.call('HSET', KEYS[4], ARGV[1], ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[5], ARGV[6], ARGV[5]) end
redis.call('PUBLISH', KEYS[6], ARGV[7])
return 1
"""


def _lease_key(name: str) -> str:
    return f"{_NS}:lease:{name}"


class RedisStore:
    """Profiles in Redis, shared by every replica; see the module docstring for the layout.

    `listen=True` (the long-lived gateway) keeps the local mirror and the listener thread;
    `listen=False` (one-shot CLI commands) reads Redis directly and fails loudly when it is down.
    """

    def __init__(self, url: str, *, listen: bool = True, timeout_s: float = 1.0) -> None:
        self.location = redact_url(url)  # what logs, errors and pages show: never the password
        self.problem: str | None = None  # Redis holds profiles or nothing: never a non-store to refuse
        self._redis = connect(url, timeout_s)
        self._listen = listen
        self._lock = threading.Lock()
        self._data = StoreData()
        self._listeners: list[ChangeListener] = []
        self._pending: list[tuple[list[Profile], dict[str, str], Lease | None]] = []  # writes made while down
        self._up = False
        self._outage_seen = False  # Redis was unreachable at least once (at start-up or later)
        self._back_at = 0.0  # monotonic time Redis came back from the last outage
        self._synced_at = 0.0  # monotonic time the mirror was last known to match Redis
        self._last_stale_log = 0.0
        self._stopped = threading.Event()
        self._ready = threading.Event()
        self._coordinator = RedisCoordinator(self._redis, self._settling if listen else None)
        self._fenced_save = self._redis.register_script(_FENCED_SAVE)
        self._thread: threading.Thread | None = None
        if listen:
            self._thread = threading.Thread(target=self._run_listener, name="gatekeeper-redis", daemon=True)
            self._thread.start()
            self._ready.wait(timeout_s * 3)  # a first sync when Redis is up; serve empty otherwise

    @property
    def up(self) -> bool:
        return self._up

    def _settling(self) -> bool:
        """True while replicas may still hold results written during an outage (no new leases)."""
        if not self._outage_seen:
            return False
        return not self._up or time.monotonic() - self._back_at < _RECONNECT_GRACE_S

    # -- reads -------------------------------------------------------------------------------

    def load(self) -> StoreData:
        if not self._listen:
            return self._read_all()
        self._note_staleness()
        with self._lock:
            return StoreData(dict(self._data.profiles), dict(self._data.recommendations), dict(self._data.invalid))

    def get(self, key: str) -> Profile | None:
        if not self._listen:
            return self.fetch(key)
        self._note_staleness()
        return self._data.profiles.get(key)

    def fetch(self, key: str) -> Profile | None:
        """Ask Redis (off the hot path: before a measurement starts); the mirror when it is down."""
        try:
            raw = self._redis.hget(PROFILES, key)
        except _ERRORS as exc:
            if not self._listen:
                raise StoreError(f"{self.location}: Redis unavailable: {exc}") from None
            self._mark_down(exc)
            return self._data.profiles.get(key)
        if raw is None:
            return None
        profile, problem = read_entry(key, _json(raw))
        if problem:
            log.warning("profile_skipped", store=self.location, key=key, reason=problem)
        return profile

    def _read_all(self) -> StoreData:
        try:
            entries = self._redis.hgetall(PROFILES)
            recommendations = self._redis.hgetall(RECOMMENDATIONS)
        except _ERRORS as exc:
            raise StoreError(f"{self.location}: Redis unavailable: {exc}") from None
        profiles, invalid = read_entries({_text(k): _json(v) for k, v in entries.items()}, self.location)
        return StoreData(profiles, {_text(k): _text(v) for k, v in recommendations.items()}, invalid)

    # -- writes ------------------------------------------------------------------------------

    def save(
        self, profiles: list[Profile], recommendations: dict[str, str] | None = None, lease: Lease | None = None
    ) -> bool:
        recommendations = recommendations or {}
        try:
            landed = self._write(profiles, recommendations, lease)
        except _ERRORS as exc:
            if not self._listen:
                raise StoreError(f"{self.location}: Redis unavailable: {exc}") from None
            self._mark_down(exc)
            with self._lock:
                self._pending.append((profiles, recommendations, lease))
            log.warning("profile_write_queued", keys=[p.key for p in profiles], reason="redis unavailable")
            landed = True  # served from the mirror now, written when Redis is back
        if landed:
            self._apply_saved({p.key: p for p in profiles}, recommendations)
        return landed

    def _write(self, profiles: list[Profile], recommendations: dict[str, str], lease: Lease | None) -> bool:
        docs = {p.key: json.dumps(p.to_json()) for p in profiles}
        event = json.dumps(
            {"op": "saved", "profiles": {k: json.loads(v) for k, v in docs.items()}, "recommendations": recommendations}
        )
        if lease is not None and len(profiles) == 1 and len(recommendations) <= 1:
            ((key, doc),) = docs.items()
            model, effort = next(iter(recommendations.items()), ("", ""))
            value = f"{lease.token}|{lease.owner}"
            ok = self._fenced_save(
                keys=[_lease_key(lease.name), TOKENS, WRITTEN, PROFILES, RECOMMENDATIONS, EVENTS],
                args=[key, value, lease.token, doc, effort, model, event],
            )
            if not ok:
                log.warning("write_fenced_out", key=key, token=lease.token)
            return bool(ok)
        pipe = self._redis.pipeline(transaction=True)
        if docs:
            pipe.hset(PROFILES, mapping=dict(docs))  # type: ignore[arg-type]
        if recommendations:
            pipe.hset(RECOMMENDATIONS, mapping=dict(recommendations))  # type: ignore[arg-type]
        pipe.publish(EVENTS, event)
        pipe.execute()
        return True

    def delete(self, key: str) -> bool:
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.hdel(PROFILES, key)
            pipe.publish(EVENTS, json.dumps({"op": "deleted", "key": key}))
            removed, _ = pipe.execute()
        except _ERRORS as exc:
            self._mark_down(exc)
            raise StoreError(f"{self.location}: Redis unavailable, {key} was not invalidated: {exc}") from None
        self._apply_deleted(key)
        return bool(removed)

    # -- mirror and events -------------------------------------------------------------------

    def _apply_saved(self, profiles: dict[str, Profile], recommendations: dict[str, str]) -> None:
        with self._lock:
            for key, profile in profiles.items():
                self._data.profiles[key] = profile
                self._data.invalid.pop(key, None)
            self._data.recommendations.update(recommendations)
        for key in profiles:
            self._notify(key)

    def _apply_deleted(self, key: str) -> None:
        with self._lock:
            found = self._data.profiles.pop(key, None) is not None
            found = self._data.invalid.pop(key, None) is not None or found
        if found:
            self._notify(key)

    def _notify(self, key: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(key)
            except Exception as exc:  # noqa: BLE001 - one listener's bug must not stop the others
                log.error("change_listener_failed", key=key, error=repr(exc))

    def on_change(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def _run_listener(self) -> None:
        listen(
            self._redis, EVENTS, self._stopped, self._resync, self._on_event, self._mark_down, "redis_listener_error"
        )

    def _resync(self) -> None:
        data = self._read_all_raw()
        with self._lock:
            known = set(self._data.profiles) | set(self._data.invalid)
            pending = list(self._pending)
            for profiles, recommendations, _ in pending:  # still ours to serve until written
                data.profiles.update((p.key, p) for p in profiles)
                data.recommendations.update(recommendations)
            self._data = data
        for profiles, recommendations, lease in pending:
            self._flush(profiles, recommendations, lease)
        was_down = not self._up
        if was_down and self._outage_seen:
            self._back_at = time.monotonic()
        self._up, self._synced_at = True, time.monotonic()
        self._ready.set()
        if was_down and known:
            log.info("redis_available", profiles=len(data.profiles), flushed_writes=len(pending))
        for key in known ^ (set(data.profiles) | set(data.invalid)):
            self._notify(key)

    def _read_all_raw(self) -> StoreData:
        try:
            return self._read_all()
        except StoreError as exc:
            raise redis.ConnectionError(str(exc)) from None

    def _flush(self, profiles: list[Profile], recommendations: dict[str, str], lease: Lease | None) -> None:
        landed = self._write(profiles, recommendations, lease)
        with self._lock:
            self._pending.remove((profiles, recommendations, lease))
        if landed:
            log.info("queued_write_landed", keys=[p.key for p in profiles])
            self._apply_saved({p.key: p for p in profiles}, recommendations)
        else:
            # A newer measurement landed meanwhile: the mirror takes what Redis holds.
            for profile in profiles:
                current = self.fetch(profile.key)
                with self._lock:
                    if current is None:
                        self._data.profiles.pop(profile.key, None)
                    else:
                        self._data.profiles[profile.key] = current

    def _on_event(self, raw: bytes) -> None:
        event = _json(raw)
        if not isinstance(event, dict):
            return
        if event.get("op") == "deleted" and isinstance(event.get("key"), str):
            self._apply_deleted(event["key"])
        elif event.get("op") == "saved" and isinstance(event.get("profiles"), dict):
            profiles, _ = read_entries(event["profiles"], self.location)
            recommendations = event.get("recommendations") or {}
            self._apply_saved(profiles, {str(k): str(v) for k, v in recommendations.items()})
        self._synced_at = time.monotonic()

    def _mark_down(self, exc: BaseException) -> None:
        if self._up or not self._last_stale_log:
            log.error(
                "redis_unavailable",
                store=self.location,
                error=str(exc),
                serving="last known profiles",
                profiles=len(self._data.profiles),
            )
            self._last_stale_log = time.monotonic()
        self._up = False
        self._outage_seen = True

    def _note_staleness(self) -> None:
        now = time.monotonic()
        if not self._up and now - self._last_stale_log > _STALE_LOG_EVERY_S:
            self._last_stale_log = now
            log.warning(
                "serving_stale_profiles",
                store=self.location,
                stale_s=round(now - self._synced_at, 1) if self._synced_at else None,
                pending_writes=len(self._pending),
            )

    # -- the rest ----------------------------------------------------------------------------

    def coordinator(self) -> RedisCoordinator:
        return self._coordinator

    def sessions(self) -> RedisSessions:
        return RedisSessions(self._redis, self.location)

    def wrong_keys(self) -> RedisWrongKeys:
        return RedisWrongKeys(self._redis)

    def close(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._pending:
            log.error(
                "queued_writes_lost",
                keys=[p.key for ps, _, _ in self._pending for p in ps],
                reason="closed while Redis was unavailable",
            )
        self._listeners.clear()
        _quietly(self._redis.close)


class RedisSessions:
    """Signed-out console sessions, one expiring key each: every replica sees a sign-out at once."""

    def __init__(self, client: redis.Redis, location: str) -> None:
        self._redis, self._location = client, location

    def revoke(self, session_id: str, expires: float) -> None:
        try:
            self._redis.set(f"{_NS}:signed-out:{session_id}", 1, pxat=max(1, int(expires * 1000)))
        except _ERRORS as exc:
            raise StoreError(f"{self._location}: Redis unavailable, the sign-out was not recorded: {exc}") from None

    def revoked(self, session_id: str) -> bool:
        try:
            return bool(self._redis.exists(f"{_NS}:signed-out:{session_id}"))
        except _ERRORS as exc:
            raise StoreError(f"{self._location}: Redis unavailable, cannot check the session: {exc}") from None


class RedisWrongKeys:
    """Wrong admin keys per source, counted for the whole cluster (server/throttle.py): a fixed
    window per source, so N replicas behind a balancer do not give a guesser N times the rate.
    Every call may raise redis errors; the throttle then counts locally only."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    @staticmethod
    def _key(source: str) -> str:
        return f"{_NS}:wrong-keys:{hashlib.sha256(source.encode()).hexdigest()[:24]}"

    def record(self, source: str, window_s: float) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(self._key(source), 0, nx=True, px=max(1, int(window_s * 1000)))  # the window opens at the first
        pipe.incr(self._key(source))  # keeps the expiry
        pipe.execute()

    def retry_after(self, source: str, attempts: int) -> float:
        pipe = self._redis.pipeline(transaction=False)
        pipe.get(self._key(source))
        pipe.pttl(self._key(source))
        count, ttl_ms = pipe.execute()
        return ttl_ms / 1000 if count is not None and int(count) >= attempts and ttl_ms > 0 else 0.0

    def clear(self, source: str) -> None:
        self._redis.delete(self._key(source))


class RedisCoordinator:
    """Leases (SET NX PX + fencing token) and failure backoff in Redis, for the whole cluster.

    Every call may raise redis.ConnectionError; the scheduler treats that as "cannot start a
    measurement now" (fail closed) and tries again later.
    """

    def __init__(self, client: redis.Redis, settling: Callable[[], bool] | None = None) -> None:
        self.owner = owner_id()
        self._redis = client
        self._settling = settling  # the store's "just back from an outage": grant nothing yet
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def acquire(self, name: str, ttl_s: float) -> Lease | None:
        if self._settling is not None and self._settling():
            return None  # as if held: the caller follows, and the queued result wakes it when it lands
        token = self._acquire(keys=[_lease_key(name), TOKENS], args=[name, self.owner, max(1, int(ttl_s * 1000))])
        return Lease(name, int(token), self.owner) if token else None

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        value = f"{lease.token}|{lease.owner}"
        return bool(self._renew(keys=[_lease_key(lease.name)], args=[value, max(1, int(ttl_s * 1000))]))

    def release(self, lease: Lease) -> None:
        self._release(keys=[_lease_key(lease.name)], args=[f"{lease.token}|{lease.owner}"])

    def backoff_s(self, key: str) -> float:
        remaining = self._redis.pttl(f"{_NS}:backoff:{key}")
        return max(0.0, remaining / 1000) if remaining and remaining > 0 else 0.0

    def record_failure(self, key: str, base_s: float, max_s: float) -> tuple[int, float]:
        from gatekeeper.store.base import backoff_delay

        failures = int(self._redis.incr(f"{_NS}:failures:{key}"))
        delay = backoff_delay(failures, base_s, max_s)
        pipe = self._redis.pipeline(transaction=True)
        pipe.pexpire(f"{_NS}:failures:{key}", max(1, int((max_s * 2 + 60) * 1000)))  # forget old failures
        if delay > 0:
            pipe.set(f"{_NS}:backoff:{key}", failures, px=max(1, int(delay * 1000)))
        pipe.execute()
        return failures, delay

    def clear_failures(self, key: str) -> None:
        self._redis.delete(f"{_NS}:failures:{key}", f"{_NS}:backoff:{key}")


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def _json(raw: Any) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return None


def _quietly(close: Callable[[], T]) -> None:
    # Closing a broken connection may fail; there is nothing to do about it.
    with contextlib.suppress(Exception):
        close()


def connect(url: str, timeout_s: float) -> redis.Redis:
    """A client that fails fast (short timeouts, no retries): no caller may hang on Redis; the
    listener threads, not the callers, do the reconnecting."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=5,
    )


def listen(
    client: redis.Redis,
    channel: str,
    stopped: threading.Event,
    on_connect: Callable[[], None],
    on_message: Callable[[Any], None],
    on_down: Callable[[BaseException], None],
    error_event: str,
) -> None:
    """Read `channel` until `stopped`, reconnecting with backoff: `on_connect` runs on every
    (re)subscription (messages may have been missed meanwhile), `on_message` on each message's
    data, `on_down` when Redis is unreachable. Any other error is logged as `error_event` and
    retried: a listener thread must outlive any surprise."""
    failures = 0
    while not stopped.is_set():
        pubsub = client.pubsub()  # type: ignore[no-untyped-call, unused-ignore]  # untyped before redis 8
        try:
            pubsub.subscribe(channel)
            while not stopped.is_set():
                message = pubsub.get_message(timeout=0.5)
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    on_connect()
                    failures = 0
                elif message["type"] == "message":
                    on_message(message["data"])
        except _ERRORS as exc:
            on_down(exc)
            failures += 1
        except Exception as exc:  # noqa: BLE001 - the listener must outlive any surprise
            log.error(error_event, error=repr(exc))
            failures += 1
        finally:
            _quietly(pubsub.close)
        stopped.wait(min(0.05 * 2 ** min(failures, 6), _LISTENER_MAX_WAIT_S))  # reconnect with backoff
