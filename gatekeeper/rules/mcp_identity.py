"""Which MCP server a request's server entry is, whatever label the client gave it. Pure: no I/O.

A client names every MCP server it offers (Responses `tools[].server_label`, Messages
`mcp_servers[].name`), and `tools.required_tier` rules name a server's tools `label.tool`. The
label is the client's own word, so gating never rests on it alone:

  * closed by default: a label that no server-scoped rule names (`gh`, while a rule says
    `github.delete_*`) may be any server. `ToolPolicy` gives each of its tools the highest tier of
    every server-scoped rule whose tool part matches it (`gh.delete_repo` needs `large`);
  * exact by configuration: `tools.mcp_servers` binds a label to what identifies a server (its
    URLs, Responses connector ids, tunnel ids; `ServerBindings`). A server whose URL is bound to
    `github` is gated by `github`'s rules whatever the client called it, and a server that calls
    itself `github` with a URL not bound to `github` is refused (it impersonates or shadows it).

URLs are compared normalised (`normalise_url`): scheme and host lowercased, the default port, user
info and fragment dropped, unreserved percent-escapes decoded, trailing slashes ignored. A spelling
this does not unify only ever fails closed: an unbound URL under an unnamed label gets every
server's rules, and under a bound label it is refused.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlsplit

from gatekeeper.errors import RequestInvalid
from gatekeeper.observe.redact import clip, redact_url

__all__ = ["IDENTITY_KINDS", "ServerBindings", "normalise_url"]

# What can identify a server in a request, as `tools.mcp_servers.<label>` lists it.
IDENTITY_KINDS = ("urls", "connectors", "tunnels")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def _unescape(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else f"%{match.group(1).upper()}"


_CACHED_URL = 2048  # longer URLs (a client's choice) are normalised each time, never kept


def normalise_url(url: str) -> str | None:
    """The form two spellings of one server URL share (`HTTPS://API.Example.com:443/mcp/` ->
    `https://api.example.com/mcp`); None when `url` is not an http(s) URL with a host."""
    return _normalised(url) if len(url) <= _CACHED_URL else _normalise(url)


def _normalise(url: str) -> str | None:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:  # a port that is not a number, a bracket left open
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")  # urllib lowercases it and drops the user info
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address, as a URL spells it
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    path = _ESCAPE.sub(_unescape, parts.path).rstrip("/")
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{host}{path}{query}"


# The same few server URLs on every request; bounded in count (clients pick them) and, by
# _CACHED_URL, in size.
_normalised = functools.lru_cache(maxsize=4096)(_normalise)


def _key(kind: str, value: str) -> str | None:
    return normalise_url(value) if kind == "urls" else value


def _no_owners() -> Mapping[str, Mapping[str, str]]:
    return MappingProxyType({kind: MappingProxyType({}) for kind in IDENTITY_KINDS})


@dataclass(frozen=True)
class ServerBindings:
    """`tools.mcp_servers`: the labels bound to server identities, and who owns each identity.

    `owners[kind][identity] -> label`, kind one of IDENTITY_KINDS (URLs normalised). Build it with
    `ServerBindings.of({"github": {"urls": ["https://api.githubcopilot.com/mcp/"]}})`; config
    validation has already refused a URL that is not one and an identity bound to two labels.
    """

    labels: frozenset[str] = frozenset()
    owners: Mapping[str, Mapping[str, str]] = field(default_factory=_no_owners)

    @classmethod
    def of(cls, servers: Mapping[str, Mapping[str, Iterable[str]]]) -> ServerBindings:
        owners: dict[str, dict[str, str]] = {kind: {} for kind in IDENTITY_KINDS}
        for label, identities in servers.items():
            for kind in IDENTITY_KINDS:
                for value in identities.get(kind, ()):
                    key = _key(kind, value)
                    if key is None:
                        raise ValueError(f"{label}.{kind}: {value!r} is not an http(s) URL with a host")
                    other = owners[kind].setdefault(key, label)
                    if other != label:
                        raise ValueError(f"{label}.{kind}: {value!r} is already bound to {other!r}")
        return cls(frozenset(servers), MappingProxyType({k: MappingProxyType(v) for k, v in owners.items()}))

    def identify(self, label: str, offered: Iterable[tuple[str, str, object]], where: str) -> str:
        """The label whose rules gate the server a request offers as `label`.

        `offered`: what the request says identifies it, as (kind, field path, value) triples, e.g.
        `("urls", "tools[0].server_url", "https://...")` (absent fields left out or None). A URL,
        connector or tunnel bound to a label makes it that label's server, whatever `label` says;
        otherwise it is `label` (which ToolPolicy treats as any server when no rule names it).
        Raises RequestInvalid when `label` is bound but what the request offers is not bound to it,
        or when two of its identities are bound to different labels."""
        if not self.labels:  # nothing bound (the default): every label is the client's
            return label
        owner: tuple[str, str, object] | None = None  # (label, field path, value)
        unbound: tuple[str, object] | None = None
        for kind, path, value in offered:
            if value is None:
                continue
            found = self.owners[kind].get(_key(kind, value) or "") if isinstance(value, str) else None
            if found is None:
                unbound = unbound or (path, value)
            elif owner is None:
                owner = (found, path, value)
            elif owner[0] != found:
                raise RequestInvalid(
                    f"{where}: {owner[1]} {_shown(owner[2])!r} is bound to MCP server {owner[0]!r} and {path} "
                    f"{_shown(value)!r} to {found!r} (tools.mcp_servers): one server has one identity"
                )
        if label in self.labels and (owner is None or owner[0] != label or unbound is not None):
            shown = unbound or (owner[1:] if owner else None)
            what = f"{shown[0]} {_shown(shown[1])!r}" if shown else "no URL"
            raise RequestInvalid(
                f"{where}: MCP server label {clip(label)!r} is bound to other servers by the config "
                f"(tools.mcp_servers or mcp.servers), but this one is offered with {what}: a server may "
                "not take the label of another"
            )
        return owner[0] if owner is not None else label


def _shown(value: object) -> str:
    """A client's URL or id as an error shows it: credentials redacted, capped."""
    return clip(redact_url(value) if isinstance(value, str) else value)
