"""Where profiles are kept: a JSON file for one host, Redis for replicas; both behind ProfileStore.

`open_store(location)` picks the implementation: `redis://...` or `rediss://...` -> RedisStore,
anything else is a path to a `models_profile.json`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gatekeeper.errors import StoreError, WriteFenced
from gatekeeper.store.base import (
    ChangeListener,
    Coordinator,
    Lease,
    MemoryCoordinator,
    ProfileStore,
    SessionRevocations,
    StoreData,
    WrongKeyCounts,
    read_entries,
    read_entry,
)
from gatekeeper.store.file import FileCoordinator, JsonFileStore

__all__ = [
    "ChangeListener",
    "Coordinator",
    "FileCoordinator",
    "JsonFileStore",
    "Lease",
    "MemoryCoordinator",
    "ProfileStore",
    "SessionRevocations",
    "StoreData",
    "WriteFenced",
    "WrongKeyCounts",
    "copy_profiles",
    "is_redis_url",
    "open_store",
    "read_entries",
    "read_entry",
]


def is_redis_url(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(("redis://", "rediss://", "unix://"))


def require_redis() -> None:
    """A redis:// store needs the `redis` extra; say so instead of failing on an import."""
    if importlib.util.find_spec("redis") is None:
        raise StoreError("store: a Redis store needs the redis extra: pip install 'gatekeeper[redis]'")


def open_store(location: str | Path, *, listen: bool = True) -> ProfileStore:
    """The store at `location`. `listen=False` for one-shot commands: no background listener."""
    if is_redis_url(location):
        require_redis()
        from gatekeeper.store.redis import RedisStore  # redis is only imported when used

        return RedisStore(str(location), listen=listen)
    return JsonFileStore(location)


def copy_profiles(source: ProfileStore, target: ProfileStore) -> int:
    """Copy every entry (profiles and recommendations) from one store to another; returns how many.

    Entries that are not valid profiles stay behind (and were warned about when read).
    """
    data = source.load()
    problem = getattr(source, "problem", None)  # a JSON file that is not a store reads as empty
    if problem:
        raise StoreError(f"{source.location}: not a usable profile store ({problem})")
    target.save(list(data.profiles.values()), data.recommendations)
    return len(data.profiles)
