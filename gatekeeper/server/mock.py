"""An upstream in process, as httpx's `MockTransport` is a transport: a handler function answers
each `UpstreamRequest`, so the proxy's whole pipeline runs without a port.

    def handler(request: UpstreamRequest) -> MockAnswer:
        return MockAnswer.json({"choices": [...]})          # or MockAnswer.sse(chunk, chunk, ...)

    app = create_app(gk, upstream=MockUpstream(handler, protocols=("chat",)))

Answers go through the same reading as HTTP ones (`ByteAnswer`: the size cap, SSE framing), so a
mock can send exactly the bytes a hostile upstream would, split where it likes.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import orjson

from gatekeeper.server.upstream import ByteAnswer, UpstreamRequest

_DEFAULT_LIMIT = 64 * 1024 * 1024


class MockAnswer(ByteAnswer):
    """Status, headers and the body as the chunks it arrives in (one `aiter_bytes` item each)."""

    __slots__ = ("_chunks", "_headers", "_status", "closed")

    def __init__(
        self,
        chunks: bytes | list[bytes] = b"",
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        limit: int = _DEFAULT_LIMIT,
    ) -> None:
        super().__init__(limit)
        self._chunks = [chunks] if isinstance(chunks, bytes) else list(chunks)
        self._status = status
        self._headers = dict(headers or {})
        self.closed = False

    @classmethod
    def json(cls, doc: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> MockAnswer:
        return cls(orjson.dumps(doc), status, {"content-type": "application/json", **(headers or {})})

    @classmethod
    def sse(cls, *docs: Any, done: bool = True, headers: Mapping[str, str] | None = None) -> MockAnswer:
        """One chunk per event: a str is sent as the data as it is, anything else as JSON."""
        chunks = [b"data: " + (d.encode() if isinstance(d, str) else orjson.dumps(d)) + b"\n\n" for d in docs]
        if done:
            chunks.append(b"data: [DONE]\n\n")
        return cls(chunks, 200, {"content-type": "text/event-stream", **(headers or {})})

    @property
    def status_code(self) -> int:
        return self._status

    def raw_headers(self) -> Mapping[str, str]:
        return self._headers

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


Handler = Callable[[UpstreamRequest], "MockAnswer | Awaitable[MockAnswer]"]


class MockUpstream:
    """An `Upstream` whose answers come from `handler` (sync or async); every request is kept in
    `requests`. `protocols`: the client protocols it speaks natively (the rest are translated)."""

    def __init__(self, handler: Handler, protocols: tuple[str, ...] = ("chat",)) -> None:
        self.handler = handler
        self.protocols = protocols
        self.requests: list[UpstreamRequest] = []
        self.closed = False

    async def send(self, request: UpstreamRequest) -> MockAnswer:
        self.requests.append(request)
        answer = self.handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    async def aclose(self) -> None:
        self.closed = True
