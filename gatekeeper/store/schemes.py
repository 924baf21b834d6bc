"""Where a store location leads: a table from URL scheme to the store it opens.

A location with a scheme (`name://...`) is opened by the store its scheme names, and one whose
scheme is not in the table is refused (never taken for a file path); anything else is a path to
a `models_profile.json`. Adding a store (Postgres, say) is one module with its `StoreScheme` and
one line in `SCHEMES`.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from gatekeeper.errors import StoreError
from gatekeeper.store.base import ProfileStore


@dataclass(frozen=True)
class StoreScheme:
    """One kind of store reached by URL. `check(url)` raises ValueError saying what is wrong
    (config validation names the key); `open(url, listen)` builds the store (`listen=False`:
    one-shot commands, no background listener); `shared`: replicas share it (and its demotions)."""

    check: Callable[[str], None]
    open: Callable[[str, bool], ProfileStore]
    shared: bool = True


def _check_redis(url: str) -> None:
    parsed = urlsplit(url)
    try:
        _ = parsed.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"bad port in Redis URL: {exc}") from None
    if not parsed.hostname:
        raise ValueError("expected a redis URL with a host: redis://host:port/db")
    if parsed.path.strip("/") and not parsed.path.strip("/").isdigit():
        raise ValueError(f"the database in a Redis URL is a number, got {parsed.path.strip('/')!r}")


def _check_redis_socket(url: str) -> None:
    parsed = urlsplit(url)
    if parsed.netloc and not parsed.netloc.endswith("@"):  # unix://[user:pass@]/path: no host
        raise ValueError("expected a socket path: unix:///path/to/redis.sock?db=0")
    if not parsed.path.strip("/"):
        raise ValueError("expected a socket path: unix:///path/to/redis.sock?db=0")
    for db in parse_qs(parsed.query).get("db", []):
        if not db.isdigit():
            raise ValueError(f"the database in a Redis URL is a number, got {db!r}")


def _open_redis(url: str, listen: bool) -> ProfileStore:
    if importlib.util.find_spec("redis") is None:
        raise StoreError("store: a Redis store needs the redis extra: pip install 'gatekeeper[redis]'")
    from gatekeeper.store.redis import RedisStore  # redis is only imported when used

    return RedisStore(url, listen=listen)


REDIS = StoreScheme(_check_redis, _open_redis)
REDIS_SOCKET = StoreScheme(_check_redis_socket, _open_redis)

SCHEMES: dict[str, StoreScheme] = {
    "redis": REDIS,
    "rediss": REDIS,
    "unix": REDIS_SOCKET,  # redis-py's form of a Redis server's unix socket
}

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def scheme_of(location: str | Path) -> StoreScheme | None:
    """The store a URL location names; None for a file path. Raises ValueError for a URL whose
    scheme no store serves."""
    if not isinstance(location, str):
        return None
    found = _SCHEME.match(location)
    if found is None:
        return None
    scheme = SCHEMES.get(found.group(1).lower())
    if scheme is None:
        served = ", ".join(f"{name}://" for name in SCHEMES)
        raise ValueError(f"no store serves {found.group(1)!r}:// (served: {served}, or a file path)")
    return scheme


def checked_location(value: str | Path) -> str | Path:
    """A store location as settings keep it: a checked URL, else a Path. Raises ValueError."""
    text = str(value)
    scheme = scheme_of(text)
    if scheme is None:
        return Path(text)
    scheme.check(text)
    return text
