"""Where profiles are kept: a JSON file for one host, Redis for replicas; both behind ProfileStore.

`open_store(location)` picks the implementation by the location's URL scheme (store/schemes.py:
`redis://`, `rediss://` and `unix://` -> RedisStore); a location without one is a path to a
`models_profile.json`, and an unknown `scheme://` is an error, never a file name.
"""

from __future__ import annotations

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
from gatekeeper.store.schemes import SCHEMES, StoreScheme, scheme_of

__all__ = [
    "SCHEMES",
    "ChangeListener",
    "Coordinator",
    "FileCoordinator",
    "JsonFileStore",
    "Lease",
    "MemoryCoordinator",
    "ProfileStore",
    "SessionRevocations",
    "StoreData",
    "StoreScheme",
    "WriteFenced",
    "WrongKeyCounts",
    "copy_profiles",
    "is_shared",
    "open_store",
    "read_entries",
    "read_entry",
]


def is_shared(location: str | Path) -> bool:
    """Whether replicas share the store at `location` (and so their demotions, drift/board.py)."""
    scheme = _scheme(location)
    return scheme is not None and scheme.shared


def _scheme(location: str | Path) -> StoreScheme | None:
    try:
        return scheme_of(location)
    except ValueError as exc:
        raise StoreError(f"store: {exc}") from None


def open_store(location: str | Path, *, listen: bool = True) -> ProfileStore:
    """The store at `location`. `listen=False` for one-shot commands: no background listener."""
    scheme = _scheme(location)
    return JsonFileStore(location) if scheme is None else scheme.open(str(location), listen)


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
