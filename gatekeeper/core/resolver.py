"""Tier resolution: which tier applies to `model@effort`, and why (a pin, or a valid profile)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from gatekeeper.config import Settings
from gatekeeper.rules.tiers import Tier, lowest
from gatekeeper.store import ProfileStore
from gatekeeper.store.profile import Profile, check_effort, profile_key
from gatekeeper.suite.loader import Suite

if TYPE_CHECKING:
    from gatekeeper.drift.demotion import Demotion

Source = Literal["measured", "pinned", "pending", "unmeasured", "demoted"]

# How long a found Resolution is reused per (model, effort) before pins and the store are asked
# again. The proxy asks on every request; a landed or removed profile clears it at once (in this
# process, and in every replica through the Redis store's events). It only matters for a JSON
# store shared with other processes, whose writes this process sees within this long.
RESOLUTION_TTL_S = 1.0
_CACHE_MAX = 4096  # model names come from clients: bound the cache


@dataclass(frozen=True)
class Resolution:
    """The tier applied to one `model@effort`, and where it came from."""

    tier: Tier
    source: Source
    key: str
    profile: Profile | None = None
    pinned_budget: int | None = None  # a pin's `tool_budget`

    @property
    def tool_budget(self) -> int | None:
        """The largest number of offered tools the pair is vouched for (None: not measured, no
        budget applies): a pin's, else the measured profile's `toolBudget`. A pin without one
        has none, whatever a stored profile says: a pin beats any measurement. A demotion keeps
        the measured budget (it lowers the tier; the budget was measured at the old tier's
        threshold, so it may be lower after a re-measurement, which replaces it)."""
        if self.source == "pinned":
            return self.pinned_budget
        return self.profile.tool_budget if self.profile is not None else None


class TierResolver:
    """Pins first, then a profile measured by the running suite; nothing else counts.

    One resolver belongs to one set of settings: a reload builds a new one, so a request that
    started under the old settings finishes under them.
    """

    def __init__(
        self,
        settings: Settings,
        suite: Suite,
        store: ProfileStore,
        demotion: Callable[[str, str | None], Demotion | None] | None = None,
    ) -> None:
        """`demotion(key, client)`: live drift's demotion of a measured pair for that client, if
        any (gatekeeper.drift.monitor)."""
        self.settings, self.suite, self.store = settings, suite, store
        self._demotion = demotion
        # Bounded (model names come from clients: emptied when full) and expiring: (expiry, answer)
        # per pair. A plain dict, read without a lock (every request reads it twice; a cachetools
        # TTLCache read took a microsecond, under a lock). Threads resolve too (ToolRegistry): they
        # write under the lock.
        self._cache: dict[tuple[str, str], tuple[float, Resolution]] = {}
        self._lock = threading.Lock()

    def lookup(self, model: str, effort: str | None = None, client: str | None = None) -> Resolution | None:
        """Pin or valid measured profile for the pair, without side effects; None when neither.
        RequestInvalid when `effort` is not one of the closed set (every front end asks here).

        `client` is the drift identity of the caller (gatekeeper.drift.identity): a demotion of
        the pair for that client, or for everyone, lowers the tier. None: everyone's only."""
        effort = check_effort(effort, self.settings.extra_efforts)
        now = time.monotonic()
        cached = self._cache.get((model, effort))
        found = cached[1] if cached is not None and now < cached[0] else None
        if found is None:
            found = self._find(model, effort)
            # Only answers are cached: a miss must see a measurement the moment it lands.
            if found is not None:
                with self._lock:
                    if len(self._cache) >= _CACHE_MAX:
                        self._cache.clear()
                    self._cache[(model, effort)] = (now + RESOLUTION_TTL_S, found)
        return self.with_demotion(found, client) if found is not None else None

    def with_demotion(self, found: Resolution, client: str | None) -> Resolution:
        """Live drift's word, asked on every call (not cached: it is per client, and a demotion
        must apply from the next request on). A profile measured during a demotion may lower
        the tier further, never lift it: the lower of the two applies."""
        if found.source != "measured" or self._demotion is None:
            return found
        demoted = self._demotion(found.key, client)
        if demoted is None:
            return found
        return Resolution(lowest(found.tier, demoted.to_tier), "demoted", found.key, found.profile)

    def _find(self, model: str, effort: str) -> Resolution | None:
        key = profile_key(model, effort)
        pin = self.settings.pin_entry(model, effort)
        if pin is not None:
            return Resolution(pin.tier, "pinned", key, pinned_budget=pin.tool_budget)
        profile = self.store.get(key)
        if profile is not None and profile.is_valid_for(self.suite):
            return Resolution(profile.tier, "measured", key, profile)
        return None

    def forget(self) -> None:
        """Drop cached answers (a profile landed or was removed)."""
        with self._lock:
            self._cache.clear()
