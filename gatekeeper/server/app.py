"""The gating proxy: an OpenAI-compatible ASGI app (plain Starlette), thin over the Gatekeeper core.

This module is the wiring: the routes, the upstreams' lifetime, the per-request log scope and the
exception handlers. One model call's path, whatever the protocol or the upstream, is
gatekeeper/server/pipeline.py; which upstream serves a model is gatekeeper/server/upstream.py.

Endpoints raise (ProxyError and the core's errors); one handler per exception class (`HANDLERS`,
found along the raised class's MRO, as Starlette's own `_exception_handler.py` does) says what the
error is, and `_answer` shapes it in the client protocol's error shape with the request's headers
(request id, tier, profile: from its own record, server/served.py). The model routes' POSTs skip
Starlette's router and middleware (`_Direct`, which answers errors with the same handlers).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.errors import (
    AnswerInvalid,
    ConfigError,
    GatekeeperError,
    NotMeasured,
    ProxyError,
    RequestInvalid,
    ToolBudgetExceeded,
    ToolChoiceBlocked,
)
from gatekeeper.observe import logs, metrics, redact, telemetry
from gatekeeper.observe.redact import clip
from gatekeeper.protocols import schema
from gatekeeper.protocols import table as protocols
from gatekeeper.protocols.base import Codec
from gatekeeper.protocols.passthrough import PASSTHROUGH_TABLES
from gatekeeper.server import served
from gatekeeper.server.admin import admin_routes
from gatekeeper.server.mounts import Upstreams
from gatekeeper.server.pipeline import JSON, forward, model_call, read_json, routed_header
from gatekeeper.server.throttle import KeyThrottle, client_source
from gatekeeper.server.upstream import Upstream

log = logs.get_logger(__name__)

# Tool-free endpoints forwarded untouched (after a check that the body carries no tool field).
PASSTHROUGH = ("/v1/embeddings", "/v1/completions")
_STRONG_KEY = 16  # characters of an admin key below which start-up warns


def create_app(gk: Gatekeeper, *, upstream: Upstream | None = None) -> Starlette:
    """The proxy app around a Gatekeeper. The app never closes `gk`: whoever created it does.

    `upstream` replaces the configured upstreams (the pool and the `models:` routes) for every
    model, as an httpx transport does: tests pass a `gatekeeper.server.mock.MockUpstream`."""
    admin_key = gk.settings.admin_key
    if admin_key is not None and not admin_key.strip():
        raise ConfigError("admin_key: blank; set a real key or remove the setting to disable the admin API")
    model_routes = _model_routes()
    routes: list[BaseRoute] = [
        *model_routes,
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        *(Route(path, passthrough, methods=["POST"]) for path in PASSTHROUGH),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
    ]
    if admin_key:
        routes += admin_routes()
        if len(admin_key) < _STRONG_KEY:  # the throttle bounds guessing at 100 keys a minute per source
            log.warning("weak_admin_key", length=len(admin_key), advice=f"use {_STRONG_KEY}+ random characters")
    gateway = None
    if gk.settings.mcp.servers:
        from gatekeeper.mcp import McpGateway, mcp_routes  # the mcp SDK is imported only when configured

        gateway = McpGateway(gk)
        routes += mcp_routes(gateway, KeyThrottle(), client_source)  # wrong keys: the admin API's rules, own count
    app = _App(
        direct={route.path: route.endpoint for route in model_routes},
        routes=routes,
        lifespan=_lifespan,
        exception_handlers={kind: _answering(handler) for kind, handler in HANDLERS.items()},
    )
    app.router.redirect_slashes = False  # a trailing slash is a 404 naming the endpoints, never a 307
    app.state.gk = gk
    app.state.admin_key = admin_key
    app.state.mcp = gateway
    app.state.injected_upstream = upstream
    app.state.clients_seen = {}  # configured client name -> requests it made (the admin API shows it)
    return app


# The cycle collector's first threshold while serving: it runs when this many more objects were
# made than freed since it last ran. The objects of requests in flight are freed when their
# requests end, so at 32 connections the default 700 ran it about every 5 requests, and a full
# collection about every 670 (tests/perf/gc_trial.py); 10,000 is reached by garbage cycles only.
SERVING_GC_THRESHOLD = 10_000


def settle_heap() -> None:
    """Called once by a serving process before it takes requests. What start-up built (modules,
    settings, the suite, the protocol tables: about 85,000 objects) lives as long as the process,
    yet every full collection walked all of it, about 40 ms each time. `gc.freeze()` takes what
    exists now out of the collector's walks after one last collection; a frozen object is still
    freed when nothing refers to it (only a cycle among frozen objects stays: the settings a
    reload replaces, once per reload). Garbage cycles made later are still collected, once
    `SERVING_GC_THRESHOLD` of them have piled up."""
    gc.collect()
    gc.freeze()
    _, *older = gc.get_threshold()
    gc.set_threshold(SERVING_GC_THRESHOLD, *older)


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    # Built here, in the serving event loop: the upstream pool binds to it.
    app.state.upstreams = Upstreams(app.state.injected_upstream)
    app.state.upstreams.mounts(app.state.gk.settings)
    try:
        async with app.state.mcp.running() if app.state.mcp is not None else contextlib.nullcontext():
            yield
    finally:
        await app.state.upstreams.aclose()


Endpoint = Callable[[Request], Awaitable[Response]]


class _App(Starlette):
    def __init__(self, *, direct: dict[str, Endpoint], **kwargs: Any) -> None:
        self.direct = direct  # the model routes' endpoints by path (POST)
        super().__init__(**kwargs)

    def build_middleware_stack(self) -> ASGIApp:
        # Outside Starlette's own stack, so that the handler of unexpected errors (which Starlette
        # runs outermost) still sees the request's log context. The model routes are called
        # past that stack (`_Direct`) unless middleware was added to the app: it must see them.
        handlers = dict(self.exception_handlers)
        direct: dict[str, ASGIApp] = {}
        if not self.user_middleware:
            direct = {path: _Direct(endpoint, handlers) for path, endpoint in self.direct.items()}
        return RequestScope(super().build_middleware_stack(), direct)


class RequestScope:
    """Each HTTP request's log context is undone when its answer (a stream included) and any
    error handler are done."""

    def __init__(self, app: ASGIApp, direct: dict[str, ASGIApp] | None = None) -> None:
        self.app = app
        self.direct = direct or {}  # a model route's path -> its endpoint (POST), past Starlette's stack

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with logs.request_scope():
            record = served.start(scope.setdefault("state", {}))
            try:
                path = scope["path"]
                found = protocols.for_path(path)
                protocol = found.name if found is not None and path in found.paths else None
                app = self.app
                if protocol is not None and scope["method"] == "POST" and not scope.get("root_path"):
                    app = self.direct.get(path, app)
                if protocol is None and not (scope["method"] == "POST" and path in PASSTHROUGH):
                    await app(scope, receive, send)
                    return
                # A model call's (or a forwarded POST's) client that leaves before the answer starts
                # ends the call: the upstream request (and its pooled connection) must not outlive it.
                watch = _Abandoned(receive, send)
                try:
                    if protocol is None or not telemetry.active():
                        await app(scope, watch.received, watch.sending)
                    else:
                        await self._traced(app, protocol, record, scope, watch.received, watch.sending)
                except asyncio.CancelledError:
                    if not watch.gone:
                        raise
                    task = asyncio.current_task()
                    if task is not None:
                        task.uncancel()
                    log.info("client_disconnected", path=path)
                finally:
                    watch.stop()
            finally:
                if record.line is not None:  # a plain answer whose write failed or was cancelled
                    log.info("request", **record.line, answer="unfinished")

    async def _traced(
        self, app: ASGIApp, protocol: str, record: served.Served, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A model call under its OpenTelemetry span, ended when the answer (a stream included)
        is sent, with what the request learnt (its record)."""
        sending = _StatusSeen(send)
        with telemetry.request_span(protocol) as end:
            try:
                await app(scope, receive, sending)
            finally:
                end(record.model, record.span_attributes(), sending.status)


