"""Proxy requests for models configured under `models:`, answered through litellm."""

from __future__ import annotations

from typing import AsyncIterator

import litellm
import orjson
import structlog
from starlette.responses import Response, StreamingResponse

from gatekeeper import metrics
from gatekeeper.config import ModelRoute
from gatekeeper.gating import enforce_choice
from gatekeeper.streaming import StreamEnforcer

log = structlog.get_logger("gatekeeper.proxy")


def _error(status: int, message: str, headers: dict[str, str]) -> Response:
    body = orjson.dumps({"error": {"message": message, "type": "upstream_error", "code": None}})
    return Response(body, status_code=status, media_type="application/json", headers=headers)


async def complete(route: ModelRoute, body: dict, allowed: set[str], headers: dict[str, str], line: dict) -> Response:
    request = {k: v for k, v in body.items() if k != "model"}
    extra = {k: v for k, v in (("api_key", route.api_key), ("api_base", route.api_base)) if v}
    try:
        response = await litellm.acompletion(model=route.litellm_model, **request, **extra)
    except litellm.APIError as exc:
        metrics.UPSTREAM_ERRORS.labels(str(getattr(exc, "status_code", 502))).inc()
        return _error(getattr(exc, "status_code", 502) or 502, f"{type(exc).__name__}: {exc}", headers)
    except Exception as exc:  # noqa: BLE001 - litellm raises many kinds; the client gets a clear 502
        metrics.UPSTREAM_ERRORS.labels("litellm").inc()
        return _error(502, f"{route.litellm_model}: {type(exc).__name__}: {exc}", headers)
    line.update(upstream_status=200)
    if body.get("stream"):
        return StreamingResponse(_relay(response, allowed, line), media_type="text/event-stream", headers=headers)
    doc = response.model_dump()
    removed = [name for choice in doc.get("choices") or [] for name in enforce_choice(choice, allowed)]
    if removed:
        metrics.TOOL_CALLS_BLOCKED.inc(len(removed))
        line.update(blocked_calls=removed)
    return Response(orjson.dumps(doc), media_type="application/json", headers=headers)


async def _relay(stream: AsyncIterator, allowed: set[str], line: dict) -> AsyncIterator[bytes]:
    enforcer = StreamEnforcer(allowed, line, log)
    try:
        async for chunk in stream:
            out = enforcer.filter_event(b"data: " + orjson.dumps(chunk.model_dump(exclude_none=True)) + b"\n\n")
            if out:
                yield out
    except Exception as exc:  # noqa: BLE001
        yield b"data: " + orjson.dumps({"error": {"message": f"{type(exc).__name__}: {exc}",
                                                  "type": "upstream_error", "code": None}}) + b"\n\n"
        return
    yield b"data: [DONE]\n\n"
