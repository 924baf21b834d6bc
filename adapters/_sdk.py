"""What the OpenAI and Anthropic SDK wrappers share: a transparent proxy over an SDK client whose
request-making methods on chosen resources gate their keyword arguments first, and that gating
step (the call's keyword arguments -> a request body for gatekeeper's own request step,
`gatekeeper.gate_body`). It imports neither SDK: each wrapper imports only its own.

`routes` maps a resource path (`("chat", "completions")`, `("responses",)`, `("messages",)`) to
the protocol its calls speak. Reaching a resource through `with_raw_response`,
`with_streaming_response`, `with_options` or `copy` keeps it gated. A gated resource is closed:
besides its gated calls, only the names `passed` lists for it (reading, listing, deleting stored
objects: calls that send no model request) reach the SDK; any other method or sub-resource (a
tool runner, a thread, a batch, a websocket, a compaction, a method the SDK adds next year)
raises `RequestInvalid` when called, since it would send tools the gate never saw. The other
resources of the client are closed the same way: only those `open_resources` names (files,
models, embeddings, ...: APIs that run no model with tools) pass; assistants, threads, realtime,
batches, evals, managed agents and any resource the SDK adds next year raise when called.
Everything else (the client's settings, `base_url`, `close`, ...) is the client's own, untouched.

Answers are enforced as the proxy enforces them (gatekeeper.inprocess.answers, in the SDK
client's HTTP transport): a call to a tool the request did not offer never reaches the SDK.

The keyword arguments are read as the SDK will send them (`given`): its "not given" markers
removed, any iterable (a tuple, a generator) a list, a pydantic model (an earlier answer's
output item or content block, passed back) the dict the SDK dumps it as; the gated call then
sends exactly what was gated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import pydantic

from gatekeeper import PROTOCOLS, Gatekeeper, RequestInvalid, agate_body, gate_body, gating_http_client, tool_carriers

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
        passed: Mapping[tuple[str, ...], frozenset[str]] | None = None,
        http: Callable[[Any], Any] | None = None,
        open_resources: frozenset[tuple[str, ...]] = frozenset(),
    ) -> None:
        # streaming: reached through with_streaming_response, whose async calls open a context.
        self._target, self._gk, self._routes = target, gk, routes
        self._gate, self._agate, self._async, self._path, self._streaming = gate, agate, is_async, path, streaming
        self._passed = passed or {}
        self._http = http  # the SDK's HTTP client -> one that enforces answers (gatekeeper.inprocess.answers)
        self._open = open_resources  # resources (and theirs) that make no model call with tools

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
            self._passed,
            self._http,
            self._open,
        )

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name in _VIEWS:
            return self._wrap(attr, self._path, name == "with_streaming_response")
        if name in _COPIES and callable(attr):
            return lambda *args, **kwargs: self._wrap(attr(*args, **self._answers_kept(kwargs)), self._path)
        protocol = self._routes.get(self._path)
        if protocol is not None and name in GATED_CALLS:
            return self._gated_call(attr, protocol, name)
        path = (*self._path, name)
        if any(route[: len(path)] == path for route in self._routes):
            return self._wrap(attr, path)
        if protocol is not None and not name.startswith("_") and name not in self._passed.get(self._path, ()):
            return _Refused(".".join(path))  # a gated resource is closed: see the module docstring
        if protocol is None and _is_resource(attr) and not any(path[: len(p)] == p for p in self._open):
            return _Refused(".".join(path))  # another API that runs models with tools (assistants, realtime, ...)
        return attr

    def _answers_kept(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A copy's options: an HTTP client of its own still has its answers enforced."""
        if self._http is not None and kwargs.get("http_client") is not None:
            return kwargs | {"http_client": self._http(kwargs["http_client"])}
        return kwargs

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


def _is_resource(attr: Any) -> bool:
    """An SDK API resource (both SDKs build them on `SyncAPIResource` / `AsyncAPIResource`)."""
    return any(kind.__name__ in ("SyncAPIResource", "AsyncAPIResource") for kind in type(attr).__mro__)


class _Refused:
    """A method or sub-resource of a gated resource that the gate cannot see through: calling it
    (or anything reached from it) raises instead of sending tools ungated."""

    def __init__(self, where: str) -> None:
        self._where = where

    def __getattr__(self, name: str) -> _Refused:
        return _Refused(f"{self._where}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestInvalid(
            f"{self._where} is not gated by a gated client (the tools it sends would reach the model "
            "unseen): use create/stream/parse, or the client itself where no tier applies"
        )

    def __repr__(self) -> str:
        return f"<refused {self._where}>"


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


