"""The gating proxy: an OpenAI-compatible ASGI app, thin over the Gatekeeper core.

A request goes: read body (size-capped) -> parse once (orjson) -> resolve the tier (core) ->
gate the tools (gating) -> forward (pooled httpx, or litellm for configured routes) ->
remove calls to tools that were not offered -> client. Answers with no tool call in them are
forwarded as the upstream's own bytes.
"""

from __future__ import annotations

import hmac
import itertools
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import httpx
import orjson
import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gatekeeper import metrics
from gatekeeper.core import Gatekeeper, NotMeasured
from gatekeeper.gating import RequestInvalid, ToolChoiceBlocked, allowed_names, enforce_choice
from gatekeeper.profiles import profile_key, split_key
from gatekeeper.streaming import StreamEnforcer

log = structlog.get_logger("gatekeeper.proxy")

# Headers that describe one hop, or that httpx recomputes; never copied across the proxy.
_HOP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                  "proxy-authorization", "proxy-connection", "accept-encoding", "content-encoding", "trailer"})


_POOLS = 8  # upstream connection pools (see lifespan)


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.kind = status, message, code, kind


def error_response(status: int, message: str, kind: str, code: str | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps({"error": {"message": message, "type": kind, "code": code}})
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def create_app(gk: Gatekeeper) -> Starlette:
    """Build the proxy app around a Gatekeeper; the upstream client lives for the app's lifespan."""
    settings = gk.settings
    upstream = settings.upstream
    clients: list[httpx.AsyncClient] = []
    turn = itertools.count()

    def client_for_request() -> httpx.AsyncClient:
        return clients[next(turn) % len(clients)]

    chat_url = httpx.URL(f"{upstream.base_url}/chat/completions")  # parsed once, not per request

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Several small pools, taken in turn: httpcore's pool does work quadratic in its size on
        # every request, so at high concurrency one big pool costs more CPU than the forwarding.
        pools = min(_POOLS, upstream.max_connections)
        per_pool = upstream.max_connections // pools
        limits = httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool)
        timeout = httpx.Timeout(upstream.timeout_s, connect=10.0)
        clients[:] = [httpx.AsyncClient(base_url=upstream.base_url, limits=limits, timeout=timeout)
                      for _ in range(pools)]
        try:
            yield
        finally:
            for client in clients:
                await client.aclose()
            gk.close()

    def upstream_headers(request: Request) -> dict[str, str]:
        # The client's x-request-id stays here: some servers (llama.cpp's) reject ids that are not UUIDs.
        headers = {k: v for k, v in request.headers.items() if k not in _HOP and k != "x-request-id"}
        if "authorization" not in headers and upstream.api_key:
            headers["authorization"] = f"Bearer {upstream.api_key}"
        return headers

    def upstream_failure(exc: httpx.TransportError, headers: dict[str, str], line: dict) -> Response:
        """504 when the upstream timed out, 502 when it could not be reached or broke off."""
        kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "unreachable"
        metrics.UPSTREAM_ERRORS.labels(kind).inc()
        line.update(upstream_status=kind)
        if kind == "timeout":
            return error_response(504, f"upstream {upstream.base_url} timed out", "upstream_error",
                                  "upstream_timeout", headers)
        return error_response(502, f"upstream {upstream.base_url} unreachable: {type(exc).__name__}",
                              "upstream_error", "upstream_unreachable", headers)

    async def chat(request: Request) -> Response:
        started = time.perf_counter()
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        line: dict[str, Any] = {"request_id": request_id}
        try:
            body = await _read_json(request, settings.max_body_bytes)
            model, effort = _model_and_effort(body)
            line.update(model=model, effort=effort or "default")
            try:
                resolution, gated = await gk.agate(body, model, effort)
            except NotMeasured as exc:
                raise _BadRequest(503, str(exc), "model_not_measured", "service_unavailable") from None
            except RequestInvalid as exc:
                raise _BadRequest(400, str(exc), "invalid_tools") from None
            except ToolChoiceBlocked as exc:
                tier, source = exc.tier.value, exc.source
                line.update(tier=tier, source=source, status=400, blocked_choice=exc.tool)
                log.info("request", **line)
                headers = {"x-gatekeeper-tier": tier, "x-gatekeeper-profile": source, "x-request-id": request_id}
                return error_response(400, str(exc), "invalid_request_error", "tool_not_allowed", headers)
            line.update(tier=resolution.tier.value, source=resolution.source)
            headers = {"x-gatekeeper-tier": resolution.tier.value, "x-gatekeeper-profile": resolution.source,
                       "x-request-id": request_id}
            metrics.REQUESTS.labels(resolution.tier.value, resolution.source).inc()
            line.update(tools_kept=gated.kept, tools_hidden=gated.hidden)
            if gated.hidden:
                metrics.TOOLS_HIDDEN.inc(len(gated.hidden))
            response = await _forward(request, body, model, headers, line)
        except _BadRequest as exc:
            line.update(status=exc.status, error=exc.message)
            log.info("request", **line, latency_ms=round((time.perf_counter() - started) * 1000, 2))
            return error_response(exc.status, exc.message, exc.kind, exc.code, {"x-request-id": request_id})
        except Exception:  # a bug of ours must cost one request a clear 500, never the server
            log.exception("request_failed", **line)
            return error_response(500, f"gatekeeper internal error (request {request_id})", "internal_error",
                                  None, {"x-request-id": request_id})
        line.update(status=response.status_code)
        if not isinstance(response, StreamingResponse):
            log.info("request", **line, latency_ms=round((time.perf_counter() - started) * 1000, 2))
        return response

    async def _forward(request: Request, body: dict, model: str, headers: dict[str, str], line: dict) -> Response:
        route = settings.route(model)
        if route is not None:
            from gatekeeper.litellm_route import complete  # litellm is heavy: only for its routes

            return await complete(route, body, allowed_names(body), headers, line)
        allowed = allowed_names(body)
        client = client_for_request()
        upstream_request = client.build_request("POST", chat_url, content=orjson.dumps(body),
                                                headers=upstream_headers(request) | {"content-type": "application/json"})
        try:
            upstream_response = await _send(client, upstream_request)
        except httpx.TransportError as exc:
            return upstream_failure(exc, headers, line)
        line.update(upstream_status=upstream_response.status_code)
        passed = {k: v for k, v in upstream_response.headers.items() if k not in _HOP} | headers
        if upstream_response.status_code >= 400:
            metrics.UPSTREAM_ERRORS.labels(str(upstream_response.status_code)).inc()
        is_stream = "text/event-stream" in upstream_response.headers.get("content-type", "")
        if is_stream and upstream_response.status_code < 400:
            enforcer = StreamEnforcer(allowed, line, log)
            return StreamingResponse(enforcer.relay(upstream_response), status_code=upstream_response.status_code,
                                     headers=passed)
        try:
            raw = await upstream_response.aread()
        except httpx.HTTPError as exc:
            metrics.UPSTREAM_ERRORS.labels("read").inc()
            return error_response(502, f"upstream answer broke off: {type(exc).__name__}", "upstream_error",
                                  "upstream_incomplete", headers)
        finally:
            await upstream_response.aclose()
        passed.pop("content-length", None)
        if upstream_response.status_code >= 400:
            raw = _error_body(upstream_response.status_code, raw, passed)
        elif b'"tool_calls"' in raw or b'"function_call"' in raw:
            raw = _enforce_body(raw, allowed, line)
        return Response(raw, status_code=upstream_response.status_code, headers=passed)

    async def models(request: Request) -> Response:
        client = client_for_request()
        try:
            response = await _send(client, client.build_request("GET", "/models", headers=upstream_headers(request)))
            try:
                await response.aread()
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            return upstream_failure(exc, {}, {})
        passed = {k: v for k, v in response.headers.items() if k not in _HOP}
        return Response(response.content, status_code=response.status_code, headers=passed)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_endpoint(request: Request) -> Response:
        return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
    ]
    if settings.admin_key:
        from gatekeeper.console import console_routes

        routes += _admin_routes(gk, settings.admin_key) + console_routes(gk, settings.admin_key)
    return Starlette(routes=routes, lifespan=lifespan)


