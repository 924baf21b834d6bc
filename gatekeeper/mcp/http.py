"""The door to the gateway: `/mcp/{model}` and `/mcp` (+ `X-Gatekeeper-Model`), Streamable HTTP.

Every request passes, in this order:
1. `Origin`: absent (not a browser) or one of `mcp.allowed_origins`; else 403 (the MCP spec's
   rule against DNS rebinding);
2. the per-source throttle of wrong keys (the admin API's rules and source address, its own
   count): past 100 a minute, 429 with `Retry-After` before the key is looked at;
3. `Authorization: Bearer <one of mcp.api_keys>`, compared in constant time; else 401 (429 with
   `Retry-After` past 10 wrong keys a minute: a right key still passes);
4. the model: from the path, else the header, else none (the unknown tier); a path and a header
   (or two headers) naming different models are a 400, not one of them silently (a reverse proxy
   that sets the header must not be overridden by the client's path); its effort one of the
   closed set (400 otherwise). The session the request opens is bound to that model and key: the
   SDK answers 404 to a request for the session under another model or key, so a session cannot
   be re-pointed at a larger model.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import orjson
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from gatekeeper.drift.identity import client_identity
from gatekeeper.errors import CredentialConflict, RequestInvalid
from gatekeeper.mcp.gateway import BINDING, Binding, key_digest
from gatekeeper.observe import logs
from gatekeeper.observe.redact import clip
from gatekeeper.peers import bearer_form
from gatekeeper.store.profile import check_effort, split_key

if TYPE_CHECKING:
    from gatekeeper.mcp.gateway import McpGateway

log = logs.get_logger(__name__)

MODEL_HEADER = "x-gatekeeper-model"
_MAX_MODEL = 256
_PRINTABLE = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII: no spaces, controls or line breaks


class Throttle(Protocol):
    """Wrong keys per source (the proxy passes gatekeeper.server.throttle.KeyThrottle)."""

    def retry_after(self, source: str) -> int: ...
    def failed(self, source: str) -> int: ...  # > 0: past the soft limit, answer 429
    def succeeded(self, source: str) -> None: ...


class McpEndpoint:
    """The ASGI app behind the /mcp routes."""

    def __init__(self, gateway: McpGateway, throttle: Throttle, source: Callable[[Request], str]) -> None:
        """`source(request)` is the address wrong keys are counted by (the admin API's rule)."""
        self.gateway, self.throttle, self.source = gateway, throttle, source

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        admitted = self._admit(request)
        if isinstance(admitted, Response):
            await admitted(scope, receive, send)
            return
        binding, digest = admitted
        principal = f"key:{digest}|{binding.shown}"
        scope[BINDING] = binding
        # The SDK binds a session to the principal that opened it: here, the key and the model.
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=principal, scopes=[]))
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with self.gateway.in_flight(digest):  # ended if a reload removes the key
            await self.gateway.manager.handle_request(scope, receive, watch)
        session_id = request.headers.get("mcp-session-id")
        # Closed by its client: no more notifications. Only a DELETE the SDK accepted: one it
        # refused (another key's or model's session, a 404) must not silence the owner's session.
        if request.method == "DELETE" and session_id and 200 <= status < 300:
            self.gateway.forget_session(session_id)

    def _admit(self, request: Request) -> Response | tuple[Binding, str]:
        """The request's binding and its key's digest, or the error response that refuses it."""
        settings = self.gateway.gk.settings  # read per request: a reload can rotate the keys
        origin = request.headers.get("origin")
        if origin is not None and _origin(origin) not in {_origin(o) for o in settings.mcp.allowed_origins}:
            log.warning("mcp_origin_refused", origin=origin[:200])
            return _error(403, f"Origin {origin[:200]!r} is not allowed (mcp.allowed_origins)")
        source = self.source(request)
        wait = self.throttle.retry_after(source)  # so many wrong keys that this one is not read
        if wait:
            log.warning("mcp_key_throttled", client=source, retry_after_s=wait)
            return _throttled(wait)
        key = _key(request.headers.get("authorization", ""), settings.mcp.keys)
        if key is None:
            wait = self.throttle.failed(source)
            log.warning("mcp_key_refused", client=source)
            if wait:
                return _throttled(wait)
            message = "the MCP gateway needs 'Authorization: Bearer <one of mcp.api_keys>'"
            return _error(401, message, {"www-authenticate": "Bearer"})
        self.throttle.succeeded(source)
        path = request.path_params.get("model") or None
        named = request.headers.getlist(MODEL_HEADER)
        if len(set(named)) > 1 or (path is not None and named and named[0] != path):
            given = ([f"the path {_shown(path)}"] if path is not None else []) + [
                f"{MODEL_HEADER} {_shown(n)}" for n in dict.fromkeys(named)
            ]
            log.warning("mcp_model_conflict", given=given)
            return _error(400, f"the request names two models ({', '.join(given)}): name the model once")
        raw = path if path is not None else (named[0] if named else None)
        if raw is not None and (len(raw) > _MAX_MODEL or not _PRINTABLE.match(raw)):
            return _error(400, f"not a model name (visible ASCII, at most {_MAX_MODEL} characters)")
        # Whose demotions apply: the proxy's identity rule (a trusted front proxy's
        # `drift.client_header`, else the credential), so one client's demotion reaches its agent here.
        try:
            client = client_identity(request.headers, settings, request.client.host if request.client else None)
        except CredentialConflict as exc:  # anonymous would shed the client's own demotion
            return _error(400, exc.message)
        binding = _bind(raw, client)
        if raw is not None and binding.model is None:
            return _error(400, f"expected MODEL or MODEL@EFFORT, got {raw!r}")
        if binding.effort is not None:
            try:
                check_effort(binding.effort, settings.extra_efforts)
            except RequestInvalid as exc:
                return _error(400, str(exc))
        # The key by its digest, not its place in the list: a reload that removes another key
        # must not hand this key's sessions to whichever key moves into its place.
        return binding, key_digest(key)


def _origin(origin: str) -> str:
    """An origin as compared: lower case, without its scheme's default port (browsers never send
    `:443` on https, so an allowed `https://app.example:443` matched nothing)."""
    origin = origin.lower()
    for scheme, port in (("https://", ":443"), ("http://", ":80")):
        if origin.startswith(scheme) and origin.endswith(port):
            return origin.removesuffix(port)
    return origin


def _key(header: str, keys: list[str]) -> str | None:
    """Which key the header carries; every key is compared (constant time each, no early exit)."""
    presented = bearer_form(header)
    found = None
    for key in keys:
        if hmac.compare_digest(presented, f"Bearer {key}".encode()):
            found = key
    return found


def _shown(model: str) -> str:
    return repr(clip(model, 80))


def _bind(raw: str | None, client: str) -> Binding:
    if raw is None:
        return Binding(None, None, client)
    model, effort = split_key(raw) if "@" in raw else (raw, None)
    if not model or (effort is not None and not effort):
        return Binding(None, None, client)
    return Binding(model, effort, client)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type="application/json")


def _throttled(wait: int) -> Response:
    return _error(429, "too many wrong MCP keys from this address; retry later", {"retry-after": str(wait)})


def mcp_routes(gateway: McpGateway, throttle: Throttle, source: Callable[[Request], str]) -> list[BaseRoute]:
    endpoint = McpEndpoint(gateway, throttle, source)
    return [Route("/mcp", endpoint), Route("/mcp/{model:path}", endpoint)]
