"""The instant upstream for tests/perf/compare.py: raw asyncio + httptools + uvloop, no framework.

Every POST is answered with one fixed chat completion, or with a fixed SSE stream when the body
asks for `"stream": true` (`--gap-ms` between events, so a buffering proxy shows in TTFB). Every
GET is answered with a one-model list.

    python tests/perf/mock_upstream.py --port 9000 [--gap-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httptools
import uvloop

MODEL = "perf-model"


def _completion() -> bytes:
    body = json.dumps({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 1700000000, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "The answer is 42."},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 6, "total_tokens": 126},
    }, separators=(",", ":")).encode()
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)) + body


def _models() -> bytes:
    body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "mock"}]}).encode()
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)) + body


def _events() -> list[bytes]:
    def chunk(delta: dict, finish: str | None = None) -> bytes:
        doc = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1700000000, "model": MODEL,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": word}) for word in ("The ", "answer ", "is ", "42", ".")]
    events.append(chunk({}, "stop"))
    events.append(b"data: [DONE]\n\n")
    return [b"%x\r\n%s\r\n" % (len(e), e) for e in events]


COMPLETION, MODELS, EVENTS = _completion(), _models(), _events()
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
               b"transfer-encoding: chunked\r\n\r\n")


class Upstream(asyncio.Protocol):
    gap_s = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        if self.parser.get_method() != b"POST":
            self.transport.write(MODELS)
        elif b'"stream":true' in body or b'"stream": true' in body:
            asyncio.get_running_loop().create_task(self.stream())
        else:
            self.transport.write(COMPLETION)

    async def stream(self) -> None:
        self.transport.write(STREAM_HEAD)
        for event in EVENTS:
            if self.gap_s:
                await asyncio.sleep(self.gap_s)
            if self.transport.is_closing():
                return
            self.transport.write(event)
        self.transport.write(b"0\r\n\r\n")


async def serve(host: str, port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Upstream, host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gap-ms", type=float, default=0.0)
    args = parser.parse_args()
    Upstream.gap_s = args.gap_ms / 1000
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
