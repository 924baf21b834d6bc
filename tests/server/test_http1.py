"""The proxy's own HTTP/1.1 client (server/http1.py) against real sockets: scripted servers that
answer byte for byte what each test needs, and a real forwarding HTTP proxy."""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import zlib
from collections.abc import Awaitable, Callable

import pytest
import trustme

from gatekeeper.server import http1

Script = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


class Scripted:
    """A server on a loopback port: each request's head and body are read, then `script` writes
    the answer. Counts connections and keeps every request it read."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script, self.tls = script, tls
        self.connections = 0
        self.requests: list[bytes] = []
        self.handlers: set[asyncio.Task] = set()

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        self.origin = f"{'https' if self.tls else 'http'}://localhost:{self.port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for handler in self.handlers:
            handler.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                await self.script(request, writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the test ended
        finally:
            writer.close()


def answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers, f"content-length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def writes(*parts: bytes, close: bool = False) -> Script:
    async def script(request: bytes, writer: asyncio.StreamWriter) -> None:
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.01)
        if close:
            writer.close()

    return script


async def fetch(pool: http1.Pool, target: str = "/v1/x", body: bytes | None = b"{}") -> tuple[int, bytes]:
    got = await pool.request("POST", target, [("content-type", "application/json")], body, wait=5)
    return got.status, b"".join([chunk async for chunk in got.body()])


def pool_for(server: Scripted, **kw: object) -> http1.Pool:
    return http1.Pool(server.origin, **({"max_connections": 8, "read_timeout": 5.0} | kw))  # type: ignore[arg-type]


async def test_a_connection_carries_request_after_request():
    async with Scripted(writes(answer(b'{"ok":1}'))) as server:
        pool = pool_for(server)
        for _ in range(5):
            assert await fetch(pool) == (200, b'{"ok":1}')
        await asyncio.gather(*(fetch(pool) for _ in range(4)))
        pool.close()
    assert server.connections == 4  # one for the sequence, reused by the first of the four at once
    head = server.requests[0].split(b"\r\n\r\n")[0]
    assert head.startswith(b"POST /v1/x HTTP/1.1\r\nhost: localhost:%d\r\n" % server.port)
    assert b"content-length: 2" in head and server.requests[0].endswith(b"\r\n\r\n{}")


async def test_chunked_gzip_and_interim_answers_are_read_whole():
    plain = json.dumps({"answer": list(range(3000))}).encode()
    packed = gzip.compress(plain)
    assert len(packed) > 200
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (packed[:100], packed[100:])) + b"0\r\n\r\n"
    head = (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-encoding: gzip\r\n\r\n"
    )
    async with Scripted(writes(head, chunked[:50], chunked[50:])) as server:
        status, body = await fetch(pool_for(server))
    assert (status, body) == (200, plain)


async def test_a_body_without_length_runs_to_the_close():
    async with Scripted(
        writes(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall ", b"of it", close=True)
    ) as server:
        pool = pool_for(server)
        assert await fetch(pool) == (200, b"all of it")
        assert await fetch(pool) == (200, b"all of it")  # that connection was not kept
    assert server.connections == 2


@pytest.mark.parametrize(
    ("parts", "error"),
    [
        ((b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",), "closed before the answer ended"),
        ((b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",), "closed before the answer ended"),
        ((b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 8\r\n\r\nnot gzip",), "corrupt"),
        ((b"HTTP/1.1 200 OK\r\ncontent-encoding: br\r\ncontent-length: 2\r\n\r\nxx",), "'br'"),
        ((b"SMTP ready\r\n\r\n",), "invalid HTTP answer"),
    ],
)
async def test_an_answer_that_breaks_off_or_is_not_http_is_an_error_never_a_short_body(parts, error):
    async with Scripted(writes(*parts, close=True)) as server:
        with pytest.raises(http1.Broken, match=error):
            await fetch(pool_for(server))


async def test_a_gzip_body_cut_inside_the_stream_is_an_error():
    packed = zlib.compressobj(wbits=31)
    cut = (packed.compress(b"y" * 1000) + packed.flush())[:-8]
    async with Scripted(writes(answer(cut, "content-encoding: gzip"))) as server:
        with pytest.raises(http1.Broken, match="ended early"):
            await fetch(pool_for(server))


async def test_a_connection_the_upstream_closed_while_idle_is_replaced():
    async with Scripted(writes(answer(b"ok"), close=True)) as server:
        pool = pool_for(server)
        assert await fetch(pool) == (200, b"ok")
        await asyncio.sleep(0.05)
        assert await fetch(pool) == (200, b"ok")
    assert server.connections == 2


async def test_silence_past_the_read_timeout_and_a_full_pool_time_out():
    async def silent(request: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3)

    async with Scripted(silent) as server:
        pool = pool_for(server, read_timeout=0.3, max_connections=1)
        with pytest.raises(TimeoutError, match=r"no answer byte for 0\.3 s"):
            await fetch(pool)
        held = asyncio.create_task(fetch(pool))
        await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):
            await pool.request("GET", "/v1/models", [], None, wait=0.1)
        with pytest.raises(TimeoutError):
            await held


async def test_a_slow_answer_that_keeps_sending_is_not_cut():
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    ticks = [b"1\r\n.\r\n"] * 8
    async with Scripted(writes(head, *ticks, b"0\r\n\r\n")) as server:  # 10 ms apart, 90 ms in all
        assert await fetch(pool_for(server, read_timeout=0.05)) == (200, b"." * 8)


async def test_a_large_body_is_read_in_order_with_reading_paused_between():
    big = bytes(range(256)) * 8192  # 2 MiB: more than the buffer the connection keeps
    async with Scripted(writes(answer(big))) as server:
        got = await pool_for(server).request("GET", "/big", [], None, wait=5)
        chunks = []
        async for chunk in got.body():
            chunks.append(chunk)
            await asyncio.sleep(0)
    assert b"".join(chunks) == big and len(chunks) > 1


async def test_nothing_is_listening_is_unreachable():
    async with Scripted(writes()) as server:
        origin = server.origin
    with pytest.raises(http1.Unreachable, match="ConnectionRefused"):
        await fetch(http1.Pool(origin, max_connections=1, read_timeout=1))


async def test_a_plain_http_proxy_gets_the_absolute_target_and_its_credential():
    async with Scripted(writes(answer(b"via proxy"))) as proxy:
        pool = http1.Pool(
            "http://upstream.internal:8000",
            max_connections=2,
            read_timeout=5,
            proxy=f"http://us%40er:p%3Ass@127.0.0.1:{proxy.port}",
        )
        assert await fetch(pool, "/v1/chat/completions") == (200, b"via proxy")
    head = proxy.requests[0].decode()
    assert head.startswith("POST http://upstream.internal:8000/v1/chat/completions HTTP/1.1\r\n")
    assert "host: upstream.internal:8000\r\n" in head
    assert "proxy-authorization: Basic dXNAZXI6cDpzcw==\r\n" in head  # base64("us@er:p:ss")


async def test_a_proxy_that_refuses_the_tunnel_makes_the_upstream_unreachable():
    async with Scripted(writes(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")) as proxy:
        pool = http1.Pool("https://api.example:443", max_connections=1, read_timeout=5, proxy=f"127.0.0.1:{proxy.port}")
        with pytest.raises(http1.Unreachable, match="refused the tunnel: b'403'"):
            await fetch(pool)
    assert proxy.requests[0].startswith(b"CONNECT api.example:443 HTTP/1.1\r\nhost: api.example:443\r\n")


def test_what_the_pool_cannot_use_is_refused_by_name():
    with pytest.raises(ValueError, match="not an http"):
        http1.Pool("ftp://x", max_connections=1, read_timeout=1)
    with pytest.raises(ValueError, match="only an http:// proxy"):
        http1.Pool("http://x", max_connections=1, read_timeout=1, proxy="socks5://127.0.0.1:1080")


@pytest.fixture
def certified(tmp_path, monkeypatch) -> ssl.SSLContext:
    """A server context for `localhost` whose authority the pool trusts, as an operator trusts a
    private one: through SSL_CERT_FILE."""
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost").configure_cert(context)
    return context


async def tunnel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A CONNECT proxy's one connection: open the tunnel it is asked for, then copy both ways."""
    head = await reader.readuntil(b"\r\n\r\n")
    host, _, port = head.split(b" ")[1].decode().rpartition(":")
    far_reader, far_writer = await asyncio.open_connection(host, int(port))
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
        sink.close()

    await asyncio.gather(copy(reader, far_writer), copy(far_reader, writer), return_exceptions=True)


