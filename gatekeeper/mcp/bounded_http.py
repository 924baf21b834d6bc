"""The transport to a Streamable HTTP MCP server: what it is sent (only the headers its config
names, and the protocol's own), and the bound on each answer, as gatekeeper.mcp.stdio bounds each
line of a stdio one (`max_message_mb`).

A server gets exactly the headers `mcp.servers.<label>.headers` names, the Streamable HTTP
protocol's own (`PROTOCOL_HEADERS`: the session, the protocol version, the method and name the
SDK mirrors, `Mcp-Param-*`, the resumption id) and the framing ones (`host`, `content-*`,
`accept`, `user-agent`): whatever else a request carries on its way out (a header an SDK
release starts sending, a credential an `.netrc` or an instrumentation adds, anything of the
client's request) is removed here, the one place every request passes, and its name logged.

The SDK's HTTP client bounds each event of an event stream (`max_sse_event_size`, which the
gateway sets to the same bound) but reads an `application/json` answer whole: a server answering
a gigabyte cost the gateway a gigabyte. This transport counts such a body as it arrives and fails
the read past the bound with a StreamError, which the SDK turns into an error for that request
alone (the server's other calls and its connection go on). Compressed answers are not asked
for, and one sent anyway is refused: its size on the wire says nothing of its size unpacked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import httpx2

from gatekeeper.observe import logs

log = logs.get_logger(__name__)

# What the protocol and HTTP framing need, beside the configured headers (lower case).
PROTOCOL_HEADERS = frozenset(
    {
        "host",
        "accept",
        "accept-encoding",  # always identity (below)
        "content-type",
        "content-length",
        "user-agent",
        "connection",
        "cache-control",  # the SDK's event-stream GET: no-store
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "last-event-id",
    }
)
PROTOCOL_PREFIXES = ("mcp-param-",)  # tool arguments the server's schema asks mirrored (SEP-2243)


class AnswerTooLarge(httpx2.StreamError):
    """A server's answer went past the bound (or came compressed, its real size unknown)."""


class BoundedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, with every answer that is not an event stream bounded."""

    def __init__(self, max_bytes: int, configured: Iterable[str] = ()) -> None:
        """`configured`: the names of the headers the server's config gives it."""
        self._inner = httpx2.AsyncHTTPTransport()
        self._max_bytes = max_bytes
        self._allowed = PROTOCOL_HEADERS | {name.lower() for name in configured}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        extra = [n for n in request.headers if n not in self._allowed and not n.startswith(PROTOCOL_PREFIXES)]
        for name in extra:
            del request.headers[name]
        if extra:
            log.info("mcp_headers_removed", headers=extra[:16], count=len(extra))
        request.headers["accept-encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            encoding = response.headers.get("content-encoding", "identity").lower()
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _Bounded(response.stream, self._max_bytes, compressed=encoding != "identity")
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, max_bytes: int, compressed: bool) -> None:
        self._stream, self._max_bytes, self._compressed = stream, max_bytes, compressed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._compressed:
            raise AnswerTooLarge("it sent a compressed answer (asked for none)")
        size = 0
        async for chunk in self._stream:
            size += len(chunk)
            if size > self._max_bytes:
                raise AnswerTooLarge(f"it answered over {self._max_bytes / 2**20:g} MiB (max_message_mb)")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()
