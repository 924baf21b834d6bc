"""The admin API (mounted by the proxy when `admin_key` is set): profiles, measurements, reload.

Every endpoint needs exactly `Authorization: Bearer <admin_key>` (compared in constant time).
Endpoints raise ProxyError; the proxy's exception handler shapes the answer.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gatekeeper.errors import ConfigError, ProxyError, StoreError
from gatekeeper.measuring.confidence import shown_scores
from gatekeeper.server.console import console_routes
from gatekeeper.store.profile import profile_key, split_key

Endpoint = Callable[[Request], Awaitable[Response]]


def _authorized(endpoint: Endpoint) -> Endpoint:
    async def guarded(request: Request) -> Response:
        expected = f"Bearer {request.app.state.admin_key}".encode()
        if not hmac.compare_digest(request.headers.get("authorization", "").encode("latin-1"), expected):
            raise ProxyError(
                401, "admin API needs 'Authorization: Bearer <admin_key>'", "invalid_admin_key", "authentication_error"
            )
        return await endpoint(request)

    guarded.__name__ = endpoint.__name__
    return guarded


def _pair(request: Request) -> tuple[str, str]:
    key = request.path_params["key"]
    model, effort = split_key(key)
    if not model or not effort:
        raise ProxyError(400, f"expected MODEL@EFFORT or MODEL, got {key!r}", "invalid_key")
    return model, effort


@_authorized
async def list_profiles(request: Request) -> Response:
    gk = request.app.state.gk
    entries = gk.profiles()  # validity and source from the core, not from the store and the suite
    doc: dict[str, Any] = {
        "profiles": {key: entry.to_json() for key, entry in entries.items()},
        "recommendations": gk.recommendations(),
    }
    drift = await asyncio.to_thread(gk.drift.report)  # it waits for the drift worker: not on the loop
    for key, entry in entries.items():
        if entry.profile is not None:
            doc["profiles"][key]["shown"] = shown_scores(entry.profile.scores, entry.profile.score_intervals)
        doc["profiles"][key]["drift"] = drift.get(key)  # live figures next to the measured scores
    return JSONResponse(doc)


@_authorized
async def drift_pairs(request: Request) -> Response:
    """Live drift per pair (measured or pinned): window, rates against ceilings, demotion, history."""
    drift = request.app.state.gk.drift
    return JSONResponse({"enabled": drift.settings.enabled, "pairs": await asyncio.to_thread(drift.report)})


@_authorized
async def clear_demotion(request: Request) -> Response:
    model, effort = _pair(request)
    key = profile_key(model, effort)
    existed = await asyncio.to_thread(request.app.state.gk.drift.clear, key)
    return JSONResponse({"cleared": key, "existed": existed})


@_authorized
async def benchmark(request: Request) -> Response:
    model, effort = _pair(request)
    request.app.state.gk.measure(model, effort)
    return JSONResponse({"status": "started", "key": profile_key(model, effort)}, status_code=202)


@_authorized
async def invalidate(request: Request) -> Response:
    model, effort = _pair(request)
    try:
        existed = request.app.state.gk.invalidate(model, effort)
    except StoreError as exc:  # Redis unreachable: nothing was invalidated, say so
        raise ProxyError(503, str(exc), "store_unavailable", "service_unavailable") from None
    return JSONResponse({"invalidated": profile_key(model, effort), "existed": existed})


@_authorized
async def reload(request: Request) -> Response:
    """Re-read the config file; a config that fails validation is refused, the old one stays."""
    gk = request.app.state.gk
    reload_config = getattr(gk, "reload", None)
    if reload_config is None:
        raise ProxyError(501, "this Gatekeeper cannot reload its config", "reload_unsupported", "server_error")
    try:
        reload_config()
    except ConfigError as exc:
        raise ProxyError(400, f"config refused, the previous one stays in force: {exc}", "invalid_config") from None
    return JSONResponse({"status": "reloaded"})


def admin_routes() -> list[BaseRoute]:
    return [
        Route("/admin/profiles", list_profiles, methods=["GET"]),
        Route("/admin/profiles/{key:path}/benchmark", benchmark, methods=["POST"]),
        Route("/admin/profiles/{key:path}", invalidate, methods=["DELETE"]),
        Route("/admin/reload", reload, methods=["POST"]),
        Route("/admin/drift", drift_pairs, methods=["GET"]),
        Route("/admin/drift/{key:path}", clear_demotion, methods=["DELETE"]),
        *console_routes(),  # the console's pages under /admin/ (gatekeeper/console)
    ]
