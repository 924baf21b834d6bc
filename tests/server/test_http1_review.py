"""A hostile or broken upstream, proxy or caller against the proxy's HTTP/1.1 client
(server/http1.py): each test here failed on the pool as first written."""

from __future__ import annotations

import asyncio
import gc
import gzip
import zlib

import pytest

from gatekeeper.server import http1
from tests.server.test_http1 import Scripted, answer, certified, fetch, pool_for, writes

__all__ = ["certified"]  # a fixture


@pytest.fixture(autouse=True)
async def loop_errors():
    """What reaches the event loop's exception handler (a protocol callback that raised, a
    future whose exception nobody retrieved): nothing, in every test here."""
    seen: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: seen.append(context))
    yield seen
    gc.collect()
    await asyncio.sleep(0.01)
    assert seen == []


async def behind_a_proxy(handler) -> tuple[asyncio.Server, http1.Pool]:
    """A proxy on a loopback port that `handler` plays, and a pool to an https upstream behind it."""
    proxy = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    return proxy, http1.Pool("https://api.example", max_connections=1, read_timeout=5, proxy=f"127.0.0.1:{port}")


async def test_a_tunnel_the_proxy_refused_does_not_leave_its_connection_open():
    closed = asyncio.Event()

    async def refusing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n")
        if await reader.read() == b"":
            closed.set()
        writer.close()

    proxy, pool = await behind_a_proxy(refusing)
    with pytest.raises(http1.Unreachable, match="407"):
        await fetch(pool)
    await asyncio.wait_for(closed.wait(), 2)  # the pool hung up; it did not keep the socket
    proxy.close()


async def test_the_read_timeout_does_not_run_while_the_reader_holds_reading_paused():
    big = b"x" * (8 * 1024 * 1024)
    async with Scripted(writes(answer(big))) as server:
        got = await pool_for(server, read_timeout=0.2).request("GET", "/big", [], None, wait=5)
        chunks = []
        async for chunk in got.body():
            if not chunks:
                await asyncio.sleep(0.6)  # a slow client: the upstream is paused, not silent
            chunks.append(chunk)
    assert b"".join(chunks) == big


async def test_raw_deflate_without_a_zlib_header_is_decoded():
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = packer.compress(b"hello " * 100) + packer.flush()
    async with Scripted(writes(answer(raw, "content-encoding: deflate"))) as server:
        assert await fetch(pool_for(server)) == (200, b"hello " * 100)


async def test_zlib_deflate_is_still_decoded():
    async with Scripted(writes(answer(zlib.compress(b"hello " * 100), "content-encoding: deflate"))) as server:
        assert await fetch(pool_for(server)) == (200, b"hello " * 100)


async def test_a_gzip_body_of_several_members_is_read_whole_never_cut_at_the_first():
    packed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert gzip.decompress(packed) == b"first second"
    async with Scripted(writes(answer(packed, "content-encoding: gzip"))) as server:
        assert await fetch(pool_for(server)) == (200, b"first second")


async def test_a_second_gzip_member_is_decoded_within_the_cap_too():
    bomb = gzip.compress(b"ok") + gzip.compress(b"\0" * (8 * 1024 * 1024))
    async with Scripted(writes(answer(bomb, "content-encoding: gzip"))) as server:
        status, body = await fetch(pool_for(server, max_body=1024 * 1024))
    assert status == 200 and len(body) == 1024 * 1024 + 1


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 204 No Content\r\ncontent-encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-encoding: deflate\r\ncontent-length: 0\r\n\r\n",
    ],
)
async def test_an_empty_body_marked_compressed_is_an_empty_body(head):
    async with Scripted(writes(head)) as server:
        pool = pool_for(server)
        status, body = await fetch(pool)
        assert body == b""
        assert await fetch(pool) == (status, b"")  # and the connection stayed usable
    assert server.connections == 1


async def test_a_chunked_answer_cut_short_is_an_error_however_the_header_is_cased():
    parts = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n",)
    async with Scripted(writes(*parts, close=True)) as server:
        with pytest.raises(http1.Broken, match="closed before the answer ended"):
            await fetch(pool_for(server))


