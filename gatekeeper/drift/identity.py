"""Whose traffic a piece of drift evidence is: one identity per client, not cheap to forge.

Drift evidence is only as good as the identity it is attributed to: one client must not be able
to demote a model for everyone by asking it for what it cannot do. The identity is, in order:

- the value of `drift.client_header`, when configured: a header set by a trusted front proxy
  (which must overwrite whatever the client sent), believed only from a peer in
  `trusted_proxies` (as the throttle's forwarded address is);
- else the client's credential, when the upstream is the one checking it: `Authorization`
  (the bearer token) or `x-api-key` (both: only when they agree). The proxy forwards these to
  the upstream, and an answer to a refused credential (401/403) carries no tool calls, so
  evidence only ever counts for a credential the upstream accepted. Not for `x-api-key` alone
  when the proxy adds the operator's `upstream.api_key` (the upstream then accepts the
  operator's key), and not for the answers of a litellm route (`evidence_identity`: the route
  calls the provider with the operator's key);
- else ANONYMOUS: every client without an identity shares that one.

Identities are hashed (SHA-256, the first 64 bits): the admin API and the logs never show a
credential. Pure: headers and settings in, a string out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gatekeeper.peers import is_trusted

if TYPE_CHECKING:  # read, never built, here: drift sits below the config layer
    from gatekeeper.config import Settings

ANONYMOUS = "anonymous"
_MAX_VALUE = 4096  # a credential longer than this is no credential (and not worth hashing)


def client_identity(headers: Mapping[str, str], settings: Settings, peer: str | None = None) -> str:
    """The drift identity of one request: 'hdr:<hash>', 'key:<hash>' or ANONYMOUS.

    `headers` are looked up by lower-case name (Starlette's headers are case-insensitive);
    `peer` is the socket peer's address (None: unknown, never a trusted proxy).
    """
    header = settings.drift.client_header
    if header is not None:
        if peer is None or not is_trusted(peer, tuple(getattr(settings, "trusted_proxies", ()))):
            return (
                ANONYMOUS  # a client reaching the proxy directly (or over a socket with no address) could name anyone
            )
        return _hashed("hdr", headers.get(header))
    authorization, api_key = headers.get("authorization"), headers.get("x-api-key")
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        # The same key through the OpenAI client (Bearer) and the Anthropic one (x-api-key) is
        # one client: hash the token, not the scheme.
        token = token.strip() if scheme.lower() == "bearer" else authorization.strip()
        if api_key is not None and api_key.strip() != token:
            # Two different credentials: the upstream checks one and may ignore the other, so
            # either could be made up, and an identity per made-up value would be free.
            return ANONYMOUS
        return _hashed("key", token)
    if settings.upstream.api_key or _has_userinfo(str(settings.upstream.base_url)):
        # Without an Authorization header the proxy sends the operator's own credential (its
        # key, or the user info of upstream.base_url): an x-api-key beside it is checked by nobody.
        return ANONYMOUS
    return _hashed("key", api_key)


def _has_userinfo(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.username or parts.password)


def evidence_identity(client: str, settings: Settings, model: str) -> str:
    """Whom the answer's calls count for: ANONYMOUS when the request went to a litellm route,
    which calls the provider with the operator's key (nobody checked the client's)."""
    return ANONYMOUS if settings.route(model) is not None else client


def _hashed(kind: str, value: str | None) -> str:
    value = (value or "").strip()
    if not value or len(value) > _MAX_VALUE:
        return ANONYMOUS
    digest = hashlib.sha256(b"gatekeeper drift client\0" + value.encode()).hexdigest()
    return f"{kind}:{digest[:16]}"
