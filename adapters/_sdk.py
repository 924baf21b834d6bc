"""What the OpenAI and Anthropic SDK wrappers share: a transparent proxy over an SDK client whose
request-making methods on chosen resources gate their keyword arguments first.

`routes` maps a resource path (`("chat", "completions")`, `("responses",)`, `("messages",)`) to
the protocol its calls speak. Reaching a resource through `with_raw_response`,
`with_streaming_response`, `with_options` or `copy` keeps it gated. Everything else is the
client's own attribute, untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gatekeeper.core.gatekeeper import Gatekeeper

GATED_CALLS = frozenset({"create", "parse", "stream", "count_tokens"})
_VIEWS = frozenset({"with_raw_response", "with_streaming_response"})
_COPIES = frozenset({"with_options", "copy"})

# protocol, gatekeeper, the call's kwargs -> the kwargs to send (gated); sync and async forms.
SyncGate = Callable[[str, Gatekeeper, dict[str, Any]], dict[str, Any]]
AsyncGate = Callable[[str, Gatekeeper, dict[str, Any]], Awaitable[dict[str, Any]]]


class GatedClient:
    def __init__(
        self,
        target: Any,
        gk: Gatekeeper,
        routes: dict[tuple[str, ...], str],
        gate: SyncGate,
        agate: AsyncGate,
        is_async: bool,
        path: tuple[str, ...] = (),
        streaming: bool = False,
    ) -> None:
        # streaming: reached through with_streaming_response, whose async calls open a context.
        self._target, self._gk, self._routes = target, gk, routes
        self._gate, self._agate, self._async, self._path, self._streaming = gate, agate, is_async, path, streaming

    def _wrap(self, target: Any, path: tuple[str, ...], streaming: bool | None = None) -> GatedClient:
        return GatedClient(
            target,
            self._gk,
            self._routes,
            self._gate,
            self._agate,
            self._async,
            path,
            self._streaming if streaming is None else streaming,
        )

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name in _VIEWS:
            return self._wrap(attr, self._path, name == "with_streaming_response")
        if name in _COPIES and callable(attr):
            return lambda *args, **kwargs: self._wrap(attr(*args, **kwargs), self._path)
        protocol = self._routes.get(self._path)
        if protocol is not None and name in GATED_CALLS:
            return self._gated_call(attr, protocol, name)
        path = (*self._path, name)
        if any(route[: len(path)] == path for route in self._routes):
            return self._wrap(attr, path)
        return attr

    def _gated_call(self, call: Callable[..., Any], protocol: str, name: str) -> Callable[..., Any]:
        if not self._async:
            return lambda **kwargs: call(**self._gate(protocol, self._gk, kwargs))
        if name == "stream" or self._streaming:
            # These return an async context manager, not a coroutine: gate when it is entered.
            return lambda **kwargs: _GatedAsyncContext(call, kwargs, lambda kw: self._agate(protocol, self._gk, kw))

        async def gated(**kwargs: Any) -> Any:
            return await call(**await self._agate(protocol, self._gk, kwargs))

        return gated

    def __repr__(self) -> str:
        return f"<gated {self._target!r}>"


class _GatedAsyncContext:
    def __init__(
        self,
        open_: Callable[..., Any],
        kwargs: dict[str, Any],
        gate: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
    ) -> None:
        self._open, self._kwargs, self._gate = open_, kwargs, gate
        self._manager: Any = None

    async def __aenter__(self) -> Any:
        self._manager = self._open(**await self._gate(self._kwargs))
        return await self._manager.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._manager.__aexit__(*exc)
