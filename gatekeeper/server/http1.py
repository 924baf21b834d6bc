"""The proxy's HTTP/1.1 client: a keep-alive pool of connections to one upstream.

Why not a client library: per forwarded request, aiohttp's client took about 100 us of one core
on this project's test host, more than the rest of a bare forwarder together (uvicorn's ASGI
cycle included): that forwarder spent 179 us a request with aiohttp, 77 on asyncio protocols and
httptools (docs/results/perf_compare.md has the trial). It does what the proxy needs and no more:
HTTP/1.1 over TCP or TLS, optionally through an HTTP proxy (`CONNECT` for https), answers parsed
by httptools (the parser uvicorn uses), gzip and deflate decoded. No redirects, no cookies, and
one resend at most: a request whose connection closed before any byte of its answer arrived
(a pooled one whose keep-alive ran out) is sent once more, on a new connection.

    pool = Pool("http://127.0.0.1:8000", max_connections=512, read_timeout=600)
    answer = await pool.request("POST", "/v1/chat/completions", [("content-type", "application/json")], body, wait=600)
    async for chunk in answer.body():   # or `await answer.aclose()` to drop it
        ...
"""

from __future__ import annotations

import asyncio
import base64
import functools
import ssl
import zlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote, urlsplit

import httptools

CONNECT_TIMEOUT_S = 10.0  # opening a connection (and a proxy's tunnel, and TLS)
_HIGH_WATER = 256 * 1024  # body bytes buffered before reading pauses
_LOW_WATER = 64 * 1024
_CHUNK_COST = 64  # what one buffered chunk counts for besides its bytes (a Python object, a slot)
MAX_HEAD_BYTES = 64 * 1024  # an answer's status line and headers (and any bytes in a row without a body byte)
_GZIP = 16 + zlib.MAX_WBITS
_DECODERS = {"gzip": _GZIP, "x-gzip": _GZIP, "deflate": zlib.MAX_WBITS}


class Broken(Exception):
    """The upstream's answer broke off, or was not valid HTTP/1.1."""


class Unreachable(Exception):
    """No connection could be opened (refused, no such host, TLS or proxy failure)."""


class _OutOfStep(Exception):
    """Raised inside the parser to stop it at bytes that answer no request."""


