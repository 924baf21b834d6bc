"""Failed keys per source address: past `attempts` in `window_s`, the source waits out the window.

Guessing an MCP key stays slow, and one noisy address does not lock out the others. The table of
sources is bounded (addresses come from the network); the oldest entries go first.
"""

from __future__ import annotations

import threading
import time

from cachetools import TTLCache


class FailureThrottle:
    def __init__(self, attempts: int = 10, window_s: float = 60.0, max_sources: int = 10_000) -> None:
        self._attempts, self._window_s = attempts, window_s
        self._failures: TTLCache[str, list[float]] = TTLCache(maxsize=max_sources, ttl=window_s, timer=time.monotonic)
        self._lock = threading.Lock()

    def blocked(self, source: str) -> float | None:
        """Seconds until `source` may try again, or None when it may now."""
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._failures.get(source, []) if t > now - self._window_s]
            if len(recent) < self._attempts:
                return None
            return recent[0] + self._window_s - now

    def failed(self, source: str) -> None:
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._failures.get(source, []) if t > now - self._window_s]
            self._failures[source] = [*recent, now][-self._attempts :]
