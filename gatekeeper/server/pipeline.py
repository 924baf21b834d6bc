"""The proxy's request pipeline: one model call, from the client's body to the client's answer.

    snapshot = gk.snapshot()            every decision below is made with this one settings version
    -> read the body (size-capped) -> admit: codec.parse, resolve the tier, codec.gate (core/admit.py)
    -> the model's upstream (Mounts: the pool, a `models:` litellm route, or an injected one)
    -> Exchange.upstream_request (native, or translated to chat) -> upstream.send
    -> Exchange.plain / Exchange.stream_filter (translated back, calls enforced) -> client

The principle the pipeline keeps: an answer the enforcer cannot read with certainty never
reaches the client with a tool call in it (502 `upstream_invalid`, or a stream that ends with an
error event); a request field that could carry tools or redirect the upstream is understood and
gated, or refused. Answers whose bytes cannot spell a call are relayed unparsed (the fast path).

What a request learns goes to its record (server/served.py: the answer's headers and the span
are read from it) and to the log context (structlog context variables, scoped per request by the
app's middleware), so every line logged for it, the final `request` line included, says which
request, model, tier and tools it was about.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gatekeeper.core.admit import aadmit, allowed_calls
from gatekeeper.core.gatekeeper import Gatekeeper, Resolution
from gatekeeper.drift.identity import ANONYMOUS, evidence_identity, identity_of, presented
from gatekeeper.drift.monitor import DriftMonitor
from gatekeeper.drift.text_call import text_call
from gatekeeper.errors import AnswerIncomplete, AnswerInvalid, ProxyError
from gatekeeper.observe import logs, metrics, redact
from gatekeeper.protocols import table as protocols
from gatekeeper.protocols.answer_text import TextCollector, doc_texts, plain_texts
from gatekeeper.protocols.base import (
    Allowed,
    Call,
    Codec,
    Enforced,
    Event,
    StreamConverter,
    StreamFilter,
    Translator,
)
from gatekeeper.protocols.enforce import enforce_plain
from gatekeeper.protocols.sse import encode
from gatekeeper.server.mounts import Upstreams
from gatekeeper.server.served import Served, served
from gatekeeper.server.upstream import (
    TransferError,
    UpstreamAnswer,
    UpstreamRequest,
    rate_limit_headers,
)

T = TypeVar("T")
log = logs.get_logger(__name__)

JSON = "application/json"


class Exchange:
    """How one client protocol reaches one upstream: the client's codec, and the translator when
    the upstream does not speak that protocol (it then gets chat). The pipeline asks it to build
    the upstream request and to read the answer back; it never asks which case it is in."""

    __slots__ = ("chat_path", "codec", "translator")

    def __init__(self, codec: Codec, translator: Translator | None = None, chat_path: str = "") -> None:
        # chat_path: where a translated request goes (the chat codec's `upstream_path`)
        self.codec, self.translator, self.chat_path = codec, translator, chat_path

    def upstream_request(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The path (under the upstream's base URL) and body to send for a gated client body."""
        if self.translator is None:
            return self.codec.upstream_path, body
        chat = self.translator.to_chat(body)
        if left_out := self.translator.untranslated(body):
            logs.bind(tools_left_out=left_out)
            log.info("tools_left_out", tools=left_out, reason="a chat-only upstream runs no built-in tool")
        return self.chat_path, chat

    def local_count(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """A token count (the protocol's count endpoint) answered here when the upstream cannot
        (None: ask it)."""
        if self.translator is None:
            return None
        result = self.translator.count_tokens(body)
        if result is None:
            raise ProxyError(
                404, f"count_tokens needs an upstream that speaks {self.codec.name!r}", "protocol_not_served"
            )
        return result

    def plain(self, raw: bytes, offered: Allowed, request: dict[str, Any]) -> tuple[bytes, Enforced | None]:
        """A plain answer for the client (protocols/enforce.py `enforce_plain`, translated back
        first when the upstream got chat)."""
        translator = self.translator
        if translator is None:
            return enforce_plain(self.codec, raw, offered)
        return enforce_plain(self.codec, raw, offered, lambda doc: translator.from_chat(doc, request))

    def stream_filter(self, offered: Allowed, request: dict[str, Any]) -> StreamFilter:
        """Per-stream state: upstream events in, the client's (translated, enforced) events out."""
        enforcer = self.codec.stream_filter(offered)
        if self.translator is None:
            return enforcer
        return _Translated(self.translator.stream_from_chat(request), enforcer)

    def error(self, status: int, raw: bytes) -> bytes:
        """An upstream error's body for the client: an error in the client's own protocol passes
        as it is; anything else (empty, not JSON, another server's shape such as `{"detail": ...}`,
        or a chat error for a translated protocol) is re-shaped, keeping the upstream's message."""
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = None
        error = doc.get("error") if isinstance(doc, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str) and self.translator is None:
            return raw  # OpenAI's and Anthropic's error shapes both carry `error.message`
        if message is None and isinstance(doc, dict):  # e.g. vLLM's {"object": "error", "message": ...}
            message = doc.get("message") or doc.get("detail")
        if not isinstance(message, str):
            message = raw.decode("utf-8", "replace").strip()[:500] or "empty body"
        text = f"upstream answered HTTP {status}: {message}"
        return orjson.dumps(self.codec.error_body(status, text, "upstream_error", None))


class _Translated:
    """A chat stream converted to the client's protocol, then enforced in the client's protocol."""

    __slots__ = ("_converter", "_enforcer", "result")

    def __init__(self, converter: StreamConverter, enforcer: StreamFilter) -> None:
        self._converter, self._enforcer = converter, enforcer
        self.result = enforcer.result

    def feed(self, event: Event) -> list[Event]:
        return [kept for converted in self._converter.feed(event) for kept in self._enforcer.feed(converted)]

    def finish(self) -> list[Event]:
        out = [kept for converted in self._converter.finish() for kept in self._enforcer.feed(converted)]
        return out + self._enforcer.finish()

    def error(self, message: str, kind: str, code: str | None) -> Event:
        return self._enforcer.error(message, kind, code)


def exchange(protocol: str, codec: Codec, native: tuple[str, ...]) -> Exchange:
    """The exchange for a request read by `codec` (its protocol's, or its token count's) and an
    upstream speaking `native`. Built per request from the registry as it is now: a protocol
    registered again (another codec or translator) is used whole, both ways, at once."""
    if protocol in native:
        return Exchange(codec)
    translator, chat = protocols.translator(protocol), protocols.codec("chat")
    if translator is None or chat is None:
        raise ProxyError(
            404,
            f"the upstream does not speak {protocol!r} (upstream.protocols) and no translation to chat is installed",
            "protocol_not_served",
        )
    return Exchange(codec, translator, chat.upstream_path)


# -- one model call -------------------------------------------------------------------------


async def model_call(request: Request, protocol: str, count: bool = False) -> Response:
    """The model routes' endpoint: raises ProxyError and the core's errors (the app's exception
    handler shapes them in the client's protocol)."""
    started = time.perf_counter()
    request_id = redact.request_id(request.headers.get("x-request-id"))  # the client's, when it is safe to log
    logs.bind(request_id=request_id)
    record = served(request)
    record.request_id = request_id
    codec = protocols.codec(protocol, "count_tokens" if count else None)  # its own field allowlist
    if codec is None:
        raise ProxyError(404, f"protocol {protocol!r} is not served", "protocol_not_served")
    state = request.app.state
    gk: Gatekeeper = state.gk
    snapshot = gk.snapshot()  # taken before the body: a reload while it uploads changes nothing here
    body = await read_json(request, snapshot.settings.max_body_bytes)
    peer = request.client.host if request.client else None
    # Whose demotions and drift evidence: the credential the upstream checks (a 400 when the
    # request carries two that differ).
    found = presented(request.headers, snapshot.settings, peer, protocol)
    client = identity_of(found)
    named = snapshot.clients.name_of(found)  # a configured client (`clients:`): its rules apply too
    if named is not None:
        state.clients_seen[named] = state.clients_seen.get(named, 0) + 1
    # routing: may rewrite model/effort
    admitted = await aadmit(
        gk, codec, body, snapshot, route=True, client=client, client_policy=named, into=record.admission
    )
    resolution = admitted.resolution
    upstreams: Upstreams = state.upstreams
    upstream = upstreams.mounts(snapshot.settings).for_model(admitted.info.model)
    exchanged = exchange(protocol, codec, upstream.protocols)

    def answer_side() -> ModelCall:
        """What the answer side needs, derived from what admission checked (it refuses nothing)."""
        tier = resolution.tier.value
        metrics.REQUESTS.labels(tier, resolution.source).inc()
        if admitted.gated.hidden:
            metrics.TOOLS_HIDDEN.inc(len(admitted.gated.hidden))
        headers = {"x-gatekeeper-tier": tier, "x-gatekeeper-profile": resolution.source, "x-request-id": request_id}
        if admitted.route is not None:
            metrics.ROUTED.labels(admitted.route.reason).inc()
            if admitted.route.routed:
                headers["x-gatekeeper-routed"] = routed_header(admitted.route.pair)
        if admitted.budget is not None and (budget := admitted.budget.header()) is not None:
            headers["x-gatekeeper-tool-budget"] = budget
        return ModelCall(
            exchanged,
            # What the answer may carry: the offered tools, the rules of the pair used (tier rules and
            # tools.requires), what replaces a removed call (and where, for a structured answer).
            allowed_calls(codec, body, admitted, snapshot.settings.blocked_calls == "explain"),
            body,
            resolution,
            headers,
            started,
            gk.drift,
            (evidence_identity(client, snapshot.settings, admitted.info.model), admitted.gated.hidden),
            record,
        )

    if count and (local := exchanged.local_count(body)) is not None:
        call = answer_side()
        return call.finish(Response(orjson.dumps(local), media_type=JSON, headers=call.headers))
    path, upstream_body = exchanged.upstream_request(body)
    stream = admitted.info.stream
    prepared = _Meanwhile(answer_side)  # made while the upstream works on the request
    try:
        answer = await upstream.send(UpstreamRequest("POST", path, request.scope["headers"], upstream_body, stream))
    except BaseException:
        prepared.abandon()  # the send's error is the one answered: a set-up error is logged, not lost
        raise
    call = prepared.result()
    status = answer.status_code
    record.upstream_status = status
    logs.bind(upstream_status=status)
    if status >= 300:
        return await call.upstream_error(answer)
    passed = answer.passed_headers()
    content_type = passed.pop("content-type", "")
    if stream or content_type.lower().startswith("text/event-stream"):
        return call.stream(answer, passed)
    return call.plain(status, await answer.read(), passed)


class _Meanwhile(Generic[T]):
    """`make()`, run by the event loop as soon as the calling task next waits (a model call: once
    its request is written, while the upstream works on it), or when `result` first asks,
    whichever comes first. At one connection the proxy would otherwise idle through that wait.
    `make` runs outside the task's context: it must not bind log fields."""

    __slots__ = ("_error", "_make", "_value")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make: Callable[[], T] | None = make
        self._value: T | None = None
        self._error: Exception | None = None
        asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        make, self._make = self._make, None
        if make is None:
            return
        try:
            self._value = make()
        except Exception as exc:  # noqa: BLE001 - raised to the task, by `result`
            self._error = exc

    def result(self) -> T:
        self._run()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def abandon(self) -> None:
        """The result will not be asked for: not made if it was not yet, its error logged if it was."""
        self._make = None
        if self._error is not None:
            log.error("answer_setup_failed", exc_info=self._error)


class ModelCall:
    """What one model call carries from the request side to the answer side."""

    __slots__ = ("drift", "evidence", "exchange", "headers", "offered", "record", "request", "resolution", "started")

    def __init__(
        self,
        exchange: Exchange,
        offered: Allowed,
        request: dict[str, Any],
        resolution: Resolution,
        headers: dict[str, str],
        started: float,
        drift: DriftMonitor | None,
        evidence: tuple[str, list[str]] = (ANONYMOUS, []),  # the drift identity, the tools the tier hid
        record: Served | None = None,  # the request's record (server/served.py)
    ) -> None:
        self.exchange, self.offered, self.request, self.resolution = exchange, offered, request, resolution
        self.headers, self.started, self.drift, self.evidence = headers, started, drift, evidence
        self.record = record if record is not None else Served()

    def plain(self, status: int, raw: bytes, passed: dict[str, str]) -> Response:
        headers = passed | self.headers
        raw, enforced = self.exchange.plain(raw, self.offered, self.request)
        if enforced is not None and enforced.removed:
            headers["x-gatekeeper-blocked-calls"] = blocked_header(enforced.removed)
        self.answered(enforced)
        response = Response(raw, status_code=status, headers=headers, media_type=JSON)
        return self.finish(response, after=lambda: self._text_call(raw, enforced))

    def _text_call(self, raw: bytes, enforced: Enforced | None) -> None:
        """A plain answer's call written as text instead, for drift: looked for once the answer
        is written."""
        protocol = self.exchange.codec.name
        if enforced is not None and enforced.doc is not None:  # parsed already: its text read from it
            written = self._written_call(lambda: doc_texts(protocol, enforced.doc), enforced)
        else:
            written = self._written_call(lambda: plain_texts(protocol, raw), enforced, raw)
        self.answered(None, written)

    def stream(self, answer: UpstreamAnswer, passed: dict[str, str]) -> StreamingResponse:
        body = self._relay(answer, self.exchange.stream_filter(self.offered, self.request))
        return StreamingResponse(body, headers=passed | self.headers, media_type="text/event-stream")

    async def _relay(self, answer: UpstreamAnswer, stream_filter: StreamFilter) -> AsyncIterator[bytes]:
        """Enforce a stream event by event. Whatever goes wrong, the client's stream ends with a
        correctly framed error event (after a blank line, so no partial event can absorb it)."""
        error: tuple[str, str] | None = None
        out: list[bytes] = []  # encoded events not yet written; kept when a later event fails
        # The client's text, read for a call written as text only when tools were offered.
        text = TextCollector(self.exchange.codec.name) if self._watches_text() else None
        try:
            try:
                async for events in answer.events():
                    for event in events:
                        for kept in stream_filter.feed(event):
                            out.append(encode(kept))
                            if text is not None:
                                text.feed(kept)
                    if out:
                        chunk = out[0] if len(out) == 1 else b"".join(out)
                        out.clear()
                        yield chunk
                out.extend(encode(kept) for kept in stream_filter.finish())
            except AnswerIncomplete as exc:
                metrics.UPSTREAM_ERRORS.labels("stream_incomplete").inc()
                error = (str(exc), "upstream_incomplete")
            except AnswerInvalid as exc:
                metrics.UPSTREAM_ERRORS.labels("invalid").inc()
                error = (str(exc), "upstream_invalid")
            except ProxyError as exc:
                error = (exc.message, exc.code or "upstream_error")
            except TransferError as exc:
                metrics.UPSTREAM_ERRORS.labels("stream_incomplete").inc()
                error = (f"upstream stream broke off: {type(exc).__name__}", "upstream_incomplete")
            except Exception as exc:
                log.exception("stream_failed")
                error = (f"gatekeeper internal error: {type(exc).__name__}", "internal_error")
            if error is not None:
                logs.bind(stream_error=error[0])
                out.append(b"\n" + encode(stream_filter.error(error[0], "upstream_error", error[1])))
            if out:
                yield b"".join(out)
        finally:
            await answer.aclose()
            result = stream_filter.result
            self.answered(
                result, self._written_call(text.texts, result) if text is not None and error is None else None
            )
            self.finish(None, stream=True)

    async def upstream_error(self, answer: UpstreamAnswer) -> Response:
        """Upstream errors keep their status, and the headers a client's backoff reads
        (Retry-After, rate limits); the body as `Exchange.error` shapes it."""
        status = answer.status_code
        passed = answer.passed_headers()
        raw = await answer.read()
        metrics.UPSTREAM_ERRORS.labels(str(status)).inc()
        if status < 400:  # a redirect would send the client's key wherever the upstream says
            raise ProxyError(
                502,
                f"upstream answered HTTP {status}, which the proxy does not follow",
                "upstream_invalid",
                "upstream_error",
            )
        body = self.exchange.error(status, raw)
        headers = rate_limit_headers(passed) | self.headers
        return self.finish(Response(body, status_code=status, headers=headers, media_type=JSON))

    def _watches_text(self) -> bool:
        # A client that asked for JSON output may get JSON shaped like a call: that is no fault.
        return (
            self.drift is not None
            and len(self.offered.offered) > 0
            and not self.exchange.codec.asks_structured(self.request)
        )

    def _written_call(
        self, texts: Callable[[], list[str]], enforced: Enforced | None, raw: bytes | None = None
    ) -> Call | None:
        """The tool call the answer wrote as text instead of making it (drift/text_call.py), for
        drift: looked for only when tools were offered and the answer made no call. A plain
        answer the enforcer left unparsed (`raw`) is parsed for it only when its bytes hold an
        offered tool's name (a Responses answer echoes the request's tools: it is parsed already)."""
        if not self._watches_text() or (enforced is not None and enforced.calls):
            return None
        names = self.offered.offered
        if raw is not None and not any(name.encode() in raw for name in names):
            return None
        for text in texts():
            found = text_call(text, names)
            if found is not None:
                return Call(found.name, found.arguments, True, text=True)
        return None

    def answered(self, enforced: Enforced | None, written: Call | None = None) -> None:
        """Every answer, plain or streamed, from any upstream, ends here once (`enforced` is None
        for a plain answer that could not carry a call: the fast path; `written`: the call it
        wrote as text instead, `_written_call`)."""
        if written is not None and self.drift is not None:
            client, hidden = self.evidence
            self.drift.submit(self.resolution, [written], self.offered.offered, client, hidden)
        if enforced is None:
            return
        if enforced.removed:
            metrics.TOOL_CALLS_BLOCKED.inc(len(enforced.removed))
            self.record.blocked_calls = enforced.removed
            logs.bind(blocked_calls=enforced.removed)
            log.warning("tool_calls_blocked", tools=enforced.removed)
        if enforced.calls and self.drift is not None:
            client, hidden = self.evidence
            # O(1): judged off the request path
            self.drift.submit(self.resolution, enforced.calls, self.offered.offered, client, hidden)

    def finish(self, response: Response | None, after: Callable[[], None] | None = None, **fields: Any) -> Response:
        """The request's one `request` log line (its context says the rest), with the time until
        its answer was ready. A plain answer's line, and `after()` before it, run once the answer
        is written (the response's background task): the client does not wait for them."""
        latency_ms = round((time.perf_counter() - self.started) * 1000, 2)
        if response is None:
            log.info("request", status=200, latency_ms=latency_ms, **fields)
            return response  # type: ignore[return-value]
        self.record.line = fields | {"status": response.status_code, "latency_ms": latency_ms}
        response.background = _AfterAnswer(after, self.record)
        return response


class _AfterAnswer(BackgroundTask):
    """What runs once a plain answer is written: `after()`, then the request line. An error in
    `after` (a bug) is logged here: raised, it would reach the server after the answer, which
    closes the client's kept-alive connection. An answer whose write never ends leaves the line
    to `RequestScope`."""

    def __init__(self, after: Callable[[], None] | None, record: Served) -> None:  # no super(): no func
        self.after, self.record = after, record

    async def __call__(self) -> None:
        try:
            if self.after is not None:
                self.after()
        except Exception as exc:  # the answer is sent: logged, the connection kept
            log.error("after_answer_failed", exc_info=exc)
        finally:
            line, self.record.line = self.record.line, None
            if line is not None:
                log.info("request", **line)


def routed_header(pair: str) -> str:
    """`x-gatekeeper-routed`: a model name may carry any printable character, so the pair is
    percent-encoded outside a safe set and the header stays ASCII."""
    return quote(pair, safe="_-.:/@+")


_HEADER_NAMES, _HEADER_NAME_CHARS = 16, 64  # a header stays small: clients cap theirs (Node at 16 KB)


def blocked_header(names: list[str]) -> str:
    """Names come from model output: percent-encode anything outside a safe set, so a header
    can never be split or carry non-ASCII bytes; at most 16 names of 64 characters each (the
    upstream chooses how many and how long), then how many more."""
    shown = ",".join(quote(name[:_HEADER_NAME_CHARS], safe="_-.:/@") or "(unnamed)" for name in names[:_HEADER_NAMES])
    more = len(names) - _HEADER_NAMES
    return f"{shown},(+{more})" if more > 0 else shown


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request body as a JSON object, at most `limit` bytes (413 past it, 400 when not JSON).
    A compressed body is refused (415), never decoded: a decoder would be a second way to read
    the body, and a bomb's size is known only after it is inflated."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ProxyError(
            415,
            f"Content-Encoding {redact.clip(encoding, 64)!r} is not accepted: send the body uncompressed",
            "unsupported_encoding",
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ProxyError(413, f"request body is {declared} bytes; the limit is {limit}", "body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ProxyError(413, f"request body exceeds the limit of {limit} bytes", "body_too_large")
        chunks.append(chunk)
    try:
        body = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as exc:
        raise ProxyError(400, f"request body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(body, dict):
        raise ProxyError(400, f"request body must be a JSON object, got {type(body).__name__}", "invalid_body")
    return body


# -- tool-free endpoints, forwarded as they are ---------------------------------------------


async def forward(request: Request, method: str, path: str, body: dict[str, Any] | None = None) -> Response:
    """A tool-free endpoint on the default upstream: its answer relayed as it is (size-capped)."""
    request_id = redact.request_id(request.headers.get("x-request-id"))
    served(request).request_id = request_id  # errors from here on carry it too
    logs.bind(request_id=request_id)
    settings = request.app.state.gk.settings
    upstream = request.app.state.upstreams.mounts(settings).default
    answer = await upstream.send(UpstreamRequest(method, path, request.scope["headers"], body))
    if 300 <= answer.status_code < 400:
        await answer.aclose()
        raise ProxyError(
            502,
            f"upstream answered HTTP {answer.status_code}, which the proxy does not follow",
            "upstream_invalid",
            "upstream_error",
        )
    passed = answer.passed_headers()
    if answer.status_code >= 400:  # its other headers may name the upstream or echo the key (a realm)
        passed = rate_limit_headers(passed) | {k: v for k, v in passed.items() if k == "content-type"}
    passed["x-request-id"] = request_id
    # An error is read whole (and scrubbed, UpstreamAnswer.read), whatever type it says it is.
    if answer.status_code < 400 and passed.get("content-type", "").lower().startswith("text/event-stream"):
        return StreamingResponse(answer.chunks(), status_code=answer.status_code, headers=passed)
    return Response(await answer.read(), status_code=answer.status_code, headers=passed)