# -- the gating step, shared --------------------------------------------------------------------


def tool_fields(protocol: str) -> tuple[str, ...]:
    """The request fields of `protocol` that carry tools (or could: a stored prompt)."""
    entry = PROTOCOLS[protocol]
    return (*entry.tool_fields, *entry.stored_tools)


# The SDKs' own keyword arguments (request options, and `parse`'s output type): not request fields.
SDK_ARGUMENTS = ("extra_headers", "extra_query", "extra_body", "timeout", "text_format", "betas", "output_format")
# The SDKs' "not given" markers: `openai.NOT_GIVEN` / `openai.omit` and anthropic's of the same
# names. Known by class and package, so that neither SDK needs to be imported to recognise them.
_SENTINEL_CLASSES = frozenset({"NotGiven", "Omit"})
_SENTINEL_PACKAGES = frozenset({"openai", "anthropic"})


def is_sentinel(value: Any) -> bool:
    """An SDK's "not given" marker: the SDK sends nothing for that field."""
    kind = type(value)
    return kind.__name__ in _SENTINEL_CLASSES and kind.__module__.partition(".")[0] in _SENTINEL_PACKAGES


def given(value: Any) -> Any:
    """`value` as the SDK itself will send it, at any depth: its "not given" markers removed, a
    pydantic model dumped as the SDKs dump one for a request, any other iterable but a string
    (a tuple, a generator: the SDKs take `Iterable` fields) a list; other values left as they
    are. What the gate reads must be what goes on the wire: a tuple of content blocks was read
    as "not a list" (nothing to gate) and sent as an array."""
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(
            mode="json", exclude_unset=True, by_alias=True, exclude=getattr(value, "__api_exclude__", None)
        )
    if isinstance(value, Mapping):
        return {k: given(v) for k, v in value.items() if not is_sentinel(v)}
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, bytearray, memoryview)):
        return [given(v) for v in value if not is_sentinel(v)]
    return value


def tool_body(protocol: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's keyword arguments as the request body the SDK will send (`given`: every "not
    given" marker removed, in every field; a tool field set to None counts as not given), with
    the SDK's own arguments (`SDK_ARGUMENTS`) as they were but `extra_body`, read like a field."""
    fields = tool_fields(protocol)
    body = {
        k: v if k in SDK_ARGUMENTS and k != "extra_body" else given(v)
        for k, v in kwargs.items()
        if not is_sentinel(v) and not (v is None and k in (*fields, "parallel_tool_calls"))
    }
    extra = body.get("extra_body")
    if isinstance(extra, dict) and any(k in extra for k in fields):
        raise RequestInvalid(
            f"tool fields in extra_body ({', '.join(k for k in fields if k in extra)}) "
            "cannot be gated: pass them as keyword arguments"
        )
    return body


def _carries_tools(protocol: str, body: dict[str, Any]) -> bool:
    """Whether a call offers or could offer tools (tool fields, tool-carrying input items or
    content blocks, an `extra_body`, whose fields the SDK merges into the request): then it is
    gated. One without a model name is gated too, and refused there (no tier to judge it by)."""
    return any(k in body for k in tool_fields(protocol)) or bool(tool_carriers(protocol, body))


def gate_kwargs(protocol: str, gk: Gatekeeper, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments to call the SDK with (`tool_body`): gated when they carry tools."""
    body = tool_body(protocol, kwargs)
    if _carries_tools(protocol, body):
        gate_body(gk, protocol, body, SDK_ARGUMENTS)
    return body


async def agate_kwargs(protocol: str, gk: Gatekeeper, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`gate_kwargs` for async clients (never blocks the event loop)."""
    body = tool_body(protocol, kwargs)
    if _carries_tools(protocol, body):
        await agate_body(gk, protocol, body, SDK_ARGUMENTS)
    return body


def gated_sdk_client(client: Any, gk: Gatekeeper, is_async: bool) -> tuple[Any, Callable[[Any], Any]]:
    """A copy of an SDK client whose HTTP client enforces answers, and the function that wraps
    an HTTP client so (for copies made later with an `http_client` of their own)."""

    def http(inner: Any) -> Any:
        return gating_http_client(gk, inner, is_async)

    return client.with_options(http_client=http(client._client)), http