async def test_https_directly_and_through_a_connect_tunnel(certified):
    async with Scripted(writes(answer(b"secret")), tls=certified) as server:
        assert await fetch(pool_for(server)) == (200, b"secret")
        proxy = await asyncio.start_server(tunnel, "127.0.0.1", 0)
        proxied = http1.Pool(
            server.origin,
            max_connections=1,
            read_timeout=5,
            proxy=f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}",
        )
        assert await fetch(proxied) == (200, b"secret")
        assert await fetch(proxied) == (200, b"secret")  # the tunnel kept, as any connection
        proxied.close()
        proxy.close()
    assert server.connections == 2


async def test_a_certificate_the_pool_does_not_trust_makes_the_upstream_unreachable(certified, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE")
    async with Scripted(writes(answer(b"secret")), tls=certified) as server:
        with pytest.raises(http1.Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
            await fetch(pool_for(server))


async def test_bytes_that_answer_no_request_never_reach_the_next_one():
    async def two_answers(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(answer(b"first") + answer(b"smuggled"))

    async with Scripted(two_answers) as server:
        pool = pool_for(server)
        assert await fetch(pool) == (200, b"first")
        assert await fetch(pool) == (200, b"first")  # on a new connection, not "smuggled"
    assert server.connections == 2


async def test_an_endless_head_is_refused():
    async with Scripted(writes(b"HTTP/1.1 200 OK\r\n", *[b"x-filler: " + b"y" * 8000 + b"\r\n"] * 9)) as server:
        with pytest.raises(http1.Broken, match="head exceeds 65536 bytes"):
            await fetch(pool_for(server))


async def test_a_compressed_body_is_decoded_no_further_than_one_byte_past_the_cap():
    bomb = gzip.compress(b"\0" * (50 * 1024 * 1024))  # 50 MiB from about 50 KiB
    async with Scripted(writes(answer(bomb, "content-encoding: gzip"))) as server:
        status, body = await fetch(pool_for(server, max_body=1024 * 1024))
    assert status == 200 and len(body) == 1024 * 1024 + 1
