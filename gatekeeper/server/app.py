"""The gating proxy: an OpenAI-compatible ASGI app (plain Starlette), thin over the Gatekeeper core.

One pipeline for every route that reaches a model, whatever the protocol or the upstream:
    read the body (size-capped) -> codec.parse -> gk.aresolve -> codec.gate
    -> forward (pooled aiohttp, or litellm for `models:` routes; translated to chat when the
       upstream does not speak the client's protocol) -> codec.enforce / codec.stream_filter
    -> client.

The principle the pipeline keeps: an answer the enforcer cannot read with certainty never
reaches the client with a tool call in it (502 `upstream_invalid`, or a stream that ends with an
error event); a request field that could carry tools or redirect the upstream is understood and
gated, or refused. Answers whose bytes cannot spell a call are relayed unparsed (the fast path).

Endpoints raise (ProxyError and the core's errors); `_on_error` turns every error into the
client protocol's shape. The request's log context (request_id, model, effort, tier) lives in
structlog's context variables.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from gatekeeper import metrics
from gatekeeper.core.gatekeeper import Gatekeeper, Resolution
from gatekeeper.drift.monitor import DriftMonitor
from gatekeeper.errors import (
    AnswerIncomplete,
    AnswerInvalid,
    ConfigError,
    GatekeeperError,
    NotMeasured,
    ProxyError,
    RequestInvalid,
    ToolChoiceBlocked,
)
from gatekeeper.protocols import table as protocols
from gatekeeper.protocols.base import (
    Codec,
    Enforced,
    Event,
    Offered,
    RequestInfo,
    StreamConverter,
    StreamFilter,
    may_carry_calls,
)
from gatekeeper.protocols.chat import loads
from gatekeeper.server.admin import admin_routes
from gatekeeper.server.sse import SSEParser, encode
from gatekeeper.server.upstream import TransferError, UpstreamPool, UpstreamResponse, answer_headers

log = structlog.get_logger("gatekeeper.server.app")

_JSON = "application/json"
# Tool-free endpoints forwarded untouched (after a check that the body carries no tool field).
PASSTHROUGH = ("/v1/embeddings", "/v1/completions")
_TOOL_FIELDS = ("tools", "functions", "tool_choice", "function_call")


def create_app(gk: Gatekeeper) -> Starlette:
    """The proxy app around a Gatekeeper. The app never closes `gk`: whoever created it does."""
    admin_key = gk.settings.admin_key
    if admin_key is not None and not admin_key.strip():
        raise ConfigError("admin_key: blank; set a real key or remove the setting to disable the admin API")
    routes: list[BaseRoute] = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        *(Route(path, passthrough, methods=["POST"]) for path in PASSTHROUGH),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
    ]
    if admin_key:
        routes += admin_routes()
    gateway = None
    if gk.settings.mcp.servers:
        from gatekeeper.mcp import McpGateway, mcp_routes  # the mcp SDK is imported only when configured

        gateway = McpGateway(gk)
        routes += mcp_routes(gateway)
    app = Starlette(
        routes=routes,
        lifespan=_lifespan,
        exception_handlers={GatekeeperError: _on_error, HTTPException: _on_error, Exception: _on_error},
    )
    app.router.redirect_slashes = False  # a trailing slash is a 404 naming the endpoints, never a 307
    app.state.gk = gk
    app.state.admin_key = admin_key
    app.state.mcp = gateway
    return app


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    app.state.pool = UpstreamPool(app.state.gk.settings.upstream)
    app.state.retired_pools = []
    try:
        async with app.state.mcp.running() if app.state.mcp is not None else contextlib.nullcontext():
            yield
    finally:
        for pool in [app.state.pool, *app.state.retired_pools]:
            await pool.aclose()


def _pool(request: Request) -> UpstreamPool:
    """The pool for the upstream settings in force. A reload that changes `upstream:` gets a new
    pool; requests already sent finish on the old one, closed at shutdown."""
    state = request.app.state
    upstream = state.gk.settings.upstream
    pool: UpstreamPool = state.pool
    if pool.upstream is upstream:
        return pool
    if pool.upstream == upstream:
        pool.upstream = upstream  # same values, new object: back to the identity fast path
        return pool
    state.retired_pools.append(pool)
    pool = state.pool = UpstreamPool(upstream)
    return pool


# -- the model routes ----------------------------------------------------------------------------


async def chat_completions(request: Request) -> Response:
    return await _model_call(request, "chat")


async def responses(request: Request) -> Response:
    return await _model_call(request, "responses")


async def messages(request: Request) -> Response:
    return await _model_call(request, "messages")


async def count_tokens(request: Request) -> Response:
    return await _model_call(request, "messages", count=True)


@dataclass
class _Call:
    """What one model call carries from the request side to the answer side."""

    codec: Codec
    info: RequestInfo
    resolution: Resolution
    offered: Offered
    headers: dict[str, str]
    started: float
    translator: Any | None = None  # protocols.base.Translator when the upstream speaks only chat
    request: dict[str, Any] | None = None  # the gated client body, for the translator's answers
    drift: DriftMonitor | None = None  # where the answer's calls are recorded (with `resolution`)


async def _model_call(request: Request, protocol: str, count: bool = False) -> Response:
    started = time.perf_counter()
    structlog.contextvars.clear_contextvars()
    request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
    structlog.contextvars.bind_contextvars(request_id=request_id)
    codec = protocols.codec(protocol)
    if codec is None:
        raise HTTPException(404)
    gk: Gatekeeper = request.app.state.gk
    settings, policy = gk.settings, gk.policy  # read once: a reload mid-request changes nothing here
    body = await _read_json(request, settings.max_body_bytes)
    info = codec.parse(body)
    structlog.contextvars.bind_contextvars(model=info.model, effort=info.effort or "default")
    resolution = await gk.aresolve(info.model, info.effort)
    tier = resolution.tier.value
    structlog.contextvars.bind_contextvars(tier=tier, source=resolution.source)
    gated = codec.gate(body, resolution.tier, policy)  # errors get tier and source from the context
    metrics.REQUESTS.labels(tier, resolution.source).inc()
    if gated.hidden:
        metrics.TOOLS_HIDDEN.inc(len(gated.hidden))
    headers = {"x-gatekeeper-tier": tier, "x-gatekeeper-profile": resolution.source, "x-request-id": request_id}
    call = _Call(codec, info, resolution, codec.offered(body), headers, started, drift=gk.drift)
    route = settings.route(info.model)
    native = settings.upstream.protocols if route is None else ("chat",)  # litellm routes speak chat
    if protocol in native:
        path = "/messages/count_tokens" if count else codec.upstream_path
        upstream_body = body
    else:
        call.translator = protocols.translator(protocol)
        if call.translator is None:
            raise ProxyError(
                404,
                f"the upstream does not speak {protocol!r} (upstream.protocols) and no "
                "translation to chat is installed",
                "protocol_not_served",
            )
        if count:
            counter = getattr(call.translator, "count_tokens", None)
            if counter is None:
                raise ProxyError(404, "count_tokens needs an upstream that speaks 'messages'", "protocol_not_served")
            return _log(Response(orjson.dumps(counter(body)), media_type=_JSON, headers=call.headers), call)
        path, upstream_body = "/chat/completions", call.translator.to_chat(body)
        call.request = body
    log_fields: dict[str, Any] = {"tools_kept": gated.kept, "tools_hidden": gated.hidden}
    if route is not None:
        from gatekeeper.server.litellm_route import complete  # litellm is heavy: only for its routes

        answer = await complete(route, upstream_body, info.stream)
        if answer.events is not None:
            return _stream(call, answer.events, answer.aclose, {}, log_fields)
        return _plain(call, 200, answer.body or b"", {}, log_fields)
    pool = _pool(request)
    response = await pool.send(
        "POST", path, pool.request_headers(request.scope["headers"], json_body=True), orjson.dumps(upstream_body)
    )
    status = response.status_code
    log_fields["upstream_status"] = status
    if status >= 300:
        return await _upstream_error(call, response, pool, log_fields)
    passed = answer_headers(response)
    content_type = passed.pop("content-type", "")
    if info.stream or content_type.lower().startswith("text/event-stream"):
        return _stream(call, _sse_events(response, pool.max_response_bytes), response.aclose, passed, log_fields)
    raw = await pool.read(response)
    return _plain(call, status, raw, passed, log_fields)


def _plain(call: _Call, status: int, raw: bytes, passed: dict[str, str], log_fields: dict[str, Any]) -> Response:
    """A plain answer: relayed as the upstream's bytes when they cannot spell a call, else
    parsed strictly, enforced and re-serialised (AnswerInvalid -> 502 upstream_invalid)."""
    headers = passed | call.headers
    enforced: Enforced | None = None
    if call.translator is not None or may_carry_calls(raw, call.codec.markers):
        doc = loads(raw, "upstream answer")
        if call.translator is not None:
            if not isinstance(doc, dict):
                raise AnswerInvalid("upstream answer must be a JSON object")
            doc = call.translator.from_chat(doc, call.request)
        enforced = call.codec.enforce(doc, call.offered)
        raw = orjson.dumps(doc)
        if enforced.removed:
            headers["x-gatekeeper-blocked-calls"] = blocked_header(enforced.removed)
    _answered(call, enforced, log_fields)
    return _log(Response(raw, status_code=status, headers=headers, media_type=_JSON), call, **log_fields)


def blocked_header(names: list[str]) -> str:
    """Names come from model output: percent-encode anything outside a safe set, so a header
    can never be split or carry non-ASCII bytes."""
    return ",".join(quote(name, safe="_-.:/@") or "(unnamed)" for name in names)


def _stream(
    call: _Call,
    events: AsyncIterator[list[Event]],
    close: Callable[[], Awaitable[None]],
    passed: dict[str, str],
    log_fields: dict[str, Any],
) -> StreamingResponse:
    converter = call.translator.stream_from_chat(call.request) if call.translator is not None else None
    stream_filter = call.codec.stream_filter(call.offered)
    body = _relay(call, events, close, converter, stream_filter, log_fields)
    return StreamingResponse(body, headers=passed | call.headers, media_type="text/event-stream")


async def _sse_events(response: UpstreamResponse, limit: int) -> AsyncIterator[list[Event]]:
    """The upstream's events, one list per received chunk (one relay write per chunk)."""
    parser = SSEParser()
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            metrics.UPSTREAM_ERRORS.labels("too_large").inc()
            raise ProxyError(
                502, f"upstream stream exceeds max_response_bytes ({limit})", "upstream_too_large", "upstream_error"
            )
        events = parser.feed(chunk)
        if events:
            yield events
    yield parser.finish()


