"""A streamed call whose client leaves still ends as every call ends: its one `request` line
written (the audit record, with the request's context) and its upstream connection let go,
whether the client left before the stream's first byte or in the middle of it. A real proxy on a
real port, a raw upstream that streams as slowly as the case needs."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import small_model_proxy, wait_until
from structlog.testing import capture_logs
from test_hostile_load_review import HangingUpstream

from gatekeeper.observe.logs import merge_context
from gatekeeper.suite.loader import Suite

EVENT = {
    "id": "c",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": "small-model",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hel"}, "finish_reason": None}],
}


class SlowStream(HangingUpstream):
    """A chat upstream whose stream starts `head_after_s` after the request, writes one event,
    and then never ends (until the proxy lets go). `open` counts the connections the proxy holds."""

    def __init__(self, head_after_s: float) -> None:
        super().__init__()
        self.head_after_s = head_after_s

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            length = next(
                int(v) for k, _, v in (ln.partition(":") for ln in head.split("\r\n")) if k.lower() == "content-length"
            )
            await reader.readexactly(length)
            await asyncio.sleep(self.head_after_s)
            event = b"data: " + json.dumps(EVENT).encode() + b"\n\n"
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                + b"%x\r\n" % len(event)
                + event
                + b"\r\n"
            )
            await writer.drain()
            await reader.read()  # until the proxy lets go of the connection
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


@contextmanager
def leaving_client(port: int) -> Iterator[socket.socket]:
    body = json.dumps({"model": "small-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: leaver-1\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body.encode())
    )
    try:
        yield sock
    finally:
        sock.close()


@pytest.mark.parametrize(
    "head_after_s, read_first",
    [(0.15, False), (0.0, True)],
    ids=["leaves-before-the-stream-starts", "leaves-mid-stream"],
)
def test_a_streamed_call_whose_client_leaves_is_logged_and_lets_go_of_its_upstream(
    head_after_s: float, read_first: bool, store_path: Path, default_suite: Suite
) -> None:
    with (
        SlowStream(head_after_s) as upstream,
        small_model_proxy(f"http://127.0.0.1:{upstream.port}/v1", store_path, default_suite) as proxy,
        capture_logs(processors=[merge_context]) as lines,
    ):
        port = int(proxy.url.rsplit(":", 1)[1])
        with leaving_client(port) as sock:
            wait_until(lambda: upstream.open == 1, "the proxy to call the upstream", 10)
            if read_first:
                assert b"hel" in sock.recv(65536)  # the stream started: the client has its first event
        # Gone before the upstream's head (the stream's body never iterated), or in the middle.
        requests = wait_until(
            lambda: [line for line in lines if line["event"] == "request"], "the call's request line", 10
        )
        wait_until(lambda: upstream.open == 0, "the proxy to let go of the upstream connection", 10)
    (line,) = requests
    assert (line["request_id"], line["model"], line["stream"], line["upstream_status"]) == (
        "leaver-1",
        "small-model",
        True,
        200,
    )
    assert not [line for line in lines if line["log_level"] == "error"]
