"""Where a store location leads: a table from URL scheme to the store it opens.

A location with a scheme (`name://...`) is opened by the store its scheme names, and one whose
scheme is not in the table is refused (never taken for a file path); anything else is a path to
a `models_profile.json` (`FILE`). Adding a store (Postgres, say) is one module and one line: the
module holds a `ProfileStore` (store/base.py: every member required, the ones a store may lack
answered with None) and its `StoreScheme`, which declares everything else the rest of the code
asks of a store; the line is `SCHEMES["postgres"] = POSTGRES` here, or `register_store` in the
application that adds it. Nothing is probed: what is not declared is not used.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from gatekeeper.errors import StoreError
from gatekeeper.store.base import DemotionBoard, ProfileStore
from gatekeeper.store.file import JsonFileStore


@dataclass(frozen=True)
class StoreScheme:
    """One kind of store. `check(location)` raises ValueError saying what is wrong (config
    validation names the key); `open(location, listen)` builds the store (`listen=False`:
    one-shot commands, no background listener); `shared`: replicas share it (its profiles,
    leases and backoff); `demotions(location)` builds the board replicas share drift demotions
    through (None: each process keeps its own, even on a shared store)."""

    check: Callable[[str], None]
    open: Callable[[str, bool], ProfileStore]
    shared: bool
    demotions: Callable[[str], DemotionBoard] | None


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


def _redis_demotions(url: str) -> DemotionBoard:
    from gatekeeper.store.redis_demotions import RedisDemotionBoard  # redis is only imported when used

    return RedisDemotionBoard(url)


def _check_path(location: str) -> None:
    """Any path names a file store; what is wrong with the file is said when it is read."""


def _open_file(location: str, listen: bool) -> ProfileStore:
    return JsonFileStore(location)


FILE = StoreScheme(_check_path, _open_file, shared=False, demotions=None)
REDIS = StoreScheme(_check_redis, _open_redis, shared=True, demotions=_redis_demotions)
REDIS_SOCKET = StoreScheme(_check_redis_socket, _open_redis, shared=True, demotions=_redis_demotions)

SCHEMES: dict[str, StoreScheme] = {
    "redis": REDIS,
    "rediss": REDIS,
    "unix": REDIS_SOCKET,  # redis-py's form of a Redis server's unix socket
}

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def register_store(name: str, scheme: StoreScheme) -> None:
    """Serve `name://` locations with `scheme` (replacing any store that served them)."""
    SCHEMES[name.lower()] = scheme


def store_scheme(location: str | Path) -> StoreScheme:
    """The store that serves `location`: its scheme's, or `FILE` for a path. Raises ValueError
    for a URL whose scheme no store serves."""
    return scheme_of(location) or FILE


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
        if Path(text).is_dir():  # found now, not at the first save (a measurement's calls spent)
            raise ValueError(f"{text} is a directory: name the store's file in it (models_profile.json)")
        return Path(text)
    scheme.check(text)
    return text