class Pool:
    """Connections to one origin (`scheme://host:port`), at most `max_connections` in use."""

    def __init__(
        self,
        origin: str,
        *,
        max_connections: int,
        read_timeout: float,
        max_body: int = 64 * 1024 * 1024,
        proxy: str | None = None,
    ) -> None:
        """`max_body`: decoded body bytes kept per answer; a compressed body is decoded no
        further than one byte past it (the reader's own cap then refuses the answer)."""
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {origin!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        name = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = name if default_port else f"{name}:{self.port}"
        self._tunnel_to = f"{name}:{self.port}"  # CONNECT names the port, default or not
        self.tls = ssl.create_default_context() if parts.scheme == "https" else None
        self.read_timeout = read_timeout
        self._new = functools.partial(_Connection, max_body)
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: deque[_Connection] = deque()
        self._closed = False
        self._proxy: tuple[str, int, str | None] | None = None
        self._absolute = ""  # the origin, before each request target, when a plain proxy relays
        if proxy is not None:
            given = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            if given.scheme != "http" or not given.hostname:
                raise ValueError("only an http:// proxy is supported")
            auth = None
            if given.username is not None:
                pair = f"{unquote(given.username)}:{unquote(given.password or '')}"
                auth = "Basic " + base64.b64encode(pair.encode()).decode()
            self._proxy = (given.hostname, given.port or 80, auth)
            if self.tls is None:
                self._absolute = f"http://{self.authority}"

    async def request(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes | None, *, wait: float
    ) -> Answer:
        """Send one request; return once the answer's head arrived. `wait` bounds waiting for a
        free connection. TimeoutError, Unreachable or Broken when no answer head comes."""
        fields = [f"{name}: {value}" for name, value in headers]
        line = method + " " + target
        text = line + "".join(fields)
        if "\r" in text or "\n" in text or line.count(" ") != 1:
            # The caller checks what a client sent; this keeps one request one request even so.
            raise ValueError("a line break in a request header or target, or a space in its target")
        head = [f"{method} {self._absolute}{target} HTTP/1.1\r\nhost: {self.authority}\r\n"]
        head += [f"{field}\r\n" for field in fields]
        if self._proxy is not None and self._proxy[2] is not None and self.tls is None:
            head.append(f"proxy-authorization: {self._proxy[2]}\r\n")
        head.append("accept-encoding: gzip, deflate\r\n")
        head.append(f"content-length: {len(body)}\r\n\r\n" if body is not None else "\r\n")
        message = "".join(head).encode()  # a value beyond ASCII goes as UTF-8, as aiohttp sent it
        if body:
            message += body
        if self._slots.locked():
            await asyncio.wait_for(self._slots.acquire(), wait)
        else:
            await self._slots.acquire()
        try:
            while self._idle:
                conn = self._idle.pop()
                if conn.closed:
                    continue
                try:
                    await conn.exchange(message, self.read_timeout)
                except Broken:
                    if conn.answered:
                        raise
                    # Closed while idle (the upstream's keep-alive ran out), or the upstream died
                    # on this very request: sent once more, on a new connection, never on each
                    # idle one in turn.
                    break
                return Answer(self, conn)
            conn = await self._connect()
            await conn.exchange(message, self.read_timeout)
            return Answer(self, conn)
        except BaseException:
            self._slots.release()
            raise

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        host, port = (self.host, self.port) if self._proxy is None else self._proxy[:2]
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                if self._proxy is None or self.tls is None:
                    tls = self.tls if self._proxy is None else None
                    _, conn = await loop.create_connection(self._new, host, port, ssl=tls)
                    return conn
                transport, conn = await loop.create_connection(self._new, host, port)
                try:
                    await conn.tunnel(self._tunnel_to, self._proxy[2])
                    conn.transport = await loop.start_tls(transport, conn, self.tls, server_hostname=self.host)
                except BaseException:  # refused, timed out or cancelled: the proxy's socket is not kept
                    transport.close()
                    raise
                return conn
        except TimeoutError:
            raise Unreachable("connecting timed out") from None
        except (OSError, ssl.SSLError, Broken) as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}") from None

    def _give_back(self, conn: _Connection) -> None:
        self._slots.release()
        if conn.reusable() and not self._closed:
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        """Close the idle connections; those in use close when their answers are given back."""
        self._closed = True
        while self._idle:
            self._idle.pop().close()


class Answer:
    """An answer whose head arrived: its status and headers; its body read once, or dropped."""

    __slots__ = ("_conn", "_pool", "headers", "status")

    def __init__(self, pool: Pool, conn: _Connection) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self.status = conn.status
        self.headers = conn.headers  # lower-cased names; a repeated header keeps its last value

    async def body(self) -> AsyncIterator[bytes]:
        """The decoded body, chunk by chunk, as it arrives; Broken or TimeoutError when it breaks
        off. The connection goes back to the pool at the end, or is closed."""
        conn = self._conn
        assert conn is not None, "an answer's body is read once"
        try:
            while True:
                chunk = conn.next_chunk()
                if chunk is None:
                    await conn.readable()
                elif chunk:
                    yield chunk
                else:
                    return
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool._give_back(conn)

    def __del__(self) -> None:
        # Dropped neither read nor closed (a streamed response whose body never started: its
        # client left first): its slot would be lost for good.
        conn, self._conn = self._conn, None
        if conn is not None and not conn._loop.is_closed():
            self._pool._give_back(conn)


