"""A bounded memo of a pure function of JSON values, keyed by the values' own JSON bytes.

An agent sends the same tool list with every request of a conversation, so what a codec derives
from that list alone (the offered tools the answer side matches calls against) is the same
request after request. `JsonMemo` remembers it by the exact bytes of the values it is derived
from, never by anything else: two requests share an entry only when those values are the same
JSON, which is what the upstream receives. Nothing of a request's own objects is kept: on a miss
the function runs on a private copy decoded from the key, so an entry shares no object with any
request body (a later change to one body, in place, never reaches another request).

Values that are not plain JSON (an in-process caller's own subclass of dict or str, a set, a
model object) have no key: the function runs on them directly, uncached. The memo is bounded by
the bytes of its keys (the first stored go first), and a key above `largest` bytes is never
stored. It takes a lock to write, so threads of an in-process caller may share it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson
from cachetools import Cache

T = TypeVar("T")

_KEY = orjson.OPT_PASSTHROUGH_SUBCLASS  # a subclass (an enum's str, a dict with its own get) has no key


def _size(entry: tuple[int, Any]) -> int:
    return entry[0]  # an entry is (its key's bytes, the value): cachetools sizes values, not keys


class JsonMemo(Generic[T]):
    """`derive(values)`, remembered per JSON bytes of `values` (see the module docstring)."""

    __slots__ = ("_cache", "_derive", "_largest", "_lock")

    def __init__(self, derive: Callable[[Any], T], maxbytes: int = 2 * 1024 * 1024, largest: int = 128 * 1024) -> None:
        self._derive = derive
        self._cache: Cache[bytes, tuple[int, T]] = Cache(maxsize=maxbytes, getsizeof=_size)
        self._largest = largest
        self._lock = threading.Lock()

    def __call__(self, values: Any) -> T:
        try:
            key = orjson.dumps(values, option=_KEY)
        except TypeError:  # not plain JSON: no key
            return self._derive(values)
        if len(key) > self._largest:
            return self._derive(values)
        with self._lock:
            entry = self._cache.get(key)
        if entry is None:
            entry = (len(key), self._derive(orjson.loads(key)))  # a private copy: no object shared with a request
            with self._lock:
                self._cache[key] = entry
        return entry[1]

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
