"""The true floor for tests/perf/compare.py: what Python itself costs to forward a gated request.

The smallest forwarder that does the proxy's job, written on asyncio protocols (uvloop) with
httptools and no framework: parse the request body (orjson), drop the blocked tools, forward it
over a kept-alive upstream connection, relay the answer (a plain body with its length, a stream
chunk by chunk as it arrives). No coroutine runs per request: the parser callbacks do the work,
and a task is created only to open a new upstream connection. It keeps no error handling beyond
closing the client's connection, no headers beyond content-type, no answer enforcement: it is a
lower bound to compare against, not a proxy to use.

    python tests/perf/floor_asyncio.py --port 9002 --upstream http://127.0.0.1:9000/v1 --block a,b
"""

from __future__ import annotations

import argparse
import asyncio
from urllib.parse import urlsplit

import httptools
import orjson
import uvloop


class Upstream(asyncio.Protocol):
    """One kept-alive upstream connection, serving one client request at a time."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.client: Front | None = None
        self.chunks: list[bytes] = []
        self.streamed = False
        self.content_type = b"application/json"

    # -- used by the front end
    def send(self, client: Front, request: bytes) -> None:
        self.client, self.chunks, self.streamed, self.content_type = client, [], False, b"application/json"
        self.transport.write(request)  # type: ignore[union-attr]

    # -- asyncio / httptools callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.fail()

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self.content_type = value

    def on_headers_complete(self) -> None:
        # A chunked answer (a stream) is relayed as it arrives; a sized one is sent whole.
        if self.parser.get_status_code() == 200 and self.content_type.startswith(b"text/event-stream"):
            self.streamed = True
            self.client.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"  # type: ignore[union-attr]
                b"transfer-encoding: chunked\r\n\r\n"
            )

    def on_body(self, body: bytes) -> None:
        if self.streamed:
            self.client.write(b"%x\r\n%b\r\n" % (len(body), body))  # type: ignore[union-attr]
        else:
            self.chunks.append(body)

    def on_message_complete(self) -> None:
        client, self.client = self.client, None
        if self.streamed:
            client.write(b"0\r\n\r\n")  # type: ignore[union-attr]
        else:
            body = b"".join(self.chunks)
            status = self.parser.get_status_code()
            client.write(
                b"HTTP/1.1 %d OK\r\ncontent-type: %b\r\ncontent-length: %d\r\n\r\n%b"  # type: ignore[union-attr]
                % (status, self.content_type, len(body), body)
            )
        if self.parser.should_keep_alive():
            self.pool.idle.append(self)
        else:
            self.transport.close()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.pool.idle:
            self.pool.idle.remove(self)
        self.fail()

    def fail(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


class Pool:
    def __init__(self, host: str, port: int, path: str) -> None:
        self.host, self.port = host, port
        self.head = (
            f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\ncontent-length: "
        ).encode()
        self.idle: list[Upstream] = []

    def forward(self, client: Front, body: bytes) -> None:
        request = b"%b%d\r\n\r\n%b" % (self.head, len(body), body)
        if self.idle:
            self.idle.pop().send(client, request)
        else:
            asyncio.get_running_loop().create_task(self._connect_and_send(client, request))

    async def _connect_and_send(self, client: Front, request: bytes) -> None:
        try:
            _, conn = await asyncio.get_running_loop().create_connection(lambda: Upstream(self), self.host, self.port)
        except OSError:
            client.close()
            return
        conn.send(client, request)


class Front(asyncio.Protocol):
    """One client connection: parse each request, gate its tools, hand it to the pool."""

    pool: Pool
    blocked: frozenset[str]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.parser = httptools.HttpRequestParser(self)
        self.chunks: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        raw, self.chunks = b"".join(self.chunks), []
        try:
            body = orjson.loads(raw)
            tools = body.get("tools")
            if tools:
                body["tools"] = [t for t in tools if t["function"]["name"] not in self.blocked]
            out = orjson.dumps(body)
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
            self.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            return
        self.pool.forward(self, out)

    def write(self, data: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        self.transport.close()


async def serve(port: int, upstream: str, blocked: frozenset[str]) -> None:
    parts = urlsplit(upstream)
    Front.pool = Pool(parts.hostname or "127.0.0.1", parts.port or 80, parts.path.rstrip("/") + "/chat/completions")
    Front.blocked = blocked
    server = await asyncio.get_running_loop().create_server(Front, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--block", default="")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.upstream, frozenset(filter(None, args.block.split(",")))))


if __name__ == "__main__":
    main()
