"""Where profiles are kept: a JSON file for one host, Redis for replicas; both behind ProfileStore.

`open_store(location)` picks the implementation by the location's URL scheme (store/schemes.py:
`redis://`, `rediss://` and `unix://` -> RedisStore); a location without one is a path to a
`models_profile.json`, and an unknown `scheme://` is an error, never a file name. What else a
kind of store brings (shared by replicas, a board for their demotions) is read from its scheme.
"""

from __future__ import annotations

from pathlib import Path

from gatekeeper.errors import StoreError, WriteFenced
from gatekeeper.store.base import (
    ChangeListener,
    Coordinator,
    DemotionBoard,
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
from gatekeeper.store.schemes import SCHEMES, StoreScheme, register_store, store_scheme

__all__ = [
    "SCHEMES",
    "ChangeListener",
    "Coordinator",
    "DemotionBoard",
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
    "demotion_board",
    "is_shared",
    "open_store",
    "read_entries",
    "read_entry",
    "register_store",
]


def is_shared(location: str | Path) -> bool:
    """Whether replicas share the store at `location` (its scheme says)."""
    return _scheme(location).shared


def demotion_board(location: str | Path) -> DemotionBoard | None:
    """The board replicas on the store at `location` share drift demotions through, when its
    scheme has one (Redis); None: each process keeps its own."""
    make = _scheme(location).demotions
    return make(str(location)) if make is not None else None


def _scheme(location: str | Path) -> StoreScheme:
    try:
        return store_scheme(location)
    except ValueError as exc:
        raise StoreError(f"store: {exc}") from None


def open_store(location: str | Path, *, listen: bool = True) -> ProfileStore:
    """The store at `location`. `listen=False` for one-shot commands: no background listener."""
    return _scheme(location).open(str(location), listen)


def copy_profiles(source: ProfileStore, target: ProfileStore) -> int:
    """Copy every entry (profiles and recommendations) from one store to another; returns how many.

    Entries that are not valid profiles stay behind (and were warned about when read).
    """
    data = source.load()
    if source.problem:  # a JSON file that is not a store reads as empty
        raise StoreError(f"{source.location}: not a usable profile store ({source.problem})")
    target.save(list(data.profiles.values()), data.recommendations)
    return len(data.profiles)