# How long an answer may take before the client is watched for leaving: most answers start
# sooner, and a timer costs them far less than a watching task (one per request: 10 % of a
# proxy's requests per second at 32 connections, measured with tests/perf/trial.py).
_WATCH_AFTER_S = 0.25


class _Abandoned:
    """An HTTP request's `receive` and `send`, watched: once the request body has been read and
    the answer has not started within `_WATCH_AFTER_S`, a client that disconnects cancels the
    task handling the request (a non-streamed call would otherwise wait on the upstream, holding
    a pooled connection, for up to `upstream.timeout_s`). A started answer is the response's own
    to end (a stream notices a gone client when it writes)."""

    __slots__ = ("_receive", "_send", "_task", "_timer", "_watcher", "gone", "started")

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive, self._send = receive, send
        self._task = asyncio.current_task()
        self._timer: asyncio.TimerHandle | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.gone = False  # the client left before the answer started: the task was cancelled
        self.started = False

    async def received(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request" and not message.get("more_body", False) and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_WATCH_AFTER_S, self._watch_now)
        return message

    def _watch_now(self) -> None:
        if not self.started:
            self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        # The body is read: the server's next message is the client leaving (or the answer done).
        message = await self._receive()
        if message["type"] == "http.disconnect" and not self.started and self._task is not None:
            self.gone = True
            self._task.cancel()

    async def sending(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.stop()
        await self._send(message)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._watcher is not None and not self.gone:
            self._watcher.cancel()


class _Direct:
    """A model route's endpoint as an ASGI app, called past Starlette's router and middleware
    (on the hot path they took about 8% of a request's time in process), doing for it what they do:
    an exception the endpoint raises is answered by the app's handler of the nearest class
    along the exception's MRO (`Exception` last), as Starlette's `_exception_handler.py` finds it."""

    __slots__ = ("endpoint", "handlers")

    def __init__(self, endpoint: Endpoint, handlers: dict[Any, Callable[..., Any]]) -> None:
        self.endpoint, self.handlers = endpoint, handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            response = await self.endpoint(request)
        except Exception as exc:
            handler = next((self.handlers[k] for k in type(exc).__mro__ if k in self.handlers), None)
            if handler is None:
                raise
            if inspect.iscoroutinefunction(handler):
                response = await handler(request, exc)
            else:  # as Starlette runs a plain function: in its thread pool
                response = await run_in_threadpool(handler, request, exc)
                if inspect.isawaitable(response):
                    response = await response
        await response(scope, receive, send)


class _StatusSeen:
    """An ASGI `send` that notes the answer's status on the way (500 until one is sent)."""

    __slots__ = ("send", "status")

    def __init__(self, send: Send) -> None:
        self.send, self.status = send, 500

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self.send(message)


# -- the model routes (gatekeeper/server/pipeline.py), one per path of a registered protocol ------


def _model_routes() -> list[Route]:
    routes: list[Route] = []
    for entry in protocols.PROTOCOLS.values():
        routes += [Route(path, _model_call(entry.name), methods=["POST"]) for path in entry.paths]
        if entry.count_tokens is not None:
            routes.append(Route(entry.count_tokens[0], _model_call(entry.name, count=True), methods=["POST"]))
    return routes


def _model_call(protocol: str, count: bool = False) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return await model_call(request, protocol, count)

    endpoint.__name__ = f"{protocol}_count_tokens" if count else protocol
    return endpoint


# -- forwarded as they are -----------------------------------------------------------------------


async def list_models(request: Request) -> Response:
    return await forward(request, "GET", "/models")


async def get_model(request: Request) -> Response:
    model: str = request.path_params["model"]
    segments = model.split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise ProxyError(400, f"not a model id: {model!r}", "invalid_model")
    return await forward(request, "GET", "/models/" + quote(model, safe="/:@"))


async def passthrough(request: Request) -> Response:
    settings = request.app.state.gk.settings
    body = await read_json(request, settings.max_body_bytes)
    carried = [f for f in protocols.tool_fields() if f in body] + (
        ["chat_template_kwargs"] if "chat_template_kwargs" in body else []
    )
    if carried:
        raise ProxyError(400, f"{request.url.path} carries no tools; refused fields: {carried}", "invalid_request")
    try:  # every other field known too (extra_body, messages, ... are not)
        schema.check(body, PASSTHROUGH_TABLES[request.url.path], "", settings.upstream.unknown_fields)
    except RequestInvalid as exc:
        raise ProxyError(400, f"{request.url.path}: {exc}", "invalid_request") from None
    return await forward(request, "POST", request.url.path.removeprefix("/v1"), body)


async def healthz(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type=JSON)


async def metrics_endpoint(request: Request) -> Response:
    return Response(generate_latest(metrics.served_registry()), media_type=CONTENT_TYPE_LATEST)


# -- errors --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorAnswer:
    """What an error says to the client: its status, message, OpenAI-style type and code, and
    any headers of its own (a 405's Allow, a 429's Retry-After)."""

    status: int
    message: str
    kind: str
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _served_routes(request: Request) -> str:
    names = [
        f"{','.join(sorted(r.methods or []))} {r.path}"
        for r in request.app.routes
        if isinstance(r, Route) and not r.path.startswith("/admin")
    ]
    return "; ".join(names)


def _proxy_error(request: Request, exc: ProxyError) -> ErrorAnswer:
    return ErrorAnswer(exc.status, exc.message, exc.kind, exc.code, exc.headers)


def _http_error(request: Request, exc: HTTPException) -> ErrorAnswer:
    method, path = clip(request.method), clip(request.url.path)  # the client's: capped for the body and log
    if exc.status_code == 405:
        message = f"{method} is not allowed on {path}; served: {_served_routes(request)}"
        return ErrorAnswer(405, message, "invalid_request_error", "method_not_allowed", dict(exc.headers or {}))
    if exc.status_code == 404:
        return ErrorAnswer(
            404,
            f"{method} {path} is not served; served: {_served_routes(request)}",
            "invalid_request_error",
            "not_found",
        )
    return ErrorAnswer(exc.status_code, str(exc.detail), "invalid_request_error", None, dict(exc.headers or {}))


def _tool_choice_blocked(request: Request, exc: ToolChoiceBlocked) -> ErrorAnswer:
    return ErrorAnswer(400, str(exc), "invalid_request_error", "tool_not_allowed")


def _tool_budget_exceeded(request: Request, exc: ToolBudgetExceeded) -> ErrorAnswer:
    return ErrorAnswer(400, str(exc), "invalid_request_error", "tool_budget_exceeded")


def _request_invalid(request: Request, exc: RequestInvalid) -> ErrorAnswer:
    return ErrorAnswer(400, str(exc), "invalid_request_error", "invalid_request")


def _not_measured(request: Request, exc: NotMeasured) -> ErrorAnswer:
    return ErrorAnswer(503, str(exc), "service_unavailable", "model_not_measured")


def _answer_invalid(request: Request, exc: AnswerInvalid) -> ErrorAnswer:
    return ErrorAnswer(502, str(exc), "upstream_error", "upstream_invalid")


def _client_gone(request: Request, exc: ClientDisconnect) -> ErrorAnswer:
    """The client left while its body was being read: its doing, not an internal error (no
    traceback, no error line a hostile client could flood the log with); nobody reads the answer."""
    log.info("client_disconnected", path=request.url.path, stage="body")
    return ErrorAnswer(
        400, "the client disconnected before its request body arrived", "invalid_request_error", "client_disconnected"
    )


def _unexpected(request: Request, exc: Exception) -> ErrorAnswer:
    """Anything else, a GatekeeperError without a handler of its own included: a 500 naming the
    request, the traceback in the log."""
    log.error("request_failed", exc_info=exc)
    request_id = served.served(request).request_id or ""
    return ErrorAnswer(500, f"gatekeeper internal error (request {request_id})", "internal_error")


# One handler per exception class; Starlette finds the handler of the nearest class along the
# raised one's MRO (AnswerIncomplete -> AnswerInvalid, CredentialConflict -> ProxyError), and
# `Exception` is its handler of last resort (run outermost: the request's scope is still open).
HANDLERS: dict[type[Exception], Callable[[Request, Any], ErrorAnswer]] = {
    ProxyError: _proxy_error,
    HTTPException: _http_error,
    ToolChoiceBlocked: _tool_choice_blocked,
    ToolBudgetExceeded: _tool_budget_exceeded,
    RequestInvalid: _request_invalid,
    NotMeasured: _not_measured,
    AnswerInvalid: _answer_invalid,
    ClientDisconnect: _client_gone,
    GatekeeperError: _unexpected,
    Exception: _unexpected,
}


def codec_for_path(path: str) -> Codec:
    """The protocol whose error shape a path's client expects (chat's for any other path)."""
    return (protocols.for_path(path) or protocols.PROTOCOLS["chat"]).codec


def _answering(handler: Callable[[Request, Any], ErrorAnswer]) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def answer(request: Request, exc: Exception) -> Response:
        return _answer(request, exc, handler(request, exc))

    return answer


def _answer(request: Request, exc: Exception, error: ErrorAnswer) -> Response:
    """An error in the client protocol's shape, with the request's own headers."""
    record = served.served(request)
    headers = dict(error.headers)
    # Every answer names its request, also one refused before any route ran (a 404, a 405).
    headers["x-request-id"] = record.request_id or redact.request_id(request.headers.get("x-request-id"))
    route = record.admission.route
    # When routed, the tier is the routed pair's: say which pair that is.
    headers |= record.tier_headers(routed_header(route.pair) if route is not None and route.routed else None)
    if logs.bound():  # inside a request that logged anything: its one `request` line
        fields: dict[str, Any] = {"blocked_choice": exc.tool} if isinstance(exc, ToolChoiceBlocked) else {}
        log.info("request", status=error.status, error=error.message, **fields)
    body = orjson.dumps(
        codec_for_path(request.url.path).error_body(error.status, error.message, error.kind, error.code)
    )
    return Response(body, status_code=error.status, headers=headers, media_type=JSON)
