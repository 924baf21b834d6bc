"""Where a model call goes: the `Upstream` protocol and the pooled HTTP upstream.

An upstream takes an `UpstreamRequest` (method, path under its base URL, the client's raw headers,
the JSON body) and gives an `UpstreamAnswer` (status, headers a client may see, the body read
whole, as server-sent events, or as raw chunks; every way of reading capped at
`upstream.max_response_bytes`). Implementations: `PooledUpstream` (below, on the HTTP/1.1 pool
of server/http1.py), the litellm route (server/litellm_route.py) and `MockUpstream`
(server/mock.py: a handler function, for pipeline tests without a port). Which one serves a
model: server/mounts.py.

The hot path talks to the upstream through its own small HTTP/1.1 client (server/http1.py), not
a client library: httpx's pool walks its connections on every request, through anyio, and
aiohttp's client took more of a core per request than a whole bare forwarder besides
(docs/results/perf_compare.md has the trials). httpx stays where it serves well: the
measurement backend (backends.py).

What the pool keeps:
  * it never follows a redirect (the client's key would go wherever the upstream says);
  * it keeps no cookies (one upstream cookie must never reach another client's request);
  * answers are decoded (gzip, deflate) before anyone reads them, and a body that ends early is an
    error, never a short answer;
  * a pooled connection found dead before any answer arrived is replaced, and the request sent
    on a new one.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlsplit, urlunsplit
from urllib.request import getproxies, proxy_bypass

import orjson

from gatekeeper.config import Upstream as UpstreamSettings
from gatekeeper.errors import ConfigError, ProxyError
from gatekeeper.observe import logs, metrics
from gatekeeper.observe.redact import address_forms, redact, redact_url, scrub
from gatekeeper.protocols.base import Event
from gatekeeper.protocols.sse import SSEParser
from gatekeeper.server import http1

# Headers that describe one hop, or that the client library recomputes: never copied across the
# proxy, either way. `x-request-id` stays here too: some servers (llama.cpp's) reject ids that
# are not UUIDs.
HOP = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
        "accept-encoding",
        "content-encoding",
        "trailer",
    }
)
_HOP_BYTES = frozenset(h.encode() for h in HOP) | {b"x-request-id", b"content-type"}

# The client headers an upstream may need, sent on by default (`upstream.client_headers: known`):
# credentials, the protocols' own version and beta flags (`openai-*`, `anthropic-*`), what the
# SDKs and Codex say about themselves, idempotency and W3C trace context. Any other header is
# dropped and named in the request log line: an upstream gateway may take request parameters
# from a header (Portkey's `x-portkey-config` with `override_params` adds tools to the body), a
# browser's cookies for this proxy's console are not the upstream's, and an operator who needs
# one more lists it in `upstream.forward_headers`.
FORWARDED = frozenset(
    {
        "authorization",
        "x-api-key",
        "api-key",  # Azure OpenAI
        "accept",
        "accept-language",
        "user-agent",
        "idempotency-key",
        "traceparent",
        "tracestate",
        "baggage",
        "originator",  # Codex
        "version",
        "session_id",
        "conversation_id",
        "chatgpt-account-id",
    }
)
FORWARDED_PREFIXES = ("openai-", "anthropic-", "x-stainless-")
_MAX_DROPPED_SHOWN = 16  # header names one request's log line lists

log = logs.get_logger(__name__)

# What reading an answer raises when the transfer breaks (reset, early end, read timeout).
TransferError = (http1.Broken, TimeoutError)

_SECRET_MIN = 8  # characters of an operator credential worth scrubbing from error bodies
_MAX_CACHED_URLS = 64  # fixed endpoint paths; /v1/models/{id} paths come from clients and are not kept


# Sent on upstream errors too (not only on answers): the SDKs' backoff reads them.
RATE_LIMIT_HEADERS = frozenset({"retry-after", "retry-after-ms"})
RATE_LIMIT_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    path: str  # under the upstream's base URL: "/chat/completions", "/models", ...
    headers: list[tuple[bytes, bytes]]  # the client's, raw (ASGI): each upstream applies its own rules
    body: dict[str, Any] | None = None  # a JSON object, or None (GET)
    stream: bool = False  # the client asked for a streamed answer


class UpstreamAnswer(Protocol):
    """One upstream answer. Whoever receives it reads it once (`read`, `events` or `chunks`) or
    closes it (`aclose`)."""

    @property
    def status_code(self) -> int: ...

    def passed_headers(self) -> dict[str, str]:
        """The answer's headers a client may see (hop-by-hop ones removed), lower-cased."""

    async def read(self) -> bytes:
        """The whole body (capped; 502 when over, or when the transfer breaks); closes the answer.
        Without the operator's credentials, and an error (400 and up) without the upstream's
        address either."""

    def events(self) -> AsyncIterator[list[Event]]:
        """The body as server-sent events, one list per received chunk (capped: ProxyError),
        scrubbed as `read` scrubs (an error event as an error)."""

    def chunks(self) -> AsyncIterator[bytes]:
        """The raw body for a relay that does not read it (a tool-free 2xx stream: an error is
        `read`): ends quietly at the cap or a broken transfer, and closes the answer."""

    async def aclose(self) -> None: ...


