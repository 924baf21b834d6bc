"""Wrong admin keys, throttled per source: guessing stays slow, and nobody is locked out by others.

One `KeyThrottle` per app serves the console's sign-in and the admin API's `Bearer` check, so a
guesser gains nothing by switching between them. It counts wrong keys per *source* (the client's
address), never globally, in two steps:

- past `attempts` (10) wrong keys a minute, a source's wrong keys are answered 429 with
  `Retry-After` instead of 401, but its keys are still read: **a right key is let through**, so
  an admin who mistyped, or who shares an address with a guesser (a NAT, a test rig on
  loopback), is never locked out by a few wrong keys;
- past `blocked_after` (100) wrong keys a minute the source is refused before its key is looked
  at (429): that bounds a guesser at 100 keys a minute per source, whatever it learns from the
  answers. An admin key of 32 random characters is out of reach of that rate for ever; a short
  one is not, hence the warning at start-up (`weak_admin_key`).

The source is the socket peer's address, or, behind a reverse proxy, the address that proxy
reports in `trusted_proxy_header` (see `client_source`). Without that setting behind a proxy every
client shares the proxy's address, and one guesser slows everyone: set it there.

The table of sources is bounded (cachetools): a flood of addresses evicts the oldest entries, it
never grows the process. IPv6 addresses count per /64, the block one host is usually given, so
cycling through the addresses of one block buys nothing.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from cachetools import TTLCache
from starlette.requests import Request

from gatekeeper.observe import logs
from gatekeeper.observe.redact import clip, redact
from gatekeeper.peers import is_trusted
from gatekeeper.store import WrongKeyCounts

log = logs.get_logger(__name__)
T = TypeVar("T")

ATTEMPTS = 10  # wrong keys per source per window before they get 429: plenty for typos
BLOCKED_AFTER = 100  # wrong keys per source per window before its keys are not even read
WINDOW_S = 60.0
MAX_SOURCES = 10_000  # entries of a few hundred bytes: a few MB at most


class KeyThrottle:
    """Counts wrong keys per source over a sliding window; thread-safe.

    `shared` (the Redis store's `wrong_keys()`) adds a count every replica sees; the local count
    stays the floor, so a Redis outage never lifts the throttle (its errors are logged, ignored)."""

    def __init__(
        self,
        attempts: int = ATTEMPTS,
        window_s: float = WINDOW_S,
        max_sources: int = MAX_SOURCES,
        blocked_after: int = BLOCKED_AFTER,
    ) -> None:
        self.attempts, self.window_s, self.blocked_after = attempts, window_s, max(blocked_after, attempts)
        # An entry expires `window_s` after its newest failure, when none of its failures counts any more.
        self._failures: TTLCache[str, deque[float]] = TTLCache(max_sources, window_s, timer=time.monotonic)
        self._lock = threading.Lock()

    def retry_after(self, source: str, shared: WrongKeyCounts | None = None, limit: int | None = None) -> int:
        """Seconds until `source` has fewer than `limit` (default `blocked_after`: its key is not
        read) wrong keys in the window; 0 when it has now."""
        limit = self.blocked_after if limit is None else limit
        now = time.monotonic()
        wait = 0.0
        with self._lock:
            failures = self._failures.get(source)
            if failures is not None and len(failures) >= limit:
                # until the failure that makes the count `limit` leaves the window
                wait = failures[len(failures) - limit] + self.window_s - now
        if shared is not None:
            wait = max(wait, _shared(shared.retry_after, source, limit) or 0.0)
        return max(1, math.ceil(wait)) if wait > 0 else 0

    def failed(self, source: str, shared: WrongKeyCounts | None = None) -> int:
        """Counts a wrong key; the seconds the source should wait (answer 429, not 401), or 0."""
        now = time.monotonic()
        with self._lock:
            failures = self._failures.get(source) or deque(maxlen=self.blocked_after)
            failures.append(now)
            self._failures[source] = failures  # set again: restarts the entry's expiry
        if shared is not None:
            _shared(shared.record, source, self.window_s)
        return self.retry_after(source, shared, self.attempts + 1)  # the first `attempts` get 401

    def __len__(self) -> int:
        """Sources with failures on record (bounded by `max_sources`)."""
        with self._lock:
            return len(self._failures)

    def succeeded(self, source: str, shared: WrongKeyCounts | None = None) -> None:
        with self._lock:
            self._failures.pop(source, None)
        if shared is not None:
            _shared(shared.clear, source)


def shared_counts(request: Request) -> WrongKeyCounts | None:
    """The store's cluster-wide counts of wrong keys (Redis), or None (a JSON file: per process)."""
    counts: WrongKeyCounts | None = request.app.state.gk.store.wrong_keys()
    return counts


def _shared(call: Callable[..., T], *args: Any) -> T | None:
    try:
        return call(*args)
    except Exception as exc:  # noqa: BLE001 - Redis down: the local count still holds
        log.warning("wrong_key_count_unshared", error=redact(str(exc)))
        return None


def client_source(request: Request) -> str:
    """The address a request comes from, as the throttle counts it.

    With `trusted_proxy_header` set (e.g. `X-Forwarded-For`, or `X-Real-IP`), and only when the
    socket peer is one of `trusted_proxies` (from any other peer the header is the client's own
    word), the address is read from that header. Each proxy appends to it in turn, so with
    `trusted_proxy_hops: N` (the proxies in front of gatekeeper that append to it) the client is
    the N-th entry from the right; entries left of it were written by the client, never believed.
    Otherwise (no header, fewer entries than hops: it did not come through every proxy, or an
    untrusted peer) the source is the socket peer's address.
    """
    settings = request.app.state.gk.settings
    peer = request.client.host if request.client else "unknown"
    header = getattr(settings, "trusted_proxy_header", None)
    if header and is_trusted(peer, tuple(getattr(settings, "trusted_proxies", ()))):
        entries = [e.strip() for e in ",".join(request.headers.getlist(header)).split(",") if e.strip()]
        hops = getattr(settings, "trusted_proxy_hops", 1)
        if len(entries) >= hops:
            return _source(entries[-hops])
    return _source(peer)


def request_scheme(request: Request) -> str:
    """`http` or `https` as the client sees it: a trusted proxy's `X-Forwarded-Proto` (a TLS
    terminator in front), else the connection's own scheme."""
    forwarded = request.headers.get("x-forwarded-proto", "").strip().lower()
    if forwarded in ("http", "https") and request.client is not None:
        settings = request.app.state.gk.settings
        if is_trusted(request.client.host, tuple(getattr(settings, "trusted_proxies", ()))):
            return forwarded
    return request.url.scheme


def _source(address: str) -> str:
    host = address.strip()
    if host.startswith("[") and "]" in host:  # [v6]:port
        host = host[1 : host.index("]")]
    elif host.count(":") == 1:  # v4:port, as some proxies write it: the port changes per connection
        host = host.partition(":")[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return clip(address, 64)  # not an address (a test client, a unix socket): counted as given
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)
