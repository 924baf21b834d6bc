"""The upstream connection pool, the resend rule and the header rules, in one place.

The hot path talks to the upstream through aiohttp, not httpx: with the same app on the same
machine aiohttp's pool served several times the requests per second under concurrency (httpx's
pool walks its connections on every request, through anyio; tests/perf/RESULTS.md has the
trial). httpx stays where it serves well: the measurement backend (backends.py).

What the pool keeps, whatever the client library:
  * it never follows a redirect (the client's key would go wherever the upstream says);
  * it keeps no cookies (one upstream cookie must never reach another client's request);
  * answers are decoded (gzip, deflate) before anyone reads them, and a body that ends early is an
    error, never a short answer;
  * a pooled connection found dead before any answer arrived is retried once, on a new one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

from gatekeeper import metrics
from gatekeeper.config import Upstream
from gatekeeper.errors import ProxyError

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

# What reading an answer raises when the transfer breaks (reset, early end, read timeout).
TransferError = (aiohttp.ClientError, asyncio.TimeoutError)

_MAX_CACHED_URLS = 64  # fixed endpoint paths; /v1/models/{id} paths come from clients and are not kept


class UpstreamResponse:
    """One upstream answer: status, headers and the decoded body in chunks. `aclose` gives the
    connection back when the body was read to its end, and drops it otherwise."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status_code(self) -> int:
        return self._response.status

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self._response.headers

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.content.iter_any():
            yield chunk

    async def aclose(self) -> None:
        self._response.release()


class UpstreamPool:
    """One aiohttp session (one connection pool, `upstream.max_connections` wide) to the upstream."""

    def __init__(self, upstream: Upstream) -> None:
        """Call from a running event loop (the app's lifespan): aiohttp binds to it."""
        self.upstream = upstream  # the settings it was built from (a reload may bring new ones)
        self.base_url = upstream.base_url
        self.api_key = upstream.api_key
        self.max_response_bytes = upstream.max_response_bytes
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=upstream.max_connections, limit_per_host=0),
            # The same limits as the httpx client had: `connect` covers waiting for a pooled
            # connection, `sock_read` is the longest silence while an answer is read.
            timeout=aiohttp.ClientTimeout(
                total=None, connect=upstream.timeout_s, sock_connect=10.0, sock_read=upstream.timeout_s
            ),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=True,
            raise_for_status=False,
            trust_env=False,
        )
        self._proxy = _env_proxy(upstream.base_url)  # read once, as httpx did: not per request
        self._urls: dict[str, URL] = {}

    async def aclose(self) -> None:
        await self._session.close()

    def url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = URL(f"{self.base_url}{path}")
            if len(self._urls) < _MAX_CACHED_URLS:  # parsed once per fixed path, not per request
                self._urls[path] = url
        return url

    def request_headers(self, raw: list[tuple[bytes, bytes]], json_body: bool) -> list[tuple[str, str]]:
        """The client's headers minus hop-by-hop ones; the operator's key when the client sent
        none. A non-ASCII value is a 400 naming the header."""
        headers = []
        has_auth = False
        for name, value in raw:
            if name in _HOP_BYTES:
                continue
            if not value.isascii():
                raise ProxyError(400, f"header {name.decode('latin-1')!r} has a non-ASCII value", "invalid_header")
            has_auth = has_auth or name == b"authorization"
            headers.append((name.decode("latin-1"), value.decode("latin-1")))
        if not has_auth and self.api_key:
            headers.append(("authorization", f"Bearer {self.api_key}"))
        if json_body:
            headers.append(("content-type", "application/json"))
        return headers

    async def send(
        self, method: str, path: str, headers: list[tuple[str, str]], content: bytes | None = None
    ) -> UpstreamResponse:
        """Send and return the streaming response (the caller closes it). Sent once more when a
        pooled connection turns out to be dead before any answer arrived (llama.cpp's server, for
        one, closes a connection after a failed stream). 504 on timeout, 502 when unreachable."""
        url = self.url(path)
        try:
            try:
                response = await self._request(method, url, headers, content)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                response = await self._request(method, url, headers, content)
        except TimeoutError:
            metrics.UPSTREAM_ERRORS.labels("timeout").inc()
            raise ProxyError(504, f"upstream {self.base_url} timed out", "upstream_timeout", "upstream_error") from None
        except aiohttp.ClientError as exc:
            metrics.UPSTREAM_ERRORS.labels("unreachable").inc()
            raise ProxyError(
                502,
                f"upstream {self.base_url} unreachable: {type(exc).__name__}",
                "upstream_unreachable",
                "upstream_error",
            ) from None
        return UpstreamResponse(response)

    def _request(
        self, method: str, url: URL, headers: list[tuple[str, str]], content: bytes | None
    ) -> Awaitable[aiohttp.ClientResponse]:
        return self._session.request(
            method, url, headers=headers, data=content, allow_redirects=False, proxy=self._proxy
        )

    async def read(self, response: UpstreamResponse) -> bytes:
        """The whole (decoded) body, at most `max_response_bytes`; closes the response."""
        limit = self.max_response_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    metrics.UPSTREAM_ERRORS.labels("too_large").inc()
                    raise ProxyError(
                        502,
                        f"upstream answer exceeds max_response_bytes ({limit})",
                        "upstream_too_large",
                        "upstream_error",
                    )
                chunks.append(chunk)
        except TransferError as exc:
            metrics.UPSTREAM_ERRORS.labels("read").inc()
            raise ProxyError(
                502, f"upstream answer broke off: {type(exc).__name__}", "upstream_incomplete", "upstream_error"
            ) from None
        finally:
            await response.aclose()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def answer_headers(response: UpstreamResponse) -> dict[str, str]:
    """The upstream's answer headers a client may see."""
    return {k.lower(): v for k, v in response.headers.items() if k.lower() not in HOP}


def _env_proxy(base_url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to the upstream (NO_PROXY honoured), as httpx read it."""
    parts = urlsplit(base_url)
    if parts.hostname is None or proxy_bypass(parts.hostname):
        return None
    return getproxies().get(parts.scheme)