class Upstream(Protocol):
    """Something that answers model calls."""

    protocols: tuple[str, ...]  # the client protocols it speaks natively; the rest are translated to chat

    async def send(self, request: UpstreamRequest) -> UpstreamAnswer:
        """Send `request`; ProxyError 502/504 when no answer comes."""

    async def aclose(self) -> None: ...


class ByteAnswer:
    """An answer whose body arrives as bytes (HTTP, or a mock): the one place the size cap and
    the SSE framing are applied, whatever reads it."""

    __slots__ = ("credentials", "limit", "secrets")

    def __init__(self, limit: int, secrets: tuple[bytes, ...] = (), credentials: tuple[bytes, ...] = ()) -> None:
        self.limit = limit
        self.secrets = secrets  # the operator's credentials and the upstream's address: never in an error
        self.credentials = credentials  # the operator's credentials alone: never in any answer

    @property
    def status_code(self) -> int:
        raise NotImplementedError

    def raw_headers(self) -> Mapping[str, str]:
        raise NotImplementedError

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def passed_headers(self) -> dict[str, str]:
        hidden = self.secrets if self.status_code >= 400 else self.credentials  # as `read` scrubs the body
        return {k.lower(): _scrubbed(v, hidden) for k, v in self.raw_headers().items() if k.lower() not in HOP}

    async def _capped(self, what: str) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self.aiter_bytes():
            size += len(chunk)
            if size > self.limit:
                raise _failed("too_large", 502, f"upstream {what} exceeds max_response_bytes ({self.limit})")
            yield chunk

    async def read(self) -> bytes:
        chunks: list[bytes] = []
        try:
            async for chunk in self._capped("answer"):
                chunks.append(chunk)
        except TransferError as exc:
            raise _failed("read", 502, f"upstream answer broke off: {type(exc).__name__}", "incomplete") from None
        finally:
            await self.aclose()
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return scrub(body, self.secrets if self.status_code >= 400 else self.credentials)

    async def events(self) -> AsyncIterator[list[Event]]:
        # A broken transfer (TransferError) reaches the relay, which ends the client's stream in error.
        parser = SSEParser()
        clean = self._scrubbed if self.secrets else None
        async for chunk in self._capped("stream"):
            events = parser.feed(chunk)
            if events:
                yield events if clean is None else clean(events)
        last = parser.finish()
        yield last if clean is None else clean(last)

    def _scrubbed(self, events: list[Event]) -> list[Event]:
        """Events without the operator's credentials, and an error event (an upstream's
        mid-stream `{"error": ...}`) without the upstream's address either."""
        out = []
        for event in events:
            raw = event.data.encode()
            error = event.event == "error" or b'"error"' in raw
            cleaned = scrub(raw, self.secrets if error else self.credentials)
            out.append(event if cleaned is raw else event._replace(data=cleaned.decode()))
        return out

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._capped("answer"):
                yield chunk
        except (ProxyError, *TransferError):
            return
        finally:
            await self.aclose()


