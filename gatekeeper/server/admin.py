"""The admin API (mounted by the proxy when `admin_key` is set): profiles, measurements, reload.

Every endpoint needs exactly `Authorization: Bearer <admin_key>` (compared in constant time).
Wrong keys are counted per source with the console's sign-in (server/throttle.py): past 10 a
minute a source's wrong keys get 429 with `Retry-After` (a right key still passes), past 100 its
keys are not read; other sources are not affected. Endpoints raise ProxyError; the proxy's exception handler shapes the answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gatekeeper.errors import ConfigError, ProxyError, RequestInvalid, StoreError
from gatekeeper.measuring.confidence import shown_scores
from gatekeeper.observe import logs
from gatekeeper.observe.redact import redact
from gatekeeper.peers import bearer_form
from gatekeeper.server.console import console_routes
from gatekeeper.server.throttle import KeyThrottle, client_source, shared_counts
from gatekeeper.store.profile import check_effort, profile_key, split_key

log = logs.get_logger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def _throttled(wait: int) -> ProxyError:
    return ProxyError(
        429,
        f"too many wrong admin keys from this address; retry in {wait} s",
        "admin_key_throttled",
        "rate_limit_error",
        headers={"retry-after": str(wait)},
    )


def _authorized(throttle: KeyThrottle, endpoint: Endpoint) -> Endpoint:
    async def guarded(request: Request) -> Response:
        source, shared = client_source(request), shared_counts(request)
        wait = await asyncio.to_thread(throttle.retry_after, source, shared)
        if wait:  # so many wrong keys that this one is not even read
            log.warning("admin_key_throttled", client=source, retry_after_s=wait)
            raise _throttled(wait)
        # Digests of equal length: the comparison's time says nothing of the key, not even its length.
        expected = _digest(f"Bearer {request.app.state.admin_key}".encode())
        if not hmac.compare_digest(_digest(bearer_form(request.headers.get("authorization", ""))), expected):
            wait = await asyncio.to_thread(throttle.failed, source, shared)
            log.warning("admin_key_refused", client=source, path=request.url.path)
            if wait:
                raise _throttled(wait)
            raise ProxyError(
                401, "admin API needs 'Authorization: Bearer <admin_key>'", "invalid_admin_key", "authentication_error"
            )
        await asyncio.to_thread(throttle.succeeded, source, shared)
        return await endpoint(request)

    guarded.__name__ = endpoint.__name__
    return guarded


def _pair(request: Request) -> tuple[str, str]:
    key = request.path_params["key"]
    model, effort = split_key(key)
    if not model or not effort:
        raise ProxyError(400, f"expected MODEL@EFFORT or MODEL, got {key!r}", "invalid_key")
    try:
        check_effort(effort, request.app.state.gk.settings.extra_efforts)
    except RequestInvalid as exc:
        raise ProxyError(400, str(exc), "invalid_effort") from None
    return model, effort


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


async def drift_pairs(request: Request) -> Response:
    """Live drift per pair (measured or pinned): window, rates against ceilings, demotion, history."""
    drift = request.app.state.gk.drift
    return JSONResponse({"enabled": drift.settings.enabled, "pairs": await asyncio.to_thread(drift.report)})


async def clients(request: Request) -> Response:
    """The configured clients (`clients:`): each one's rules, how it is matched (never the value),
    and how many requests it made since start-up. A request no client matches gets the global rules."""
    seen: dict[str, int] = request.app.state.clients_seen
    rows = request.app.state.gk.snapshot().clients.describe()
    return JSONResponse({"clients": [row | {"requests": seen.get(row["client"], 0)} for row in rows]})


async def clear_demotion(request: Request) -> Response:
    model, effort = _pair(request)
    key = profile_key(model, effort)
    existed = await asyncio.to_thread(request.app.state.gk.drift.clear, key)
    return JSONResponse({"cleared": key, "existed": existed})


async def benchmark(request: Request) -> Response:
    model, effort = _pair(request)
    request.app.state.gk.measure(model, effort)
    return JSONResponse({"status": "started", "key": profile_key(model, effort)}, status_code=202)


async def invalidate(request: Request) -> Response:
    model, effort = _pair(request)
    try:
        existed = request.app.state.gk.invalidate(model, effort)
    except StoreError as exc:  # Redis unreachable, a file that is no store: nothing was invalidated
        log.error("store_unavailable", error=redact(str(exc)), action="invalidate")
        raise ProxyError(503, StoreError.shown, "store_unavailable", "service_unavailable") from None
    return JSONResponse({"invalidated": profile_key(model, effort), "existed": existed})


async def reload(request: Request) -> Response:
    """Re-read the config file; a config that fails validation is refused, the old one stays.
    Under `serve --workers N` every worker is replaced by one that read it (server/workers.py)."""
    fleet = getattr(request.app.state, "reload", None)
    reload_config = fleet or getattr(request.app.state.gk, "reload", None)
    if reload_config is None:
        raise ProxyError(501, "this Gatekeeper cannot reload its config", "reload_unsupported", "server_error")
    try:
        reload_config()
    except ConfigError as exc:
        # The file's path and the locations it names go to the log only (the admin's client may not
        # be the host's operator); the problem itself is the caller's to fix.
        log.warning("config_refused", error=redact(str(exc)))
        message = f"config refused, the previous one stays in force: {redact(exc.detail or 'see the log')}"
        raise ProxyError(400, message, "invalid_config") from None
    return JSONResponse({"status": "reloading every worker" if fleet else "reloaded"})


def admin_routes() -> list[BaseRoute]:
    throttle = KeyThrottle()  # one per app: the API and the console's sign-in count together
    return [
        Route("/admin/profiles", _authorized(throttle, list_profiles), methods=["GET"]),
        Route("/admin/profiles/{key:path}/benchmark", _authorized(throttle, benchmark), methods=["POST"]),
        Route("/admin/profiles/{key:path}", _authorized(throttle, invalidate), methods=["DELETE"]),
        Route("/admin/reload", _authorized(throttle, reload), methods=["POST"]),
        Route("/admin/drift", _authorized(throttle, drift_pairs), methods=["GET"]),
        Route("/admin/clients", _authorized(throttle, clients), methods=["GET"]),
        Route("/admin/drift/{key:path}", _authorized(throttle, clear_demotion), methods=["DELETE"]),
        *console_routes(throttle=throttle),  # the console's pages under /admin/ (gatekeeper/console)
    ]
