"""Which upstream serves a model: a table of mounts, as httpx's `mounts` pick a transport per URL
pattern: a `models:` route's exact model name -> its litellm upstream, "*" -> the pooled upstream
(or one injected upstream, for every model)."""

from __future__ import annotations

from collections.abc import Mapping

from gatekeeper.config import Settings
from gatekeeper.server.upstream import PooledUpstream, Upstream


class Mounts:
    """Which upstream serves a model: the one mounted at its exact name (a `models:` route), else
    the one at "*". A table, as httpx's `mounts` pick a transport per URL pattern."""

    __slots__ = ("_table", "default")

    def __init__(self, table: Mapping[str, Upstream]) -> None:
        if "*" not in table:
            raise ValueError("Mounts: the table needs a '*' entry (the default upstream)")
        self._table = dict(table)
        self.default: Upstream = table["*"]

    def for_model(self, model: str) -> Upstream:
        return self._table.get(model, self.default)


class Upstreams:
    """The mounts for a version of the settings (the one a request's snapshot holds). A reload
    that changes `upstream:` gets a new pool; a request still under the old settings gets the old
    pool, never a fresh one, and every pool is closed at shutdown. With `fixed` (an injected
    upstream, e.g. a MockUpstream) every model goes there."""

    _KEPT = 4  # settings versions remembered: the one in force and those of requests still running

    def __init__(self, fixed: Upstream | None = None) -> None:
        self._fixed = fixed
        self._pools: list[PooledUpstream] = []
        # id(settings) -> (settings, its mounts); the settings object is kept so its id stays its own
        self._cache: dict[int, tuple[Settings, Mounts]] = {}

    def mounts(self, settings: Settings) -> Mounts:
        cached = self._cache.get(id(settings))
        if cached is not None and cached[0] is settings:
            return cached[1]  # the fast path: the same settings object as an earlier request
        mounts = self._build(settings)
        if len(self._cache) >= self._KEPT:
            del self._cache[next(iter(self._cache))]  # the oldest version
        self._cache[id(settings)] = (settings, mounts)
        return mounts

    def _build(self, settings: Settings) -> Mounts:
        if self._fixed is not None:
            return Mounts({"*": self._fixed})
        pool = next((p for p in self._pools if p.upstream == settings.upstream), None)
        if pool is None:
            pool = PooledUpstream(settings.upstream)
            self._pools.append(pool)
        table: dict[str, Upstream] = {"*": pool}
        if settings.models:
            from gatekeeper.server.litellm_route import LiteLLMUpstream  # litellm itself: on a route's first call

            table |= {route.name: LiteLLMUpstream(route) for route in settings.models}
        return Mounts(table)

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()
        self._pools.clear()
        self._cache.clear()