class _Connection(asyncio.Protocol):
    """One connection: a request written, its answer parsed as it arrives."""

    def __init__(self, max_body: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._max_body = max_body
        self._room = 0  # decoded bytes this answer may still add (max_body + 1 at its start)
        self._quiet = 0  # bytes received since the last body byte (the head, trailers): bounded
        self.transport: Any = None
        self.closed = False
        self.answered = False  # a byte of the current answer arrived
        self.status = 0
        self.headers: dict[str, str] = {}
        self._parser = httptools.HttpResponseParser(self)
        self._raw: list[tuple[bytes, bytes]] = []
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._framed = False  # the answer says where it ends (a length, chunks, or no body)
        self._wbits = 0  # the answer's compression (zlib's wbits), 0 for none
        self._decoder: Any = None  # made at its first body byte
        self._done = False  # the whole answer arrived
        self._keep_alive = False  # and the connection may carry another request
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None  # the head, then each wait for body bytes
        self._last = 0.0  # when a byte last arrived
        self._timer: asyncio.TimerHandle | None = None
        self._timeout = 0.0
        self._tunnel_head: bytearray | None = None

    # -- the request side --

    async def exchange(self, message: bytes, timeout: float) -> None:
        """Write the request; wait for the answer's head."""
        self.status, self.headers, self._raw, self._done, self._framed = 0, {}, [], False, False
        self._decoder, self._error, self.answered, self._keep_alive = None, None, False, False
        self._room, self._quiet, self._wbits = self._max_body + 1, 0, 0
        self._timeout, self._last = timeout, self._loop.time()
        self._timer = self._loop.call_at(self._last + timeout, self._check_silence)
        self._waiter = self._loop.create_future()
        self.transport.write(message)
        try:
            await self._waiter
        except BaseException:  # broken, timed out or cancelled: its answer can never be read now
            self.close()
            raise

    def next_chunk(self) -> bytes | None:
        """The next body bytes (those that arrived before a break too); b"" at the end; None when
        none arrived yet."""
        if self._chunks:
            chunk = self._chunks.popleft()
            self._buffered -= len(chunk) + _CHUNK_COST
            if self._paused and self._buffered < _LOW_WATER:
                self._paused = False
                self._last = self._loop.time()  # the silence runs from here, not from the pause
                self.transport.resume_reading()
            return chunk
        if self._error is not None:
            raise self._error
        return b"" if self._done else None

    async def readable(self) -> None:
        self._waiter = self._loop.create_future()
        await self._waiter

    def reusable(self) -> bool:
        return self._done and self._keep_alive and not self._chunks and not self.closed

    def close(self) -> None:
        self.closed = True
        self._stop_timer()
        if self.transport is not None:
            self.transport.close()

    async def tunnel(self, authority: str, auth: str | None) -> None:
        """Ask an HTTP proxy for a tunnel to `authority`; Broken unless it answers 2xx."""
        self._tunnel_head = bytearray()
        self._waiter = self._loop.create_future()
        line = f"CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n"
        self.transport.write((line + (f"proxy-authorization: {auth}\r\n" if auth else "") + "\r\n").encode())
        await self._waiter
        if len(self._tunnel_head) > MAX_HEAD_BYTES:
            raise Broken(f"the proxy's answer exceeds {MAX_HEAD_BYTES} bytes")
        status = bytes(self._tunnel_head).split(b" ", 2)[1:2]
        self._tunnel_head = None
        if not status or not status[0].startswith(b"2"):
            raise Broken(f"the proxy refused the tunnel: {bytes(status[0]) if status else b'?'!r}")

    # -- asyncio.Protocol --

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._tunnel_head is not None:
            self._tunnel_head += data
            if b"\r\n\r\n" in self._tunnel_head or len(self._tunnel_head) > MAX_HEAD_BYTES:
                self._wake()
            return
        if self._done or self._waiter is None:
            # Bytes nobody asked for (a second answer to one request, or bytes while idle): the
            # connection is out of step, and would hand them to the next request. Never reused.
            self._keep_alive = False
            self.close()
            return
        self.answered = True
        self._last = self._loop.time()
        self._quiet += len(data)  # on_body sets it back to 0
        before = len(self._chunks)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # a 101: the upstream switched protocols
            self._fail(Broken("the upstream answered 101 Switching Protocols"))
            self.close()
            return
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # what a callback below raised, if one did
            if isinstance(cause, _OutOfStep):
                self._keep_alive = False
            elif isinstance(cause, Broken):
                self._fail(cause)
            elif isinstance(cause, zlib.error):
                self._fail(Broken(f"the answer's compressed body is corrupt: {cause}"))
            else:
                self._fail(Broken(f"invalid HTTP answer: {exc}"))
            self.close()
            return
        if len(self._chunks) > before + 1:  # many chunks in one read (tiny ones?): kept as one
            merged = [self._chunks.pop() for _ in range(len(self._chunks) - before)]
            self._chunks.append(b"".join(reversed(merged)))
            self._buffered -= (len(merged) - 1) * _CHUNK_COST
        if self._buffered > _HIGH_WATER and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        if self._quiet > MAX_HEAD_BYTES:  # a head, interim answers or trailers without end
            what = "trailers or chunk framing exceed" if self.status else "head exceeds"
            self._fail(Broken(f"the answer's {what} {MAX_HEAD_BYTES} bytes"))
            self.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self._stop_timer()
        if self._done:
            return
        if self.status and not self._framed and exc is None:  # a body that runs to the close
            self._keep_alive = False
            try:
                self.on_message_complete()
            except Broken as broken:
                self._fail(broken)
            return
        reason = f": {type(exc).__name__}" if exc is not None else ""
        self._fail(Broken(f"the connection closed before the answer ended{reason}"))

    def pause_writing(self) -> None:  # a request body is written whole; nothing to pause
        pass

    # -- httptools callbacks --

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.status:  # not a trailer, after a chunked body: those are not kept
            self._raw.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if not 100 <= status <= 599:
            raise Broken(f"the answer's status is {status}")
        if status < 200:  # an interim answer: the real one follows
            self._raw = []
            return
        self.status = status
        self._keep_alive = self._parser.should_keep_alive()  # read now: the parser forgets it at the end
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in self._raw}
        self.headers = headers
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._framed = "content-length" in headers or chunked or status in (204, 304)
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding in _DECODERS:
            self._wbits = _DECODERS[encoding]
        elif encoding not in ("", "identity"):
            raise Broken(f"the answer is encoded as {encoding!r}, which the proxy cannot read")
        self._wake()

    def on_message_begin(self) -> None:
        if self._done:  # a second answer in the bytes of the first: see data_received
            raise _OutOfStep

    def on_body(self, body: bytes) -> None:
        self._quiet = 0
        if self._wbits:
            body = self._decode(body)
            if not body:
                return
        self._chunks.append(body)
        self._buffered += len(body) + _CHUNK_COST
        self._wake()

    def on_message_complete(self) -> None:
        if not self.status:
            return  # the end of an interim answer
        if self._decoder is not None and self._room > 0:  # none when the body was empty
            rest = self._decoder.flush()
            if rest:
                self._chunks.append(rest)
                self._buffered += len(rest) + _CHUNK_COST
            if not self._decoder.eof:
                raise Broken("the answer's compressed body ended early")
        self._done = True
        self._stop_timer()
        self._wake()

    # -- internals --

    def _decode(self, data: bytes) -> bytes:
        """Compressed body bytes decoded, no further than one byte past the cap (a small body may
        decode to gigabytes; the reader's cap then refuses it)."""
        out = []
        while data and self._room > 0:
            if self._decoder is None or (self._decoder.eof and self._wbits == _GZIP):
                # The first bytes, or a gzip body's next member (gzip allows several, read as one).
                # "deflate" is meant to carry zlib's header, but some servers send raw deflate
                # (aiohttp read it too): zlib's header has compression method 8 in its low bits.
                raw = self._wbits == zlib.MAX_WBITS and data[0] & 0x0F != 8
                self._decoder = zlib.decompressobj(-zlib.MAX_WBITS if raw else self._wbits)
            elif self._decoder.eof:  # bytes after a deflate stream's end: ignored, as zlib does
                break
            piece = self._decoder.decompress(data, self._room)
            self._room -= len(piece)
            out.append(piece)
            data = self._decoder.unused_data
        return out[0] if len(out) == 1 else b"".join(out)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self._error is None:  # the first cause, not the close that followed it
            self._error = error
        self._stop_timer()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def _check_silence(self) -> None:
        now = self._loop.time()
        if self._paused:  # the reader is slow (it holds reading paused), not the upstream
            self._last = now
        due = self._last + self._timeout
        if now < due:
            self._timer = self._loop.call_at(due, self._check_silence)
            return
        self._timer = None
        self._fail(TimeoutError(f"no answer byte for {self._timeout:g} s"))
        self.close()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
