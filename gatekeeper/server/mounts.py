"""Which upstream serves a model: a table of mounts, as httpx's `mounts` pick a transport per URL
pattern: a `models:` route's exact model name -> its litellm upstream, "*" -> the pooled upstream
(or one injected upstream, for every model)."""

from __future__ import annotations

from collections.abc import Mapping

from gatekeeper.config import ModelRoute, Settings
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
    """The mounts of the settings in force, rebuilt when a reload changes `upstream:` or `models:`.
    A replaced pool is kept open (requests already sent finish on it) and closed at shutdown.
    With `fixed` (an injected upstream, e.g. a MockUpstream) every model goes there."""

    def __init__(self, fixed: Upstream | None = None) -> None:
        self._fixed = fixed
        self._pool: PooledUpstream | None = None
        self._retired: list[Upstream] = []
        self._models: list[ModelRoute] | None = None
        self._mounts: Mounts | None = None

    def mounts(self, settings: Settings) -> Mounts:
        mounts, pool = self._mounts, self._pool
        if (
            mounts is not None
            and self._models is settings.models
            and (pool is None or pool.upstream is settings.upstream)
        ):
            return mounts  # the fast path: the same settings objects as the last request
        if self._fixed is not None:
            self._mounts = Mounts({"*": self._fixed})
            self._models = settings.models
            return self._mounts
        if pool is not None and pool.upstream == settings.upstream:
            pool.upstream = settings.upstream  # same values, new object: back to the identity fast path
        else:
            if pool is not None:
                self._retired.append(pool)
            pool = self._pool = PooledUpstream(settings.upstream)
        table: dict[str, Upstream] = {"*": pool}
        if settings.models:
            from gatekeeper.server.litellm_route import LiteLLMUpstream  # litellm itself: on a route's first call

            table |= {route.name: LiteLLMUpstream(route) for route in settings.models}
        self._models, self._mounts = settings.models, Mounts(table)
        return self._mounts

    async def aclose(self) -> None:
        for upstream in [*self._retired, *([self._pool] if self._pool is not None else [])]:
            await upstream.aclose()
        self._retired.clear()
