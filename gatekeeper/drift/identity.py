"""Whose traffic a piece of drift evidence is: one identity per client, not cheap to forge.

Drift evidence is only as good as the identity it is attributed to: one client must not be able
to demote a model for everyone by asking it for what it cannot do, nor escape its own demotion by
changing how it presents itself. The identity is, in order:

- the value of `drift.client_header`, when configured: a header set by a trusted front proxy
  (which must overwrite whatever the client sent), believed only from a peer in
  `trusted_proxies` (as the throttle's forwarded address is);
- else the credential **the upstream checks** (`drift.credential_header`; `auto` derives it from
  the upstream: Azure's `api-key` on an Azure host, the protocol's own headers on a request sent
  natively (its registry entry's `credential_headers`: Anthropic Messages' `x-api-key` or
  `Authorization`), else `Authorization`). An answer to a refused credential (401/403) carries
  no tool calls, so evidence only ever counts for a credential the upstream accepted. A
  credential in another header is checked by nobody (a made-up one would be a new client for
  free): alone it is ANONYMOUS; beside a different value in the checked header the request is
  refused (CredentialConflict, a 400), so adding a mismatched second credential can neither
  mint an identity nor reset the client's own evidence. Not when the proxy sends the operator's
  own credential in the checked header (`upstream.api_key`, or the user info of
  `upstream.base_url`, when the client sends no `Authorization`), and not for the answers of a
  litellm route (`evidence_identity`: the route calls the provider with the operator's key);
- else ANONYMOUS: every client without an identity shares that one, and it never counts
  towards `drift.min_clients` (gatekeeper.drift.monitor).

Identities are hashed (SHA-256, the first 64 bits): the admin API and the logs never show a
credential. Pure: headers and settings in, a string out.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gatekeeper.errors import CredentialConflict
from gatekeeper.peers import is_trusted
from gatekeeper.protocols import table

if TYPE_CHECKING:  # read, never built, here: drift sits below the config layer
    from gatekeeper.config import Settings

ANONYMOUS = "anonymous"
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key")  # what the proxy forwards (server/upstream.py)
_MAX_VALUE = 4096  # a credential longer than this is no credential (and not worth hashing)
# Hosts that authenticate with Azure's `api-key` header (Azure OpenAI, AI Foundry).
_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")


def checked_headers(settings: Settings, protocol: str = "chat") -> tuple[str, ...]:
    """The headers whose credential the upstream checks for a request of `protocol` (none: the
    upstream checks no credential, `drift.credential_header: none`)."""
    configured = settings.drift.credential_header
    if configured != "auto":
        return () if configured == "none" else (configured,)
    if _azure(str(settings.upstream.base_url)):
        return ("api-key",)
    entry = table.protocol(protocol)
    if entry is not None and protocol in settings.upstream.protocols:
        # Sent natively: the headers that protocol's upstreams read (two that differ are refused below).
        return entry.credential_headers
    return ("authorization",)


@functools.lru_cache(maxsize=64)  # the config's base URLs (a few), asked by every request
def _azure(base_url: str) -> bool:
    return (urlsplit(base_url).hostname or "").lower().endswith(_AZURE_HOSTS)


def client_identity(
    headers: Mapping[str, str], settings: Settings, peer: str | None = None, protocol: str = "chat"
) -> str:
    """The drift identity of one request: 'hdr:<hash>', 'key:<hash>' or ANONYMOUS.

    `headers` are looked up by lower-case name (Starlette's headers are case-insensitive);
    `peer` is the socket peer's address (None: unknown, never a trusted proxy); `protocol` the
    client protocol (chat, responses, messages). Raises CredentialConflict when two credential
    headers carry different values.
    """
    return identity_of(presented(headers, settings, peer, protocol))


def identity_of(found: tuple[str, str] | None) -> str:
    """The drift identity of what `presented` found."""
    return ANONYMOUS if found is None else _hashed(*found)


def presented(
    headers: Mapping[str, str], settings: Settings, peer: str | None = None, protocol: str = "chat"
) -> tuple[str, str] | None:
    """What identifies one request, in the clear, as `client_identity` reads it: ('hdr', the
    trusted client header's value) or ('key', the checked credential), or None (anonymous).
    Never stored or logged: hashed into the identity, or matched against `clients:`' digests."""
    header = settings.drift.client_header
    if header is not None:
        if peer is None or not is_trusted(peer, tuple(getattr(settings, "trusted_proxies", ()))):
            return None  # a client reaching the proxy directly (or over a socket with no address) could name anyone
        value = (headers.get(header) or "").strip()
        return ("hdr", value) if value and len(value) <= _MAX_VALUE else None
    found: dict[str, str] = {}
    for name in CREDENTIAL_HEADERS:
        # Every value of a repeated header: the upstream may read another one than we would.
        values = {v for raw in _all(headers, name) if (v := _credential(name, raw))}
        if len(values) > 1:
            raise CredentialConflict([f"two {name} headers"])
        if values:
            found[name] = values.pop()
    checked = next((name for name in checked_headers(settings, protocol) if name in found), None)
    if checked is None:
        return None  # nobody checks what it presented (or it presented nothing)
    if len(set(found.values())) > 1:
        # Two different credentials: the upstream checks one and may ignore the other, so either
        # could be made up. Refused rather than anonymous: anonymous would end the client's own
        # demotion (its evidence is under its real credential's identity).
        raise CredentialConflict(list(found))
    if "authorization" not in found and (settings.upstream.api_key or _has_userinfo(settings.upstream.base_url)):
        # The proxy then sends the operator's own credential (its key, or the user info of
        # upstream.base_url) as Authorization: an upstream that takes either header is satisfied
        # by the operator's, and the client's own proves nothing.
        return None
    value = found[checked]
    return ("key", value) if value.strip() and len(value.strip()) <= _MAX_VALUE else None


def _all(headers: Mapping[str, str], name: str) -> list[str]:
    getlist = getattr(headers, "getlist", None)  # Starlette's Headers keep repeated ones
    if getlist is not None:
        return list(getlist(name))
    value = headers.get(name)
    return [] if value is None else [value]


def _credential(name: str, value: str | None) -> str:
    value = (value or "").strip()
    if name == "authorization":
        scheme, _, token = value.partition(" ")
        # The same key through the OpenAI client (Bearer) and the Anthropic one (x-api-key) is
        # one credential: the token, not the scheme.
        return token.strip() if scheme.lower() == "bearer" else value
    return value


def _has_userinfo(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.username or parts.password)


def evidence_identity(client: str, settings: Settings, model: str) -> str:
    """Whom the answer's calls count for: ANONYMOUS when the request went to a litellm route,
    which calls the provider with the operator's key (nobody checked the client's)."""
    return ANONYMOUS if settings.model_route(model) is not None else client


def _hashed(kind: str, value: str | None) -> str:
    value = (value or "").strip()
    if not value or len(value) > _MAX_VALUE:
        return ANONYMOUS
    digest = hashlib.sha256(b"gatekeeper drift client\0" + value.encode()).hexdigest()
    return f"{kind}:{digest[:16]}"
