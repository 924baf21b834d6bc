"""`gatekeeper serve`'s HTTP protocol (server/http_server.py): a plain answer goes out in one write
(head and body), and everything else uvicorn does is unchanged: a stream's head is not held for
its first event, `Expect: 100-continue`, HEAD, pipelined requests, `Connection: close`.

A real uvicorn server on a loopback port, raw sockets as clients. The protocol under test is
subclassed only to record its transport's writes (each still reaches the socket)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import pytest
import uvicorn
from scripted import free_port
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gatekeeper.server.http_server import HttpToolsOneWrite

BODY = b'{"ok": true}'
go_on = threading.Event()  # the stream's first event waits for the client to have the head


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        while not go_on.is_set():  # the head must reach the client before this event exists
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    answer = body or BODY
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


def recording(protocol: type[HttpToolsProtocol]) -> tuple[type[HttpToolsProtocol], list[bytes]]:
    """`protocol`, with every write its transport makes recorded (`writelines` as one)."""
    writes: list[bytes] = []

    class Recorded:
        def __init__(self, transport: asyncio.Transport) -> None:
            self._transport = transport

        def write(self, data: bytes) -> None:
            writes.append(bytes(data))
            self._transport.write(data)

        def writelines(self, chunks: Any) -> None:
            chunks = [bytes(c) for c in chunks]
            writes.append(b"".join(chunks))
            self._transport.writelines(chunks)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._transport, name)

    class Recording(protocol):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(Recorded(transport))  # type: ignore[arg-type]

    return Recording, writes


class Server:
    def __init__(self, protocol: type[HttpToolsProtocol]) -> None:
        self.protocol, self.writes = recording(protocol)
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", http=self.protocol)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> Server:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return sock


def read_answer(sock: socket.socket, buffered: bytearray) -> tuple[bytes, bytes]:
    """One answer with a Content-Length: (its head, its body); what follows stays in `buffered`."""
    while b"\r\n\r\n" not in buffered:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-head: {bytes(buffered)!r}"
        buffered += chunk
    head, _, rest = bytes(buffered).partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    buffered[:] = rest[length:]
    return head, rest[:length]


def post(path: str = "/", body: bytes = b"", extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n%s\r\n%s" % (path.encode(), len(body), extra, body)


@pytest.mark.parametrize("protocol, writes", [(HttpToolsOneWrite, 1), (HttpToolsProtocol, 2)])
def test_a_plain_answer_is_one_write_where_uvicorn_makes_two(protocol, writes):
    with Server(protocol) as server, server.connect() as sock:
        sock.sendall(post())
        head, body = read_answer(sock, bytearray())
    assert head.startswith(b"HTTP/1.1 200 OK") and body == BODY
    assert len(server.writes) == writes
    assert b"".join(server.writes).endswith(b"\r\n\r\n" + BODY)


def test_a_streams_head_is_written_before_its_first_event_exists():
    go_on.clear()
    with Server(HttpToolsOneWrite) as server, server.connect() as sock:
        sock.sendall(b"GET /stream HTTP/1.1\r\nhost: t\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got:  # a held head would never come: the event waits for it
            chunk = sock.recv(65536)
            assert chunk, "connection closed"
            got += chunk
        assert got.startswith(b"HTTP/1.1 200 OK") and b"transfer-encoding: chunked" in got
        go_on.set()
        while not got.endswith(b"0\r\n\r\n"):
            got += sock.recv(65536)
    assert b"5\r\nfirst\r\n" in got
    assert server.writes[0].endswith(b"\r\n\r\n")  # the head alone: its body was not ready that turn


def test_expect_100_continue_head_pipelining_and_connection_close_are_uvicorns():
    with Server(HttpToolsOneWrite) as server:
        with server.connect() as sock:  # the client sends its body only after "100 Continue"
            sock.sendall(
                post(body=b"", extra=b"expect: 100-continue\r\n").replace(b"content-length: 0", b"content-length: 4")
            )
            assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
            sock.sendall(b"ping")
            head, body = read_answer(sock, bytearray())
            assert head.startswith(b"HTTP/1.1 200 OK") and body == b"ping"
        with server.connect() as sock:  # two requests in one packet: two answers, in order
            sock.sendall(post(body=b"one") + post(body=b"two"))
            buffered = bytearray()
            assert [read_answer(sock, buffered)[1] for _ in range(2)] == [b"one", b"two"]
        with server.connect() as sock:  # HEAD: the head alone, no body
            sock.sendall(b"HEAD / HTTP/1.1\r\nhost: t\r\n\r\n")
            got = sock.recv(65536)
            assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"\r\n\r\n")
            assert b"content-length: 12" in got
        with server.connect() as sock:  # Connection: close: the answer, then the end
            sock.sendall(post(body=b"bye", extra=b"connection: close\r\n"))
            got = b""
            while chunk := sock.recv(65536):
                got += chunk
            assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"\r\n\r\nbye")
