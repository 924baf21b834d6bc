"""The proxy's request step and answer side for the in-process SDK wrappers
(`gatekeeper.adapters.openai_sdk`, `.anthropic_sdk`), in the SDK client's own HTTP client.

The wrappers gate a call's keyword arguments (adapters/_sdk.py: typed errors before anything is
sent); this gates every model request the SDK sends once more, whatever sent it (a method the
wrappers know, or the SDK's low-level `client.post`), and what comes back. A model may
call a tool it was never offered (a hallucination, or a prompt naming a hidden tool), and an
agent framework runs any call whose name it has a tool for: its own tool list is not the gated
one. So, as the proxy does, a call reaches the SDK only when it calls a tool the request offered
under the same kind (the codec's `enforce` / stream filter, `blocked_calls` explained or
stripped), and an answer the codec cannot read is an error, never a call.

It sits in the SDK client's HTTP transport, so every model call the SDK makes is read, whatever
method made it (`create`, `parse`, `stream`, `with_raw_response`, `with_streaming_response`):

    POST .../chat/completions | .../responses | .../messages
      -> the proxy's request step (core/admit.py) on the body, as sent; refused: a 400 in the
         protocol's shape, never sent
      -> the SDK's own HTTP client (its pool, proxies, timeouts) -> the upstream
      -> a plain answer: enforced and re-written; a stream: filtered event by event
      -> the SDK, which parses what it gets

The module works with `httpx` and with `httpx2` (the SDKs' fork): both have the same transport API.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson

from gatekeeper.core.admit import Admitted, aadmit, admit, allowed_calls
from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.errors import AnswerIncomplete, AnswerInvalid, GatekeeperError, NotMeasured, RequestInvalid
from gatekeeper.observe import logs
from gatekeeper.protocols import table as protocols
from gatekeeper.protocols.base import Allowed, Codec, Enforced, Event, StreamFilter
from gatekeeper.protocols.enforce import enforce_plain
from gatekeeper.protocols.sse import SSEParser, encode
from gatekeeper.protocols.strict_json import loads

# Headers of the upstream's answer that describe bytes the client no longer gets as they were.
_REWRITTEN = frozenset({"content-length", "content-encoding", "transfer-encoding"})


# A POST carrying a top-level field that offers tools (any protocol's `tool_fields`) to a path
# that is not a model call is refused (whatever endpoint it is, it is not one the gate can read),
# but for token counts (the wrappers gate their arguments; no model runs).
_COUNTS = ("/count_tokens", "/input_tokens")


def endpoint(method: str, path: str) -> str | None:
    """The protocol of a model call (None: not one: a stored object, a count, a list). The path
    is compared as servers route it: many ignore a trailing slash (Express) or case, and
    Starlette's redirect of `/chat/completions/` was followed below the gate."""
    if method.upper() != "POST":
        return None
    path = path.rstrip("/").lower()
    return next(
        (
            entry.name
            for entry in protocols.PROTOCOLS.values()
            if any(path.endswith(own.removeprefix("/v1")) for own in entry.paths)
        ),
        None,
    )


def needs_gate(codec: Codec, body: dict[str, Any]) -> bool:
    """Whether a model call has anything to gate: a field that offers (or could offer) tools, or
    one the codec does not know (which the gate refuses). One with neither may receive no call
    and costs no tier lookup (nor a measurement), as with the proxy's own request step."""
    entry = protocols.PROTOCOLS[codec.name]
    return bool(entry.carriers(body)) or not body.keys() <= entry.request_fields.keys()


