"""The Starlette floor for tests/perf/compare.py: the least a framework-based filtering proxy does.

Starlette + a pooled upstream client: parse the body, drop the blocked tools, re-serialise,
forward; stream answers are relayed as raw bytes. By default it runs on uvicorn (uvloop,
httptools, no access log) with httpx, the stack of the original floor; `--server granian` and
`--client aiohttp` and `--framework none` (a bare ASGI callable) are the trials of docs/results/perf_compare.md (which server, which client costs least).

    python tests/perf/floor.py --port 9001 --upstream http://127.0.0.1:9000/v1 --block a,b \
        [--server uvicorn|granian] [--client httpx|aiohttp] [--framework starlette|none]
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


def build(upstream: str, blocked: frozenset[str], client: str = "httpx") -> Starlette:
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state["send"], close = (aiohttp_client if client == "aiohttp" else httpx_client)(upstream)
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
                    state["send"], state["close"] = (aiohttp_client if client == "aiohttp" else httpx_client)(upstream)
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
    parser.add_argument("--client", choices=("httpx", "aiohttp"), default="httpx")
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
