"""Bounded memos of what depends on JSON values alone, keyed by the values' own JSON bytes.

An agent sends the same tool list with every request of a conversation, so what a codec derives
from that list alone (the offered tools the answer side matches calls against: `JsonMemo`) and
whether each tool's own fields pass the protocol's tables (`JsonChecked`) are the same request
after request. The tier's verdicts are never remembered here: every tool is gated on every
request, at its own tier, under its own policy.

Both are keyed by the exact bytes of the values, never by anything else: two requests share an
entry only when those values are the same JSON, which is what the upstream receives. Nothing of
a request's own objects is kept: on a miss `JsonMemo` runs its function on a private copy
decoded from the key, so an entry shares no object with any request body (a later change to one
body, in place, never reaches another request).

Values that are not plain JSON (an in-process caller's own subclass of dict or str, a set, a
model object) have no key: they are derived or checked every time. Each memo is bounded by the
bytes of its keys (the first stored go first), and a key above `largest` bytes is never stored.
Threads of an in-process caller may share them (a read takes no lock; a write takes one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson

T = TypeVar("T")

# A subclass (a StrEnum, a dict with its own get), a dataclass and a datetime have no key: orjson
# would write them as the JSON they stand for. (It still writes an Enum or a UUID as its value:
# where a check is skipped, the caller reads what it relies on by its exact type, `type(x) is str`.)
_KEY = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


class _Bounded(Generic[T]):
    """A dict of key -> (bytes it counts for, value), bounded by those bytes: the first stored go
    first. Read without a lock (a dict read is atomic; every request reads); written under one."""

    __slots__ = ("_data", "_lock", "_maxbytes", "currsize")

    def __init__(self, maxbytes: int) -> None:
        self._data: dict[bytes, tuple[int, T]] = {}
        self._maxbytes, self.currsize = maxbytes, 0
        self._lock = threading.Lock()

    def get(self, key: bytes) -> tuple[int, T] | None:
        return self._data.get(key)

    def put(self, key: bytes, entry: tuple[int, T]) -> None:
        if entry[0] > self._maxbytes:
            return
        with self._lock:
            old = self._data.pop(key, None)
            self.currsize += entry[0] - (old[0] if old is not None else 0)
            while self._data and self.currsize > self._maxbytes:
                self.currsize -= self._data.pop(next(iter(self._data)))[0]
            self._data[key] = entry

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.currsize = 0


class JsonMemo(Generic[T]):
    """`derive(values)`, remembered per JSON bytes of `values` (see the module docstring)."""

    __slots__ = ("_cache", "_derive", "_largest")

    def __init__(self, derive: Callable[[Any], T], maxbytes: int = 2 * 1024 * 1024, largest: int = 128 * 1024) -> None:
        self._derive = derive
        self._cache: _Bounded[T] = _Bounded(maxbytes)
        self._largest = largest

    def __call__(self, values: Any) -> T:
        try:
            key = orjson.dumps(values, option=_KEY)
        except TypeError:  # not plain JSON: no key
            return self._derive(values)
        if len(key) > self._largest:
            return self._derive(values)
        entry = self._cache.get(key)
        if entry is None:
            entry = (len(key), self._derive(orjson.loads(key)))  # a private copy: no object shared with a request
            self._cache.put(key, entry)
        return entry[1]

    def clear(self) -> None:
        self._cache.clear()


# What the values decoded from a key take, per byte of the key (a tool list: 6.8x, measured with
# sys.getsizeof over every object): a remembered copy counts this many bytes against the bound.
_DECODED = 8


class JsonChecked:
    """Which JSON values passed a check unchanged, remembered per JSON bytes of `(mode, values)`
    (`mode`: what else the check depends on, `upstream.unknown_fields`). A caller asks with the
    values' `key` before checking them, skips the check when they `passed`, and otherwise
    checks them and then calls `remember`. A check that raised is never remembered (`remember`
    is not reached), nor one that changed its values in place (under `drop`, a field dropped and
    logged): the next such values are checked, dropped and logged again, as without the memo.
    Bounded by the bytes of its keys and of the private copies decoded from them (the oldest go
    first); a key above `largest` bytes, or values that are not plain JSON, are never remembered."""

    __slots__ = ("_cache", "_largest")

    def __init__(self, maxbytes: int = 16 * 1024 * 1024, largest: int = 128 * 1024) -> None:
        self._cache: _Bounded[Any] = _Bounded(maxbytes)
        self._largest = largest

    def key(self, values: Any, mode: str) -> bytes | None:
        """The key of `values` checked under `mode`; None when they have none."""
        try:
            key = orjson.dumps((mode, values), option=_KEY)
        except TypeError:  # not plain JSON
            return None
        return key if len(key) <= self._largest else None

    def passed(self, key: bytes | None, values: Any) -> bool:
        """Whether `values`, whose key is `key`, passed before: as the very JSON that passed. The
        bytes alone are not enough for an in-process caller's objects: orjson writes a tuple, an
        Enum, a UUID or a NaN as the JSON they stand for, which another check reads otherwise, so
        they must also equal what the bytes decode to (a tuple is no list, an Enum no string)."""
        if key is None:
            return False
        entry = self._cache.get(key)
        # The values decoded from the key once, when remembered (a private copy, never handed out).
        return entry is not None and bool(entry[1] == values)

    def remember(self, key: bytes | None, values: Any, mode: str) -> None:
        """Remember that the values of `key` passed, if they still are what `key` says."""
        if key is None or self.key(values, mode) != key:
            return
        self._cache.put(key, ((1 + _DECODED) * len(key), orjson.loads(key)[1]))

    def clear(self) -> None:
        self._cache.clear()