async def _send(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    """Send; once more when a pooled connection turns out to be dead before any answer arrived
    (llama.cpp's server, for one, closes a connection after a failed stream)."""
    try:
        return await client.send(request, stream=True)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        return await client.send(request, stream=True)


def _error_body(status: int, raw: bytes, headers: dict[str, str]) -> bytes:
    """Upstream error bodies pass through; an empty or non-JSON one is put in the OpenAI error shape."""
    try:
        if isinstance(orjson.loads(raw), dict):
            return raw
    except orjson.JSONDecodeError:
        pass
    headers["content-type"] = "application/json"
    text = raw.decode("utf-8", "replace").strip()[:500] or "empty body"
    return orjson.dumps({"error": {"message": f"upstream answered HTTP {status}: {text}", "type": "upstream_error",
                                   "code": None}})


def _enforce_body(raw: bytes, allowed: set[str], line: dict) -> bytes:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    removed = [name for choice in doc.get("choices") or [] for name in enforce_choice(choice, allowed)]
    if not removed:
        return raw
    metrics.TOOL_CALLS_BLOCKED.inc(len(removed))
    line.update(blocked_calls=removed)
    log.warning("tool_calls_blocked", request_id=line.get("request_id"), model=line.get("model"), tools=removed)
    return orjson.dumps(doc)


async def _read_json(request: Request, limit: int) -> dict:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _BadRequest(413, f"request body is {declared} bytes; the limit is {limit}", "body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _BadRequest(413, f"request body exceeds the limit of {limit} bytes", "body_too_large")
        chunks.append(chunk)
    try:
        body = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as exc:
        raise _BadRequest(400, f"request body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(body, dict):
        raise _BadRequest(400, f"request body must be a JSON object, got {type(body).__name__}", "invalid_body")
    return body


def _model_and_effort(body: dict) -> tuple[str, str | None]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _BadRequest(400, "'model' is required and must be a non-empty string", "invalid_model")
    effort = body.get("reasoning_effort")
    if effort is not None and (not isinstance(effort, str) or not effort):
        raise _BadRequest(400, "'reasoning_effort' must be a non-empty string", "invalid_reasoning_effort")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _BadRequest(400, "'messages' is required and must be an array", "invalid_messages")
    return model, effort


def _admin_routes(gk: Gatekeeper, admin_key: str) -> list[Route]:
    expected = f"Bearer {admin_key}".encode()

    def authorized(request: Request) -> bool:
        return hmac.compare_digest(request.headers.get("authorization", "").encode(), expected)

    def guard(handler):
        async def guarded(request: Request) -> Response:
            if not authorized(request):
                return error_response(401, "admin API needs 'Authorization: Bearer <admin_key>'",
                                      "authentication_error", "invalid_admin_key")
            try:
                return await handler(request)
            except _BadRequest as exc:
                return error_response(exc.status, exc.message, exc.kind, exc.code)
        return guarded

    async def list_profiles(request: Request) -> Response:
        data = gk.store.load()
        doc = data.to_json()
        for key, profile in data.profiles.items():
            doc["profiles"][key]["valid"] = profile.is_valid_for(gk.suite)
        return JSONResponse(doc)

    def pair(request: Request) -> tuple[str, str]:
        model, effort = split_key(request.path_params["key"])
        if not model or not effort:
            raise _BadRequest(400, f"expected MODEL@EFFORT or MODEL, got {request.path_params['key']!r}", "invalid_key")
        return model, effort

    async def benchmark(request: Request) -> Response:
        model, effort = pair(request)
        gk.measure(model, effort)
        return JSONResponse({"status": "started", "key": profile_key(model, effort)}, status_code=202)

    async def invalidate(request: Request) -> Response:
        model, effort = pair(request)
        existed = gk.invalidate(model, effort)
        return JSONResponse({"invalidated": profile_key(model, effort), "existed": existed})

    return [
        Route("/admin/profiles", guard(list_profiles), methods=["GET"]),
        Route("/admin/profiles/{key:path}/benchmark", guard(benchmark), methods=["POST"]),
        Route("/admin/profiles/{key:path}", guard(invalidate), methods=["DELETE"]),
    ]