class PooledAnswer(ByteAnswer):
    """An answer from the pool. `aclose` gives the connection back when the body was read to its
    end, and drops it otherwise."""

    __slots__ = ("_answer",)

    def __init__(
        self,
        answer: http1.Answer,
        limit: int,
        secrets: tuple[bytes, ...] = (),
        credentials: tuple[bytes, ...] = (),
    ) -> None:
        super().__init__(limit, secrets, credentials)
        self._answer = answer

    @property
    def status_code(self) -> int:
        return self._answer.status

    def raw_headers(self) -> Mapping[str, str]:
        return self._answer.headers

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        return self._answer.body()

    async def aclose(self) -> None:
        await self._answer.aclose()


class PooledUpstream:
    """One connection pool (`upstream.max_connections` wide) to the upstream."""

    def __init__(self, upstream: UpstreamSettings) -> None:
        """Call from a running event loop (the app's lifespan): the pool binds to it."""
        self.upstream = upstream  # the settings it was built from (a reload may bring new ones)
        self.protocols: tuple[str, ...] = tuple(upstream.protocols)
        # User info in the URL (`http://user:pw@host/v1`) is the operator's Basic credential: it
        # is taken out of the URL and sent only when neither the client nor `api_key` gives a key.
        self.base_url, self._basic = _without_userinfo(upstream.base_url)
        # What an echoing upstream's error must not show the client: the key and Basic credential
        # this proxy adds for the operator (a client's own key is the client's).
        given = urlsplit(upstream.base_url)
        credentials = (
            upstream.api_key,
            self._basic and self._basic.removeprefix("Basic "),
            given.password and unquote(given.password),
            given.username and unquote(given.username),
        )
        # Shorter values are placeholders (`EMPTY`, `none` for servers that check no key), and
        # replacing them would mangle the error's own words. The credentials go from every
        # answer; the upstream's own address from errors too: an upstream that quotes it (a
        # gateway's "cannot reach http://10.0.0.5:8000/v1", a Host it received) must not tell the
        # client where it lives (a model's answer may name a public host: only errors lose it).
        self._credentials = _longest_first(credentials)
        self._secrets = _longest_first([*credentials, *address_forms(self.base_url)])
        self._shown = redact_url(upstream.base_url)  # what log lines say: never its credentials
        self.api_key = upstream.api_key
        self.max_response_bytes = upstream.max_response_bytes
        self.timeout_s = upstream.timeout_s  # waiting for a free connection; the longest silence of an answer
        parts = urlsplit(self.base_url)
        self._prefix = parts.path
        # The HTTP(S)_PROXY that applies (NO_PROXY honoured), read once, as httpx did: not per request.
        self._pool = http1.Pool(
            f"{parts.scheme}://{parts.netloc}",
            max_connections=upstream.max_connections,
            read_timeout=upstream.timeout_s,
            max_body=upstream.max_response_bytes,
            proxy=env_proxy(upstream.base_url),
        )
        self._targets: dict[str, str] = {}
        self._forward_all = upstream.client_headers == "all"
        extra = upstream.forward_headers
        self._forwarded = FORWARDED | {n for n in extra if not n.endswith("*")}
        self._prefixes = FORWARDED_PREFIXES + tuple(n[:-1] for n in extra if n.endswith("*"))

    async def aclose(self) -> None:
        self._pool.close()

    def target(self, path: str) -> str:
        """The request target for `path` under the base URL (a space or line break in it encoded)."""
        target = self._targets.get(path)
        if target is None:
            target = self._prefix + quote(path, safe="/%:@!$&'()*+,;=")
            if len(self._targets) < _MAX_CACHED_URLS:  # fixed endpoint paths: built once each
                self._targets[path] = target
        return target

    def request_headers(self, raw: list[tuple[bytes, bytes]], json_body: bool) -> list[tuple[str, str]]:
        """The client's headers an upstream may see (FORWARDED, or all but hop-by-hop ones); the
        operator's key when the client sent none. A value that is not printable ASCII is a 400
        naming the header."""
        headers = []
        dropped = []
        has_auth = False
        for name, value in raw:
            if name in _HOP_BYTES:
                continue
            text = name.decode("latin-1")  # ASGI servers give names lower-cased
            if not (self._forward_all or text in self._forwarded or text.startswith(self._prefixes)):
                dropped.append(text)
                continue
            if not value.isascii() or b"\r" in value or b"\n" in value:
                raise ProxyError(400, f"header {text!r} has a non-ASCII value or a line break", "invalid_header")
            has_auth = has_auth or name == b"authorization"
            headers.append((text, value.decode("latin-1")))
        if dropped:
            log.info("client_headers_dropped", headers=dropped[:_MAX_DROPPED_SHOWN], count=len(dropped))
        if not has_auth and self.api_key:
            headers.append(("authorization", f"Bearer {self.api_key}"))
        elif not has_auth and self._basic:
            headers.append(("authorization", self._basic))
        if json_body:
            headers.append(("content-type", "application/json"))
        return headers

    async def send(self, request: UpstreamRequest) -> PooledAnswer:
        """Send and return the streaming answer (the caller reads or closes it). 504 on timeout,
        502 when unreachable or when the answer's head is not valid HTTP."""
        target = self.target(request.path)
        headers = self.request_headers(request.headers, json_body=request.body is not None)
        try:
            content = None if request.body is None else orjson.dumps(request.body)
        except orjson.JSONEncodeError as exc:  # orjson reads 1024 levels of nesting, writes 254
            raise ProxyError(
                400, f"request body cannot be forwarded (nested over 254 levels?): {exc}", "invalid_body"
            ) from None
        try:
            answer = await self._pool.request(request.method, target, headers, content, wait=self.timeout_s)
        except TimeoutError:
            log.warning("upstream_failed", upstream=self._shown, path=request.path, error="timed out")
            raise _failed("timeout", 504, "the upstream timed out") from None
        except (http1.Unreachable, http1.Broken) as exc:
            # The address and the reason go to the log; the client learns only that it failed:
            # where the upstream lives (a host, a port, an internal name) is not the client's.
            error = scrub(f"{type(exc).__name__}: {exc}".encode(), self._secrets).decode()
            log.warning("upstream_failed", upstream=self._shown, path=request.path, error=redact(error))
            raise _failed("unreachable", 502, "the upstream is unreachable") from None
        return PooledAnswer(answer, self.max_response_bytes, self._secrets, self._credentials)