async def test_endless_trailers_are_bounded_like_a_head():
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n"
    trailers = [b"x-trailer: " + b"y" * 8000 + b"\r\n"] * 20
    async with Scripted(writes(head, *trailers, b"\r\n")) as server:
        with pytest.raises(http1.Broken, match="trailers or chunk framing exceed 65536 bytes"):
            await fetch(pool_for(server))


async def test_a_switching_protocols_answer_is_broken_without_a_fatal_error_in_the_loop(loop_errors):
    head = b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\nxyz"
    async with Scripted(writes(head)) as server:
        with pytest.raises(http1.Broken):
            await fetch(pool_for(server))
    await asyncio.sleep(0.05)
    assert loop_errors == []  # no "Fatal error: protocol.data_received() call failed"


async def test_status_zero_is_not_an_answer():
    async with Scripted(writes(b"HTTP/1.1 000 Nothing\r\ncontent-length: 2\r\n\r\nok")) as server:
        with pytest.raises(http1.Broken):
            await fetch(pool_for(server))


async def test_a_line_break_in_a_header_never_reaches_the_wire():
    async with Scripted(writes(answer(b"ok"))) as server:
        pool = pool_for(server)
        with pytest.raises(ValueError, match="line break"):
            await pool.request("GET", "/x", [("authorization", "Bearer k\r\nx-injected: 1")], None, wait=1)
        with pytest.raises(ValueError, match="line break"):
            await pool.request("GET", "/x HTTP/1.1\r\nx-injected: 1\r\n\r\nGET /y", [], None, wait=1)
        with pytest.raises(ValueError, match="space"):
            await pool.request("GET", "/a b", [], None, wait=1)
        assert await fetch(pool) == (200, b"ok")  # the refusals held no slot
    assert not any(b"x-injected" in request for request in server.requests)


async def test_a_header_value_beyond_latin1_is_sent_as_utf8_not_a_crash():
    async with Scripted(writes(answer(b"ok"))) as server:
        got = await pool_for(server).request("GET", "/x", [("authorization", "Bearer \u2010key")], None, wait=1)
        await got.aclose()
    assert "authorization: Bearer \u2010key\r\n".encode() in server.requests[0]


async def test_an_unanswered_request_is_sent_again_at_most_once():
    async def dies(request: bytes, writer: asyncio.StreamWriter) -> None:
        if b"/ok" in request:
            writer.write(answer(b"ok"))
        else:
            writer.close()  # a worker that crashes on this request, before a byte of the answer

    async with Scripted(dies) as server:
        pool = pool_for(server)
        await asyncio.gather(*(fetch(pool, "/ok") for _ in range(4)))  # four idle connections
        with pytest.raises(http1.Broken):
            await fetch(pool, "/crash")
    assert sum(b"/crash" in request for request in server.requests) == 2  # not once per idle connection


