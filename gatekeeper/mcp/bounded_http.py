"""The bound on each answer of a Streamable HTTP MCP server, as gatekeeper.mcp.stdio bounds each
line of a stdio one (`max_message_mb`).

The SDK's HTTP client bounds each event of an event stream (`max_sse_event_size`, which the
gateway sets to the same bound) but reads an `application/json` answer whole: a server answering
a gigabyte cost the gateway a gigabyte. This transport counts such a body as it arrives and fails
the read past the bound with a StreamError, which the SDK turns into an error for that request
alone (the server's other calls and its connection go on). Compressed answers are not asked
for, and one sent anyway is refused: its size on the wire says nothing of its size unpacked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2


class AnswerTooLarge(httpx2.StreamError):
    """A server's answer went past the bound (or came compressed, its real size unknown)."""


class BoundedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, with every answer that is not an event stream bounded."""

    def __init__(self, max_bytes: int) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._max_bytes = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
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
