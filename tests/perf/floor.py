"""The floor for tests/perf/compare.py: the least a Python tool-filtering proxy can do.

Starlette + pooled httpx on uvicorn (uvloop, httptools, no access log): parse the body, drop the
blocked tools, re-serialise, forward; stream answers are relayed as raw bytes.

    python tests/perf/floor.py --port 9001 --upstream http://127.0.0.1:9000/v1 --block a,b
"""

from __future__ import annotations

import argparse
from contextlib import asynccontextmanager

import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


def build(upstream: str, blocked: frozenset[str]) -> Starlette:
    state: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette):
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
        state["client"] = httpx.AsyncClient(base_url=upstream, limits=limits, timeout=60)
        yield
        await state["client"].aclose()

    async def chat(request: Request) -> Response:
        body = orjson.loads(await request.body())
        if body.get("tools"):
            body["tools"] = [t for t in body["tools"] if t["function"]["name"] not in blocked]
        client = state["client"]
        answer = await client.send(client.build_request("POST", "/chat/completions", content=orjson.dumps(body),
                                                        headers={"content-type": "application/json"}), stream=True)
        if body.get("stream"):
            return StreamingResponse(answer.aiter_raw(), status_code=answer.status_code,
                                     media_type="text/event-stream", background=BackgroundTask(answer.aclose))
        raw = await answer.aread()
        await answer.aclose()
        return Response(raw, status_code=answer.status_code, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--block", default="")
    args = parser.parse_args()
    app = build(args.upstream, frozenset(filter(None, args.block.split(","))))
    uvicorn.run(app, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools", access_log=False,
                log_level="warning")


if __name__ == "__main__":
    main()