async def test_a_connection_given_back_after_the_pool_closed_is_closed():
    release = asyncio.Event()

    async def late(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        await release.wait()
        writer.write(b"ok")

    async with Scripted(late) as server:
        pool = pool_for(server)
        got = await pool.request("GET", "/x", [], None, wait=1)
        pool.close()  # a reload: the old pool goes while an answer is still on its way
        release.set()
        assert b"".join([chunk async for chunk in got.body()]) == b"ok"
        assert not pool._idle


async def test_an_answer_dropped_unread_gives_its_slot_back():
    async with Scripted(writes(answer(b"ok"))) as server:
        pool = pool_for(server, max_connections=1)
        got = await pool.request("GET", "/x", [], None, wait=1)
        del got  # e.g. a streamed response whose body iterator never started (the client left)
        gc.collect()
        assert await fetch(pool) == (200, b"ok")


async def test_a_request_cancelled_at_each_step_holds_no_slot():
    async def slow(request: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.1)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n")
        await asyncio.sleep(0.1)
        writer.write(b"0\r\n\r\n")

    async with Scripted(slow) as server:
        pool = pool_for(server, max_connections=1)
        waiting = asyncio.create_task(fetch(pool))  # holds the slot, waiting for the head
        queued = asyncio.create_task(fetch(pool))  # waits for a slot
        await asyncio.sleep(0.02)
        queued.cancel()
        waiting.cancel()
        await asyncio.gather(waiting, queued, return_exceptions=True)
        got = await pool.request("GET", "/x", [], None, wait=1)
        body = got.body()
        assert await anext(body) == b"ok"
        streaming = asyncio.create_task(anext(body))
        await asyncio.sleep(0.02)
        streaming.cancel()  # while the body streams
        await asyncio.gather(streaming, return_exceptions=True)
        await body.aclose()
        assert await fetch(pool) == (200, b"ok")


async def test_a_proxy_answer_without_end_is_bounded():
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n" + b"x-filler: yyyyyyyyyyyyyyyy\r\n" * 4000)
        await reader.read()
        writer.close()

    proxy, pool = await behind_a_proxy(endless)
    with pytest.raises(http1.Unreachable, match="exceeds"):
        await asyncio.wait_for(fetch(pool), 3)  # not at the 10 s connect timeout
    proxy.close()


async def test_a_request_cancelled_while_the_proxy_opens_the_tunnel_closes_its_socket():
    asked, closed = asyncio.Event(), asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        asked.set()
        if await reader.read() == b"":
            closed.set()
        writer.close()

    proxy, pool = await behind_a_proxy(slow)
    request = asyncio.create_task(fetch(pool))
    await asyncio.wait_for(asked.wait(), 2)
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)
    await asyncio.wait_for(closed.wait(), 2)
    proxy.close()


async def test_many_tiny_chunks_pause_reading_as_soon_as_their_bytes_would():
    tiny = b"1\r\nx\r\n" * 100_000
    async with Scripted(writes(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", tiny, b"0\r\n\r\n")) as server:
        got = await pool_for(server).request("GET", "/x", [], None, wait=1)
        await asyncio.sleep(0.3)  # the reader reads nothing yet
        held = len(got._conn._chunks)  # type: ignore[union-attr]
        assert held < 10_000  # each one a Python object: 100 000 of them take ~5 MB, not 100 KB
        assert b"".join([chunk async for chunk in got.body()]) == b"x" * 100_000


async def test_a_certificate_for_another_name_makes_the_upstream_unreachable(certified):
    async with Scripted(writes(answer(b"secret")), tls=certified) as server:
        pool = http1.Pool(f"https://127.0.0.1:{server.port}", max_connections=1, read_timeout=5)
        with pytest.raises(http1.Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
            await fetch(pool)


async def test_a_proxy_that_closes_or_says_200_with_a_body_leaves_the_upstream_unreachable(certified):
    for script in (writes(close=True), writes(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", close=True)):
        async with Scripted(script) as proxy:
            pool = http1.Pool("https://localhost:1", max_connections=1, read_timeout=5, proxy=f"127.0.0.1:{proxy.port}")
            with pytest.raises(http1.Unreachable):
                await asyncio.wait_for(fetch(pool), 3)


async def test_interim_answers_without_end_are_bounded():
    async with Scripted(writes(*[b"HTTP/1.1 100 Continue\r\n\r\n" * 1000] * 5)) as server:
        with pytest.raises(http1.Broken, match="head exceeds 65536"):
            await fetch(pool_for(server))


async def test_an_idle_connection_past_the_read_timeout_is_reused_without_a_stale_timer():
    async with Scripted(writes(answer(b"ok"))) as server:
        pool = pool_for(server, read_timeout=0.1)
        assert await fetch(pool) == (200, b"ok")
        await asyncio.sleep(0.25)
        assert await fetch(pool) == (200, b"ok")
    assert server.connections == 1


async def test_a_body_read_only_in_part_never_reaches_the_next_request():
    async with Scripted(writes(answer(b"a" * 300_000), close=False)) as server:
        pool = pool_for(server)
        got = await pool.request("GET", "/x", [], None, wait=1)
        body = got.body()
        await anext(body)
        await body.aclose()  # the client left mid-answer
        assert await fetch(pool) == (200, b"a" * 300_000)
    assert server.connections == 2
