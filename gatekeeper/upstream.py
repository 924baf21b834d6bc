"""The upstream connection pools, the resend rule and the header rules, in one place."""

from __future__ import annotations

import itertools

import httpx

from gatekeeper import metrics
from gatekeeper.config import Upstream
from gatekeeper.errors import ProxyError

# Headers that describe one hop, or that httpx recomputes: never copied across the proxy, either
# way. `x-request-id` stays here too: some servers (llama.cpp's) reject ids that are not UUIDs.
HOP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                 "proxy-authorization", "proxy-connection", "accept-encoding", "content-encoding", "trailer"})
_HOP_BYTES = frozenset(h.encode() for h in HOP) | {b"x-request-id", b"content-type"}

_POOLS = 8  # several small pools, taken in turn (see UpstreamPool)


class UpstreamPool:
    """httpx clients to the upstream. Several small pools taken in turn: httpcore's pool does
    work quadratic in its size on every request, so at high concurrency one big pool costs more
    CPU than the forwarding (tests/perf/RESULTS.md)."""

    def __init__(self, upstream: Upstream) -> None:
        self.base_url = upstream.base_url
        self.api_key = upstream.api_key
        self.max_response_bytes = upstream.max_response_bytes
        pools = min(_POOLS, upstream.max_connections)
        per_pool = upstream.max_connections // pools
        limits = httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool)
        timeout = httpx.Timeout(upstream.timeout_s, connect=10.0)
        self._clients = [httpx.AsyncClient(base_url=upstream.base_url, limits=limits, timeout=timeout)
                         for _ in range(pools)]
        self._turn = itertools.count()
        self._urls: dict[str, httpx.URL] = {}

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    def url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:  # parsed once per path, not per request
            url = self._urls[path] = httpx.URL(f"{self.base_url}{path}")
        return url

    def request_headers(self, raw: list[tuple[bytes, bytes]], json_body: bool) -> list[tuple[bytes, bytes]]:
        """The client's headers minus hop-by-hop ones; the operator's key when the client sent
        none. A non-ASCII value is a 400 naming the header (httpx would fail on it later)."""
        headers = []
        has_auth = False
        for name, value in raw:
            if name in _HOP_BYTES:
                continue
            if not value.isascii():
                raise ProxyError(400, f"header {name.decode('latin-1')!r} has a non-ASCII value", "invalid_header")
            has_auth = has_auth or name == b"authorization"
            headers.append((name, value))
        if not has_auth and self.api_key:
            headers.append((b"authorization", f"Bearer {self.api_key}".encode()))
        if json_body:
            headers.append((b"content-type", b"application/json"))
        return headers

    async def send(self, method: str, path: str, headers: list[tuple[bytes, bytes]],
                   content: bytes | None = None) -> httpx.Response:
        """Send and return the streaming response (the caller closes it). Sent once more when a
        pooled connection turns out to be dead before any answer arrived (llama.cpp's server, for
        one, closes a connection after a failed stream). 504 on timeout, 502 when unreachable."""
        client = self._clients[next(self._turn) % len(self._clients)]
        request = client.build_request(method, self.url(path), content=content, headers=headers)
        try:
            try:
                return await client.send(request, stream=True)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                return await client.send(request, stream=True)
        except httpx.TimeoutException:
            metrics.UPSTREAM_ERRORS.labels("timeout").inc()
            raise ProxyError(504, f"upstream {self.base_url} timed out", "upstream_timeout", "upstream_error") from None
        except httpx.TransportError as exc:
            metrics.UPSTREAM_ERRORS.labels("unreachable").inc()
            raise ProxyError(502, f"upstream {self.base_url} unreachable: {type(exc).__name__}",
                             "upstream_unreachable", "upstream_error") from None

    async def read(self, response: httpx.Response) -> bytes:
        """The whole (decoded) body, at most `max_response_bytes`; closes the response."""
        limit = self.max_response_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    metrics.UPSTREAM_ERRORS.labels("too_large").inc()
                    raise ProxyError(502, f"upstream answer exceeds max_response_bytes ({limit})",
                                     "upstream_too_large", "upstream_error")
                chunks.append(chunk)
        except httpx.HTTPError as exc:
            metrics.UPSTREAM_ERRORS.labels("read").inc()
            raise ProxyError(502, f"upstream answer broke off: {type(exc).__name__}", "upstream_incomplete",
                             "upstream_error") from None
        finally:
            await response.aclose()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def answer_headers(response: httpx.Response) -> dict[str, str]:
    """The upstream's answer headers a client may see."""
    return {k: v for k, v in response.headers.items() if k not in HOP}