class AnswerGate:
    """The answer side of one gated model call, for front ends that get the answer as an object
    rather than bytes (the LiteLLM hook): `enforce` a plain answer (as the protocol's JSON, in
    place), or relay a stream's chunks through `relay_stream()`."""

    __slots__ = ("allowed", "codec")

    def __init__(self, codec: Codec, allowed: Allowed) -> None:
        self.codec, self.allowed = codec, allowed

    @classmethod
    def of(cls, gk: Gatekeeper, protocol: str, body: Any = None, admitted: Admitted | None = None) -> AnswerGate:
        """For `body` gated as `admitted`; without them, for a call that offered no tools (so
        every call in its answer is removed: a model may call a tool it was never offered)."""
        codec = protocols.codec(protocol)
        if codec is None:
            raise ValueError(f"unknown protocol {protocol!r}: expected one of {protocols.served()}")
        return cls(codec, allowed_calls(codec, body, admitted, gk.settings.blocked_calls == "explain"))

    def enforce(self, doc: Any) -> Enforced:
        return self.codec.enforce(doc, self.allowed)

    def stream_filter(self) -> StreamFilter:
        return self.codec.stream_filter(self.allowed)

    def relay_stream(self) -> StreamRelay:
        return StreamRelay(self.stream_filter())


class StreamRelay:
    """A stream enforced chunk by chunk, for a front end that relays chunks of its own (the
    LiteLLM hook: its event objects, or the Messages API's SSE bytes), as the proxy's relay does:
    a removed call's events dropped and explained, the rest renumbered.

    `feed_event` takes one event as the protocol's JSON object and returns None when it goes to
    the client as it is, else the events (JSON objects, possibly none) that replace it;
    `feed_bytes` takes SSE bytes and returns the bytes to relay. A chunk the codec cannot read
    ends the stream with the protocol's error event (an answer that cannot be read is never
    relayed as a call); nothing is relayed after it (`failed`). `finish` ends a byte stream (the
    protocol's error event when it ended before its end marker); a stream of objects ends where
    its relay ends it (LiteLLM writes chat's `[DONE]` itself). `removed`: the calls removed so far."""

    __slots__ = ("_bytes", "_filter", "_raw", "failed")

    def __init__(self, stream_filter: StreamFilter) -> None:
        self._filter, self._bytes, self.failed = stream_filter, AnswerStream(stream_filter), False
        self._raw = False  # fed bytes: the stream's end marker is the codec's to check

    @property
    def removed(self) -> list[str]:
        return self._filter.result.removed

    def feed_event(self, doc: dict[str, Any]) -> list[dict[str, Any]] | None:
        if self.failed:
            return []
        kind = doc.get("type")
        event = Event(data=orjson.dumps(doc).decode(), event=kind if isinstance(kind, str) else None)
        try:
            kept = [loads(e.data, "stream event") if e is not event else doc for e in self._filter.feed(event)]
        except AnswerInvalid as exc:
            self.failed = True
            return [loads(self._filter.error(str(exc), "upstream_error", "upstream_invalid").data, "error event")]
        return None if kept == [doc] else kept

    def feed_bytes(self, chunk: bytes) -> bytes:
        self._raw = True
        out = self._bytes.feed(chunk)
        self.failed = self._bytes.failed
        return out

    def finish(self) -> bytes:
        if self.failed or not self._raw:
            return b""
        out = self._bytes.finish()
        self.failed = self._bytes.failed
        return out


class AnswerStream:
    """A streamed answer, filtered chunk by chunk; ends in the protocol's error event when the
    filter cannot read it (as the proxy's relay does)."""

    def __init__(self, stream_filter: StreamFilter) -> None:
        self._filter, self._parser, self.failed = stream_filter, SSEParser(), False

    def feed(self, chunk: bytes) -> bytes:
        if self.failed:
            return b""
        try:
            return b"".join(encode(kept) for event in self._parser.feed(chunk) for kept in self._filter.feed(event))
        except AnswerInvalid as exc:
            return self._error(str(exc), "upstream_invalid")

    def finish(self) -> bytes:
        if self.failed:
            return b""
        try:
            out = [encode(kept) for event in self._parser.finish() for kept in self._filter.feed(event)]
            out += [encode(kept) for kept in self._filter.finish()]
            return b"".join(out)
        except AnswerIncomplete as exc:
            return self._error(str(exc), "upstream_incomplete")
        except AnswerInvalid as exc:
            return self._error(str(exc), "upstream_invalid")

    def _error(self, message: str, code: str) -> bytes:
        self.failed = True
        return b"\n" + encode(self._filter.error(message, "upstream_error", code))