async def _relay(
    call: _Call,
    source: AsyncIterator[list[Event]],
    close: Callable[[], Awaitable[None]],
    converter: StreamConverter | None,
    stream_filter: StreamFilter,
    log_fields: dict[str, Any],
) -> AsyncIterator[bytes]:
    """Enforce a stream event by event. Whatever goes wrong, the client's stream ends with a
    correctly framed error event (after a blank line, so no partial event can absorb it)."""
    error: tuple[str, str] | None = None
    out: list[bytes] = []  # encoded events not yet written; kept when a later event fails
    try:
        try:
            async for events in source:
                for event in events:
                    for converted in converter.feed(event) if converter is not None else (event,):
                        out.extend(encode(kept) for kept in stream_filter.feed(converted))
                if out:
                    chunk = out[0] if len(out) == 1 else b"".join(out)
                    out.clear()
                    yield chunk
            for converted in converter.finish() if converter is not None else ():
                out.extend(encode(kept) for kept in stream_filter.feed(converted))
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
            log_fields["stream_error"] = error[0]
            out.append(b"\n" + encode(call.codec.stream_error(error[0], "upstream_error", error[1])))
        if out:
            yield b"".join(out)
    finally:
        await close()
        _answered(call, stream_filter.result, log_fields)
        _log(None, call, stream=True, **log_fields)


