"""What every profile store shares: the data, the protocol, per-entry validity, leases."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from gatekeeper.observe import logs
from gatekeeper.store.profile import Profile

log = logs.get_logger(__name__)

ChangeListener = Callable[[str], None]  # called with the key of a profile that landed or was removed


@dataclass
class StoreData:
    """The seed's `models_profile.json`: profiles by `model@effort`, recommended effort by model.

    `invalid` holds entries that do not read as a profile, exactly as found: they are skipped for
    lookups and written back untouched, so one bad entry never costs the others.
    """

    profiles: dict[str, Profile] = field(default_factory=dict)
    recommendations: dict[str, str] = field(default_factory=dict)
    invalid: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        entries = {key: p.to_json() for key, p in self.profiles.items()}
        entries.update((key, raw) for key, raw in self.invalid.items() if key not in entries)
        return {
            "profiles": dict(sorted(entries.items())),
            "recommendations": dict(sorted(self.recommendations.items())),
        }

    def models(self) -> set[str]:
        return {p.model for p in self.profiles.values()}


def read_entry(key: str, raw: Any) -> tuple[Profile | None, str | None]:
    """One stored entry -> (profile, None), or (None, why it is not a usable profile)."""
    try:
        profile = Profile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "entry"
        return None, f"{where}: {first['msg']}"
    if profile.key != key:
        return None, f"stored under {key!r} but measured {profile.key!r}"
    return profile, None


def read_entries(entries: Mapping[str, Any], where: str) -> tuple[dict[str, Profile], dict[str, Any]]:
    """Split raw entries into profiles and invalid entries, warning once per bad entry."""
    profiles: dict[str, Profile] = {}
    invalid: dict[str, Any] = {}
    for key, raw in entries.items():
        profile, problem = read_entry(str(key), raw)
        if profile is None:
            invalid[str(key)] = raw
            log.warning("profile_skipped", store=where, key=key, reason=problem)
        else:
            profiles[str(key)] = profile
    return profiles, invalid


@dataclass(frozen=True)
class Lease:
    """The right to measure one pair (or to use one measurement slot) until `ttl` runs out.

    `token` grows with every grant of the same name: a store refuses a write fenced with a token
    older than the newest grant, so a holder that lost its lease cannot overwrite a newer result.
    """

    name: str
    token: int
    owner: str


class Coordinator(Protocol):
    """Leases and failure backoff, shared by every process that uses the same store."""

    def acquire(self, name: str, ttl_s: float) -> Lease | None: ...

    def renew(self, lease: Lease, ttl_s: float) -> bool: ...

    def release(self, lease: Lease) -> None: ...

    def backoff_s(self, key: str) -> float:
        """Seconds before the pair may be measured again after failures (0: now)."""
        ...

    def record_failure(self, key: str, base_s: float, max_s: float) -> tuple[int, float]:
        """Count a failed measurement; returns (failures in a row, backoff seconds)."""
        ...

    def clear_failures(self, key: str) -> None: ...


class SessionRevocations(Protocol):
    """Console sessions signed out before they expire, kept where every replica and the next
    start of this one look (a signed-out cookie must stay out everywhere, for good).

    Sessions are named by an opaque id (a hash of the session's nonce); a record is kept until the
    session would have expired anyway. Both calls raise StoreError when the store cannot be
    reached: the console then treats a session as signed out (fail closed)."""

    def revoke(self, session_id: str, expires: float) -> None: ...

    def revoked(self, session_id: str) -> bool: ...


class WrongKeyCounts(Protocol):
    """Wrong admin keys per source shared by every replica (Redis); a store without one (the
    JSON file) leaves the counting to each process."""

    def record(self, source: str, window_s: float) -> None: ...

    def retry_after(self, source: str, attempts: int) -> float: ...

    def clear(self, source: str) -> None: ...


class DemotionBoard(Protocol):
    """Where replicas share drift demotions and the evidence behind them (a scheme's `demotions`,
    store/schemes.py; the Redis one is store/redis_demotions.py). Records and evidence are plain
    JSON objects; what they mean is drift's business (drift/demotion.py, drift/monitor.py)."""

    def start(
        self,
        on_demoted: Callable[[dict[str, Any]], None],
        on_ended: Callable[[str, str], None],
        on_sync: Callable[[dict[str, dict[str, Any]]], None],
        on_evidence: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None: ...

    def publish(self, record: dict[str, Any]) -> None: ...

    def share(self, evidence: list[dict[str, Any]]) -> None:
        """Send the drift evidence this replica judged to the others (`on_evidence` there)."""
        ...

    def retract(self, slot: str, why: str) -> None: ...

    def close(self) -> None: ...


class ProfileStore(Protocol):
    """Where profiles live. Implementations must be safe to call from several threads.

    `get` and `load` may answer from a local cache (the hot path); `fetch` asks the source of
    truth (used before starting a measurement, so a profile another process just wrote is seen).
    Every member is required; the two a store may not have say so with None: `problem` (why the
    last read found no usable store, as a JSON file that is not one) and `wrong_keys()` (wrong
    admin keys counted for every replica; None: each process counts its own).
    """

    location: str
    problem: str | None

    def load(self) -> StoreData: ...

    def get(self, key: str) -> Profile | None: ...

    def fetch(self, key: str) -> Profile | None: ...

    def save(
        self, profiles: list[Profile], recommendations: dict[str, str] | None = None, lease: Lease | None = None
    ) -> bool:
        """Write profiles; False when `lease` was superseded (the result is discarded)."""
        ...

    def delete(self, key: str) -> bool: ...

    def coordinator(self) -> Coordinator: ...

    def sessions(self) -> SessionRevocations: ...

    def wrong_keys(self) -> WrongKeyCounts | None: ...

    def on_change(self, listener: ChangeListener) -> None: ...

    def close(self) -> None: ...


def backoff_delay(failures: int, base_s: float, max_s: float) -> float:
    return float(min(base_s * 2 ** max(failures - 1, 0), max_s))


class MemoryCoordinator:
    """Leases for one process (a store that no other process shares)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: dict[str, tuple[Lease, float]] = {}  # name -> (lease, expires)
        self._tokens: dict[str, int] = {}
        self._failures: dict[str, tuple[int, float]] = {}  # key -> (failures, not before)

    def acquire(self, name: str, ttl_s: float) -> Lease | None:
        now = time.monotonic()
        with self._lock:
            held = self._leases.get(name)
            if held is not None and held[1] > now:
                return None
            token = self._tokens.get(name, 0) + 1
            self._tokens[name] = token
            lease = Lease(name, token, "local")
            self._leases[name] = (lease, now + ttl_s)
            return lease

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        with self._lock:
            held = self._leases.get(lease.name)
            if held is None or held[0] != lease:
                return False
            self._leases[lease.name] = (lease, time.monotonic() + ttl_s)
            return True

    def release(self, lease: Lease) -> None:
        with self._lock:
            held = self._leases.get(lease.name)
            if held is not None and held[0] == lease:
                del self._leases[lease.name]

    def current_token(self, name: str) -> int:
        with self._lock:
            return self._tokens.get(name, 0)

    def backoff_s(self, key: str) -> float:
        with self._lock:
            return max(0.0, float(self._failures.get(key, (0, 0.0))[1]) - time.monotonic())

    def record_failure(self, key: str, base_s: float, max_s: float) -> tuple[int, float]:
        with self._lock:
            failures = self._failures.get(key, (0, 0.0))[0] + 1
            delay = backoff_delay(failures, base_s, max_s)
            self._failures[key] = (failures, time.monotonic() + delay)
            return failures, delay

    def clear_failures(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)