def _httpx_of(client: Any) -> Any:
    """The httpx package (`httpx` or `httpx2`) an SDK's HTTP client is built on."""
    for kind in type(client).__mro__:
        package = kind.__module__.partition(".")[0]
        if package in ("httpx", "httpx2"):
            return importlib.import_module(package)
    raise GatekeeperError(f"cannot gate the answers of {type(client).__name__}: not an httpx client")


def gating_http_client(gk: Gatekeeper, inner: Any, is_async: bool) -> Any:
    """An HTTP client for the SDK that sends every request through `inner` (the SDK's own) and
    enforces the answers of model calls."""
    httpx = _httpx_of(inner)

    def model_call(request: Any, raw: bytes) -> tuple[Codec, dict[str, Any]] | None:
        """The codec and body of a model call (None: another request, sent as it is)."""
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if request.method.upper() == "POST" and encoding not in ("", "identity"):
            # As the proxy's 415: a compressed body cannot be read for tools (the SDKs never send one).
            raise RequestInvalid(f"Content-Encoding {encoding[:64]!r} is not accepted: send the body uncompressed")
        protocol = endpoint(request.method, request.url.path)
        codec = protocols.codec(protocol) if protocol is not None else None
        if codec is None:
            counts = request.url.path.rstrip("/").lower().endswith(_COUNTS)
            if request.method.upper() == "POST" and not counts and _carries_tools(raw):
                raise RequestInvalid(
                    f"POST {request.url.path[:128]} is not a model call gatekeeper gates, and its body offers tools"
                )
            return None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            raise RequestInvalid(f"the body of a {protocol} call must be a JSON object")
        return codec, body

    def rebuilt(request: Any, body: dict[str, Any]) -> Any:
        """`request` with the gated body (the SDK's own headers, timeouts and URL)."""
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
        return httpx.Request(
            request.method, request.url, headers=headers, content=orjson.dumps(body), extensions=request.extensions
        )

    def refused(codec: Codec, exc: GatekeeperError) -> Any:
        """The proxy's answer to a request it refuses, in the protocol's shape (the SDK raises its
        typed error: BadRequestError, or InternalServerError for a 503 under `reject`)."""
        status = 503 if isinstance(exc, NotMeasured) else 400
        kind = "service_unavailable" if status == 503 else "invalid_request_error"
        return httpx.Response(status, json=codec.error_body(status, str(exc), kind, None))

    def judge(request: Any) -> tuple[Any, tuple[Codec, Allowed] | None] | Any:
        """What to send for `request` (gated) and what its answer may carry; or, for a refused
        request, the response that says why."""
        found = model_call(request, request.read())
        if found is None or not needs_gate(*found):
            return ungated(request, found)
        codec, body = found
        with logs.request_scope():  # what the step binds to the log context is not the caller's
            try:
                admitted = admit(gk, codec, body)
            except GatekeeperError as exc:
                return refused(codec, exc)
        return rebuilt(request, body), (
            codec,
            allowed_calls(codec, body, admitted, gk.settings.blocked_calls == "explain"),
        )

    async def ajudge(request: Any) -> tuple[Any, tuple[Codec, Allowed] | None] | Any:
        found = model_call(request, await request.aread())
        if found is None or not needs_gate(*found):
            return ungated(request, found)
        codec, body = found
        with logs.request_scope():
            try:
                admitted = await aadmit(gk, codec, body)
            except GatekeeperError as exc:
                return refused(codec, exc)
        return rebuilt(request, body), (
            codec,
            allowed_calls(codec, body, admitted, gk.settings.blocked_calls == "explain"),
        )

    def ungated(request: Any, found: tuple[Codec, dict[str, Any]] | None) -> tuple[Any, tuple[Codec, Allowed] | None]:
        """Not a model call (sent as it is), or one with nothing to gate: sent as read (the raw
        bytes may say more than the gate read: a duplicate key), its answer judged as offered nothing."""
        if found is None:
            return request, None
        codec, body = found
        return rebuilt(request, body), (codec, allowed_calls(codec, None, None, gk.settings.blocked_calls == "explain"))

    def headers_of(response: Any) -> list[tuple[str, str]]:
        return [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _REWRITTEN]

    def unread_answer(response: Any, judgement: tuple[Codec, Allowed], chunks: Callable[..., Any]) -> Any | None:
        """The answer to a judged call when its body is not read here: an error status as it is,
        a stream enforced chunk by chunk (`chunks(response, AnswerStream)`); None: a plain answer."""
        if response.status_code >= 300:
            return response
        if not str(response.headers.get("content-type", "")).lower().startswith("text/event-stream"):
            return None
        codec, allowed = judgement
        answer = AnswerStream(codec.stream_filter(allowed))
        return httpx.Response(response.status_code, headers=headers_of(response), stream=chunks(response, answer))

    if not is_async:

        class _Chunks(httpx.SyncByteStream):  # type: ignore[misc,name-defined]
            def __init__(self, response: Any, answer: AnswerStream) -> None:
                self._response, self._answer = response, answer

            def __iter__(self) -> Iterator[bytes]:
                for chunk in self._response.iter_bytes():
                    if out := self._answer.feed(chunk):
                        yield out
                if out := self._answer.finish():
                    yield out

            def close(self) -> None:
                self._response.close()

        class _Transport(httpx.BaseTransport):  # type: ignore[misc,name-defined]
            def handle_request(self, request: Any) -> Any:
                judged = judge(request)
                if not isinstance(judged, tuple):
                    return judged  # refused: never sent
                request, judgement = judged
                response = inner.send(request, stream=True, follow_redirects=False)
                if judgement is None or (unread := unread_answer(response, judgement, _Chunks)) is not None:
                    return response if judgement is None else unread
                codec, allowed = judgement
                try:
                    raw = response.read()
                finally:
                    response.close()
                return _plain(httpx, response, codec, raw, allowed, headers_of(response))

        # Redirects are followed here, above the gate, as the SDK's own client would: each hop is
        # judged (inner followed them below it: a POST to `/chat/completions/` that the upstream
        # redirected to `/chat/completions` reached the model ungated). Closing this client
        # leaves `inner` (the SDK's) open.
        return httpx.Client(transport=_Transport(), follow_redirects=inner.follow_redirects)

    class _AsyncChunks(httpx.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, response: Any, answer: AnswerStream) -> None:
            self._response, self._answer = response, answer

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._response.aiter_bytes():
                if out := self._answer.feed(chunk):
                    yield out
            if out := self._answer.finish():
                yield out

        async def aclose(self) -> None:
            await self._response.aclose()

    class _AsyncTransport(httpx.AsyncBaseTransport):  # type: ignore[misc,name-defined]
        async def handle_async_request(self, request: Any) -> Any:
            judged = await ajudge(request)
            if not isinstance(judged, tuple):
                return judged  # refused: never sent
            request, judgement = judged
            response = await inner.send(request, stream=True, follow_redirects=False)
            if judgement is None or (unread := unread_answer(response, judgement, _AsyncChunks)) is not None:
                return response if judgement is None else unread
            codec, allowed = judgement
            try:
                raw = await response.aread()
            finally:
                await response.aclose()
            return _plain(httpx, response, codec, raw, allowed, headers_of(response))

    return httpx.AsyncClient(transport=_AsyncTransport(), follow_redirects=inner.follow_redirects)


def _carries_tools(raw: bytes) -> bool:
    """Whether a request body is a JSON object with a top-level tool field."""
    tool_fields = protocols.tool_fields()
    if not any(name.encode() in raw for name in tool_fields):
        return False  # the fast path: most other POSTs (files, embeddings) cannot name one
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(body, dict) and any(body.get(k) is not None for k in tool_fields)


def _plain(
    httpx: Any, response: Any, codec: Codec, raw: bytes, allowed: Allowed, headers: list[tuple[str, str]]
) -> Any:
    """A plain answer's enforced response; one that cannot be read is a 502 in the protocol's shape."""
    try:
        content, _ = enforce_plain(codec, raw, allowed)
    except AnswerInvalid as exc:
        body = codec.error_body(502, f"gatekeeper: {exc}", "upstream_error", "upstream_invalid")
        return httpx.Response(502, json=body)
    return httpx.Response(response.status_code, headers=headers, content=content)