async def _upstream_error(
    call: _Call, response: UpstreamResponse, pool: UpstreamPool, log_fields: dict[str, Any]
) -> Response:
    """Upstream errors keep their status. A JSON object body in the client's own protocol passes;
    anything else (empty, not JSON, or a chat error for a translated protocol) is re-shaped."""
    status = response.status_code
    raw = await pool.read(response)
    metrics.UPSTREAM_ERRORS.labels(str(status)).inc()
    if status < 400:  # a redirect would send the client's key wherever the upstream says
        raise ProxyError(
            502,
            f"upstream answered HTTP {status}, which the proxy does not follow",
            "upstream_invalid",
            "upstream_error",
        )
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and call.translator is None:
        body = raw
    else:
        error = doc.get("error") if isinstance(doc, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(message, str):
            message = raw.decode("utf-8", "replace").strip()[:500] or "empty body"
        body = orjson.dumps(
            call.codec.error_body(status, f"upstream answered HTTP {status}: {message}", "upstream_error", None)
        )
    return _log(Response(body, status_code=status, headers=call.headers, media_type=_JSON), call, **log_fields)


def _answered(call: _Call, enforced: Enforced | None, log_fields: dict[str, Any]) -> None:
    """Every answer, plain or streamed, from any upstream path, ends here once (`enforced` is
    None for a plain answer that could not carry a call: the fast path)."""
    if enforced is not None and enforced.removed:
        metrics.TOOL_CALLS_BLOCKED.inc(len(enforced.removed))
        log_fields["blocked_calls"] = enforced.removed
        log.warning("tool_calls_blocked", tools=enforced.removed)
    if enforced is not None and enforced.calls and call.drift is not None:
        call.drift.submit(call.resolution, enforced.calls, call.offered)  # O(1): judged off the request path


def _log(response: Response | None, call: _Call, **fields: Any) -> Response:
    status = response.status_code if response is not None else 200
    log.info("request", status=status, latency_ms=round((time.perf_counter() - call.started) * 1000, 2), **fields)
    return response  # type: ignore[return-value]


async def _read_json(request: Request, limit: int) -> dict[str, Any]:
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


# -- forwarded as they are -----------------------------------------------------------------------


async def list_models(request: Request) -> Response:
    return await _forward(request, "GET", "/models")


async def get_model(request: Request) -> Response:
    model: str = request.path_params["model"]
    segments = model.split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise ProxyError(400, f"not a model id: {model!r}", "invalid_model")
    return await _forward(request, "GET", "/models/" + quote(model, safe="/:@"))


async def passthrough(request: Request) -> Response:
    body = await _read_json(request, request.app.state.gk.settings.max_body_bytes)
    carried = [f for f in _TOOL_FIELDS if f in body] + (
        ["chat_template_kwargs"] if "chat_template_kwargs" in body else []
    )
    if carried:
        raise ProxyError(400, f"{request.url.path} carries no tools; refused fields: {carried}", "invalid_request")
    return await _forward(request, "POST", request.url.path.removeprefix("/v1"), orjson.dumps(body))


async def _forward(request: Request, method: str, path: str, content: bytes | None = None) -> Response:
    """A tool-free endpoint: the upstream's answer relayed as it is (size-capped)."""
    pool = _pool(request)
    headers = pool.request_headers(request.scope["headers"], json_body=content is not None)
    response = await pool.send(method, path, headers, content)
    if 300 <= response.status_code < 400:
        await response.aclose()
        raise ProxyError(
            502,
            f"upstream answered HTTP {response.status_code}, which the proxy does not follow",
            "upstream_invalid",
            "upstream_error",
        )
    passed = answer_headers(response)
    if passed.get("content-type", "").lower().startswith("text/event-stream"):
        return StreamingResponse(
            _raw_stream(response, pool.max_response_bytes), status_code=response.status_code, headers=passed
        )
    raw = await pool.read(response)
    return Response(raw, status_code=response.status_code, headers=passed)


async def _raw_stream(response: UpstreamResponse, limit: int) -> AsyncIterator[bytes]:
    size = 0
    try:
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                return
            yield chunk
    except TransferError:
        return
    finally:
        await response.aclose()


async def healthz(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type=_JSON)


async def metrics_endpoint(request: Request) -> Response:
    return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)


