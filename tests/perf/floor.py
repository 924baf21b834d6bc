"""The Starlette floor for tests/perf/compare.py: the least a framework-based filtering proxy does.

Starlette + a pooled upstream client: parse the body, drop the blocked tools, re-serialise,
forward; stream answers are relayed as raw bytes. By default it runs on uvicorn (uvloop,
httptools, no access log) with httpx, the stack of the original floor; `--server granian` and
`--client aiohttp|raw` (`raw`: asyncio protocols + httptools, the shape of server/http1.py) and
`--framework none` (a bare ASGI callable) are the trials of docs/results/perf_compare.md (which
server, which client costs least).

    python tests/perf/floor.py --port 9001 --upstream http://127.0.0.1:9000/v1 --block a,b \
        [--server uvicorn|granian] [--client httpx|aiohttp|raw] [--framework starlette|none]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

# send(body) -> (status, streamed?, raw body or byte iterator, close)
Sender = Callable[[bytes], Awaitable[tuple[int, bool, Any, Callable[[], Awaitable[None]]]]]


def httpx_client(upstream: str) -> tuple[Sender, Callable[[], Awaitable[None]]]:
    import httpx

    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    client = httpx.AsyncClient(base_url=upstream, limits=limits, timeout=60)

    async def send(body: bytes):
        answer = await client.send(
            client.build_request(
                "POST", "/chat/completions", content=body, headers={"content-type": "application/json"}
            ),
            stream=True,
        )
        if "text/event-stream" in answer.headers.get("content-type", ""):
            return answer.status_code, True, answer.aiter_raw(), answer.aclose
        raw = await answer.aread()
        await answer.aclose()
        return answer.status_code, False, raw, None

    return send, client.aclose


def aiohttp_client(upstream: str) -> tuple[Sender, Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=512),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=60),
    )
    url = f"{upstream}/chat/completions"

    async def send(body: bytes):
        answer = await session.post(url, data=body, headers={"content-type": "application/json"})
        if "text/event-stream" in answer.headers.get("content-type", ""):

            async def close() -> None:
                answer.release()

            return answer.status, True, answer.content.iter_any(), close
        raw = await answer.read()
        answer.release()
        return answer.status, False, raw, None

    return send, session.close


def raw_client(upstream: str) -> tuple[Sender, Callable[[], Awaitable[None]]]:
    """Trial only: a keep-alive pool of asyncio protocols parsing answers with httptools."""
    import asyncio
    from urllib.parse import urlsplit

    import httptools

    parts = urlsplit(upstream)
    host, port = parts.hostname, parts.port or 80
    head = (
        f"POST {parts.path}/chat/completions HTTP/1.1\r\nhost: {parts.netloc}\r\n"
        "content-type: application/json\r\ncontent-length: "
    ).encode()
    idle: list[Any] = []

    class Conn(asyncio.Protocol):
        def __init__(self) -> None:
            self.parser = httptools.HttpResponseParser(self)
            self.done: asyncio.Future | None = None
            self.body: list[bytes] = []
            self.ctype = b""
            self.header = b""

        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_header(self, name: bytes, value: bytes) -> None:
            if name.lower() == b"content-type":
                self.ctype = value

        def on_body(self, body: bytes) -> None:
            self.body.append(body)

        def on_message_complete(self) -> None:
            done, self.done = self.done, None
            body, self.body = b"".join(self.body), []
            done.set_result((self.parser.get_status_code(), body, self.parser.should_keep_alive()))

        def connection_lost(self, exc: Any) -> None:
            if self.done and not self.done.done():
                self.done.set_exception(ConnectionError("upstream closed"))

    async def send(body: bytes):
        loop = asyncio.get_running_loop()
        conn = idle.pop() if idle else (await loop.create_connection(Conn, host, port))[1]
        conn.done = loop.create_future()
        conn.transport.write(b"%s%d\r\n\r\n%s" % (head, len(body), body))
        status, raw, keep = await conn.done
        if keep:
            idle.append(conn)
        else:
            conn.transport.close()
        if b"event-stream" in conn.ctype:

            async def chunks() -> AsyncIterator[bytes]:
                yield raw

            async def close() -> None:
                pass

            return status, True, chunks(), close
        return status, False, raw, None

    async def close() -> None:
        for conn in idle:
            conn.transport.close()

    return send, close


CLIENTS = {"httpx": httpx_client, "aiohttp": aiohttp_client, "raw": raw_client}


def build(upstream: str, blocked: frozenset[str], client: str = "httpx") -> Starlette:
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state["send"], close = CLIENTS[client](upstream)
        yield
        await close()

    async def chat(request: Request) -> Response:
        body = orjson.loads(await request.body())
        if body.get("tools"):
            body["tools"] = [t for t in body["tools"] if t["function"]["name"] not in blocked]
        status, streamed, answer, close = await state["send"](orjson.dumps(body))
        if streamed:
            return StreamingResponse(
                answer, status_code=status, media_type="text/event-stream", background=BackgroundTask(close)
            )
        return Response(answer, status_code=status, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)


def build_asgi(upstream: str, blocked: frozenset[str], client: str = "httpx") -> Callable:
    """The same forwarder as a bare ASGI callable: what Starlette's routing and Request cost."""
    state: dict[str, Any] = {}
    json_head = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}

    async def app(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    state["send"], state["close"] = CLIENTS[client](upstream)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await state["close"]()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = orjson.loads(b"".join(chunks))
        if body.get("tools"):
            body["tools"] = [t for t in body["tools"] if t["function"]["name"] not in blocked]
        status, streamed, answer, close = await state["send"](orjson.dumps(body))
        if streamed:
            await send(
                {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/event-stream")]}
            )
            async for chunk in answer:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            await close()
            return
        await send(json_head if status == 200 else {**json_head, "status": status})
        await send({"type": "http.response.body", "body": answer})

    return app


def from_env() -> Any:
    """The app for granian (`--factory floor:from_env`), configured by main() through the environment."""
    make = build_asgi if os.environ["FLOOR_FRAMEWORK"] == "none" else build
    return make(
        os.environ["FLOOR_UPSTREAM"],
        frozenset(filter(None, os.environ["FLOOR_BLOCK"].split(","))),
        os.environ["FLOOR_CLIENT"],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--block", default="")
    parser.add_argument("--server", choices=("uvicorn", "granian"), default="uvicorn")
    parser.add_argument("--client", choices=("httpx", "aiohttp", "raw"), default="httpx")
    parser.add_argument("--framework", choices=("starlette", "none"), default="starlette")
    args = parser.parse_args()
    if args.server == "granian":
        os.environ.update(
            FLOOR_UPSTREAM=args.upstream,
            FLOOR_BLOCK=args.block,
            FLOOR_CLIENT=args.client,
            FLOOR_FRAMEWORK=args.framework,
        )
        granian = str(Path(sys.executable).parent / "granian")
        os.execv(
            granian,
            [
                granian,
                "--interface",
                "asgi",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(args.port),
                "--loop",
                "uvloop",
                "--http",
                "1",
                "--no-ws",
                "--workers",
                "1",
                "--log-level",
                "warning",
                "--working-dir",
                str(Path(__file__).parent),
                "floor:from_env",
            ],
        )
    import uvicorn

    app = (build_asgi if args.framework == "none" else build)(
        args.upstream, frozenset(filter(None, args.block.split(","))), args.client
    )
    uvicorn.run(
        app, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools", access_log=False, log_level="warning"
    )


if __name__ == "__main__":
    main()