def _scrubbed(value: str, secrets: tuple[bytes, ...]) -> str:
    """A header's value without `secrets` (an upstream may echo the key it was sent in a header)."""
    if not secrets:
        return value
    raw = value.encode("utf-8", "surrogateescape")
    clean = scrub(raw, secrets)
    return value if clean is raw else clean.decode("utf-8", "surrogateescape")


def _longest_first(values: Iterable[str | None]) -> tuple[bytes, ...]:
    """The values worth scrubbing, longest first (a value is never half-replaced through a
    shorter one it contains)."""
    found = {v for v in values if v and len(v) >= _SECRET_MIN}
    return tuple(v.encode() for v in sorted(found, key=len, reverse=True))


def rate_limit_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """`Retry-After` and the rate-limit headers among an answer's (lower-cased) headers."""
    return {k: v for k, v in headers.items() if k in RATE_LIMIT_HEADERS or k.startswith(RATE_LIMIT_PREFIXES)}


def _without_userinfo(base_url: str) -> tuple[str, str | None]:
    """The URL without its user info, and that user info as a Basic Authorization value."""
    parts = urlsplit(base_url)
    if "@" not in parts.netloc:
        return base_url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    basic = "Basic " + base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return urlunsplit(parts._replace(netloc=host)), basic


def env_proxy(base_url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to the upstream (NO_PROXY honoured), as httpx read it.
    ConfigError for one the pool cannot use (a `socks5://` proxy): never bypassed in silence."""
    parts = urlsplit(base_url)
    if parts.hostname is None or proxy_bypass(parts.hostname):
        return None
    proxy = getproxies().get(parts.scheme)
    if proxy is not None and "://" in proxy and not proxy.startswith("http://"):
        raise ConfigError(
            f"{parts.scheme.upper()}_PROXY={redact_url(proxy)}: only an http:// proxy is supported "
            f"(or list the upstream's host in NO_PROXY)"
        )
    return proxy


def _failed(metric: str, status: int, message: str, code: str | None = None) -> ProxyError:
    """The client's error when the upstream failed (counted under `metric`); its code is
    `upstream_<code>`, by default `upstream_<metric>`."""
    metrics.UPSTREAM_ERRORS.labels(metric).inc()
    return ProxyError(status, message, f"upstream_{code or metric}", "upstream_error")