# -- errors --------------------------------------------------------------------------------------

_KINDS: dict[type[GatekeeperError], tuple[int, str, str]] = {
    ToolChoiceBlocked: (400, "invalid_request_error", "tool_not_allowed"),
    RequestInvalid: (400, "invalid_request_error", "invalid_request"),
    NotMeasured: (503, "service_unavailable", "model_not_measured"),
    AnswerInvalid: (502, "upstream_error", "upstream_invalid"),
}


def _served(request: Request) -> str:
    names = [
        f"{','.join(sorted(r.methods or []))} {r.path}"
        for r in request.app.routes
        if isinstance(r, Route) and not r.path.startswith("/admin")
    ]
    return "; ".join(names)


def _describe(request: Request, exc: Exception) -> tuple[int, str, str, str | None, dict[str, str]]:
    if isinstance(exc, ProxyError):
        return exc.status, exc.message, exc.kind, exc.code, exc.headers
    if isinstance(exc, HTTPException):
        method, path = request.method, request.url.path
        if exc.status_code == 405:
            return (
                405,
                f"{method} is not allowed on {path}; served: {_served(request)}",
                "invalid_request_error",
                "method_not_allowed",
                dict(exc.headers or {}),
            )
        if exc.status_code == 404:
            return (
                404,
                f"{method} {path} is not served; served: {_served(request)}",
                "invalid_request_error",
                "not_found",
                {},
            )
        return exc.status_code, str(exc.detail), "invalid_request_error", None, dict(exc.headers or {})
    for kind, (status, name, code) in _KINDS.items():
        if isinstance(exc, kind):
            return status, str(exc), name, code, {}
    log.error("request_failed", exc_info=exc)
    request_id = structlog.contextvars.get_contextvars().get("request_id", "")
    return 500, f"gatekeeper internal error (request {request_id})", "internal_error", None, {}


