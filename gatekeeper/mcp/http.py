"""The door to the gateway: `/mcp/{model}` and `/mcp` (+ `X-Gatekeeper-Model`), Streamable HTTP.

Every request passes, in this order:
1. `Origin`: absent (not a browser) or one of `mcp.allowed_origins`; else 403 (the MCP spec's
   rule against DNS rebinding);
2. the per-source throttle of failed keys: past it, 429 until the window passes;
3. `Authorization: Bearer <one of mcp.api_keys>`, compared in constant time; else 401;
4. the model: from the path, else the header, else none (the unknown tier). The session the
   request opens is bound to that model and key: the SDK answers 404 to a request for the session
   under another model or key, so a session cannot be re-pointed at a larger model.
"""

from __future__ import annotations

import hmac
import re
from typing import TYPE_CHECKING

import orjson
import structlog
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from gatekeeper.mcp.gateway import BINDING, Binding
from gatekeeper.mcp.throttle import FailureThrottle
from gatekeeper.store.profile import split_key

if TYPE_CHECKING:
    from gatekeeper.mcp.gateway import McpGateway

log = structlog.get_logger("gatekeeper.mcp.http")

MODEL_HEADER = "x-gatekeeper-model"
_MAX_MODEL = 256
_PRINTABLE = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII: no spaces, controls or line breaks


class McpEndpoint:
    """The ASGI app behind the /mcp routes."""

    def __init__(self, gateway: McpGateway) -> None:
        self.gateway = gateway
        self.throttle = FailureThrottle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        settings = self.gateway.gk.settings.mcp  # read per request: a reload can rotate the keys
        origin = request.headers.get("origin")
        if origin is not None and origin.lower() not in settings.allowed_origins:
            log.warning("mcp_origin_refused", origin=origin[:200])
            await _error(403, f"Origin {origin[:200]!r} is not allowed (mcp.allowed_origins)")(scope, receive, send)
            return
        source = request.client.host if request.client is not None else "unknown"
        retry_after = self.throttle.blocked(source)
        if retry_after is not None:
            headers = {"retry-after": str(max(1, round(retry_after)))}
            await _error(429, "too many failed MCP keys from this address; retry later", headers)(scope, receive, send)
            return
        key_index = _key_index(request.headers.get("authorization", ""), settings.keys)
        if key_index is None:
            self.throttle.failed(source)
            log.warning("mcp_key_refused", source=source)
            await _error(
                401,
                "the MCP gateway needs 'Authorization: Bearer <one of mcp.api_keys>'",
                {"www-authenticate": "Bearer"},
            )(scope, receive, send)
            return
        raw = request.path_params.get("model") or request.headers.get(MODEL_HEADER)
        if raw is not None and (len(raw) > _MAX_MODEL or not _PRINTABLE.match(raw)):
            await _error(400, f"not a model name (visible ASCII, at most {_MAX_MODEL} characters)")(
                scope, receive, send
            )
            return
        binding = _bind(raw)
        if raw is not None and binding.model is None:
            await _error(400, f"expected MODEL or MODEL@EFFORT, got {raw[:_MAX_MODEL]!r}")(scope, receive, send)
            return
        scope[BINDING] = binding
        # The SDK binds a session to the principal that opened it: the key and the model.
        principal = f"key{key_index}|{binding.shown}"
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=principal, scopes=[]))
        await self.gateway.manager.handle_request(scope, receive, send)
        if request.method == "DELETE" and (session_id := request.headers.get("mcp-session-id")):
            self.gateway.forget_session(session_id)  # closed by the client: no more notifications


def _key_index(header: str, keys: list[str]) -> int | None:
    """Which key the header carries; every key is compared (constant time each, no early exit)."""
    presented = header.encode("latin-1", "replace")
    found = None
    for i, key in enumerate(keys):
        if hmac.compare_digest(presented, f"Bearer {key}".encode()):
            found = i
    return found


def _bind(raw: str | None) -> Binding:
    if raw is None:
        return Binding(None, None)
    model, effort = split_key(raw) if "@" in raw else (raw, None)
    if not model or (effort is not None and not effort):
        return Binding(None, None)
    return Binding(model, effort)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type="application/json")


def mcp_routes(gateway: McpGateway) -> list[BaseRoute]:
    endpoint = McpEndpoint(gateway)
    return [Route("/mcp", endpoint), Route("/mcp/{model:path}", endpoint)]
