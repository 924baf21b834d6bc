"""The instant upstream for tests/perf/compare.py: raw asyncio + httptools + uvloop, no framework.

Every POST is answered with one fixed answer in the protocol of its path (`.../responses`: OpenAI
Responses, `.../messages`: Anthropic Messages, anything else: Chat Completions), or with a fixed
SSE stream of that protocol when the body asks for `"stream": true` (`--gap-ms` between events,
so a buffering proxy shows in TTFB). Every GET is answered with a one-model list. The shapes are
those of tests/upstreams.py (the protocol tests' native fake upstreams), precomputed as bytes.

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
    body = json.dumps(
        {
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 1700000000,
            "model": MODEL,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "The answer is 42."}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 6, "total_tokens": 126},
        },
        separators=(",", ":"),
    ).encode()
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)) + body


def _models() -> bytes:
    body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "mock"}]}).encode()
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)) + body


def _events() -> list[bytes]:
    def chunk(delta: dict, finish: str | None = None) -> bytes:
        doc = {
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": word}) for word in ("The ", "answer ", "is ", "42", ".")]
    events.append(chunk({}, "stop"))
    events.append(b"data: [DONE]\n\n")
    return [b"%x\r\n%s\r\n" % (len(e), e) for e in events]


def _sized(body: dict) -> bytes:
    raw = json.dumps(body, separators=(",", ":")).encode()
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(raw)) + raw


def _chunked(events: list[tuple[str, dict]]) -> list[bytes]:
    """Named SSE events (`event:` + `data:`), each in its own HTTP chunk."""
    out = []
    for kind, doc in events:
        event = b"event: %s\ndata: %s\n\n" % (
            kind.encode(),
            json.dumps({"type": kind, **doc}, separators=(",", ":")).encode(),
        )
        out.append(b"%x\r\n%s\r\n" % (len(event), event))
    return out


TEXT = "The answer is 42."
_USAGE = {
    "input_tokens": 120,
    "output_tokens": 6,
    "total_tokens": 126,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 0},
}
_MESSAGE_ITEM = {
    "type": "message",
    "id": "msg_mock",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": TEXT, "annotations": []}],
}


def _response(status: str, output: list) -> dict:
    return {
        "id": "resp_mock",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "usage": _USAGE,
    }


def _responses_events() -> list[bytes]:
    part = {"item_id": "msg_mock", "output_index": 0, "content_index": 0}
    events = [
        ("response.created", {"response": _response("in_progress", [])}),
        ("response.in_progress", {"response": _response("in_progress", [])}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": _MESSAGE_ITEM | {"content": [], "status": "in_progress"}},
        ),
        ("response.content_part.added", part | {"part": {"type": "output_text", "text": "", "annotations": []}}),
    ]
    events += [
        ("response.output_text.delta", part | {"delta": word, "logprobs": []})
        for word in ("The ", "answer ", "is ", "42", ".")
    ]
    events += [
        ("response.output_text.done", part | {"text": TEXT, "logprobs": []}),
        ("response.content_part.done", part | {"part": _MESSAGE_ITEM["content"][0]}),
        ("response.output_item.done", {"output_index": 0, "item": _MESSAGE_ITEM}),
        ("response.completed", {"response": _response("completed", [_MESSAGE_ITEM])}),
    ]
    return _chunked([(kind, {**doc, "sequence_number": i}) for i, (kind, doc) in enumerate(events)])


def _message(content: list, stop: str | None, output_tokens: int) -> dict:
    return {
        "id": "msg_mock",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": output_tokens},
    }


def _messages_events() -> list[bytes]:
    events = [
        ("message_start", {"message": _message([], None, 0)}),
        ("ping", {}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
    ]
    events += [
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": word}})
        for word in ("The ", "answer ", "is ", "42", ".")
    ]
    events += [
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 6}}),
        ("message_stop", {}),
    ]
    return _chunked(events)


COMPLETION, MODELS, EVENTS = _completion(), _models(), _events()
RESPONSE, RESPONSE_EVENTS = _sized(_response("completed", [_MESSAGE_ITEM])), _responses_events()
MESSAGE, MESSAGE_EVENTS = _sized(_message([{"type": "text", "text": TEXT}], "end_turn", 6)), _messages_events()
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


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

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        if self.parser.get_method() != b"POST":
            self.transport.write(MODELS)
            return
        path = self.url.split(b"?")[0].rstrip(b"/")
        plain, events = (
            (RESPONSE, RESPONSE_EVENTS)
            if path.endswith(b"/responses")
            else (MESSAGE, MESSAGE_EVENTS)
            if path.endswith(b"/messages")
            else (COMPLETION, EVENTS)
        )
        if b'"stream":true' in body or b'"stream": true' in body:
            asyncio.get_running_loop().create_task(self.stream(events))
        else:
            self.transport.write(plain)

    async def stream(self, events: list[bytes]) -> None:
        self.transport.write(STREAM_HEAD)
        for event in events:
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