def codec_for_path(path: str) -> Codec:
    """The protocol whose error shape a path's client expects."""
    if path.startswith("/v1/messages"):
        found = protocols.codec("messages")
        return found if found is not None else _ANTHROPIC_SHAPE
    if path.startswith("/v1/responses"):
        return protocols.codec("responses") or protocols.codec("chat")  # type: ignore[return-value]
    return protocols.codec("chat")  # type: ignore[return-value]


async def _on_error(request: Request, exc: Exception) -> Response:
    status, message, kind, code, extra = _describe(request, exc)
    context = structlog.contextvars.get_contextvars()
    headers = dict(extra)
    if "request_id" in context:
        headers["x-request-id"] = context["request_id"]
    if "tier" in context:
        headers["x-gatekeeper-tier"] = context["tier"]
        headers["x-gatekeeper-profile"] = context["source"]
    if isinstance(exc, ToolChoiceBlocked):
        context_fields: dict[str, Any] = {"blocked_choice": exc.tool}
    else:
        context_fields = {}
    if context:
        log.info("request", status=status, error=message, **context_fields)
    body = orjson.dumps(codec_for_path(request.url.path).error_body(status, message, kind, code))
    return Response(body, status_code=status, headers=headers, media_type=_JSON)


class _AnthropicShape:
    """Anthropic's error shape, for /v1/messages paths when the messages codec is not installed."""

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}


_ANTHROPIC_SHAPE: Any = _AnthropicShape()
