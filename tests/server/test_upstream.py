"""The upstream pool's rules (gatekeeper/server/upstream.py), end to end: official openai client -> real
proxy port -> real upstream servers that misbehave in one way each."""

from __future__ import annotations

import gzip
import json
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest
from conftest import make_profile, running_proxy, seed_store, settings_for
from scripted import ThreadedServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gatekeeper.rules.tiers import Tier


def completion(message: dict) -> dict:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
    }


TEXT = completion({"content": "hello"})


def ask(proxy, **extra):
    return proxy.client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hi"}], **extra
    )


@pytest.fixture
def seeded(store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    return store_path


def test_an_upstream_cookie_never_reaches_another_request(seeded):
    """A cookie set on one client's answer must not ride along on the next client's request."""
    seen: list[dict[str, str]] = []

    async def chat(request: Request) -> Response:
        seen.append(dict(request.headers))
        return JSONResponse(TEXT, headers={"set-cookie": "session=first-client; Path=/"})

    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with ThreadedServer(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as server:
        with running_proxy(settings_for(f"http://127.0.0.1:{server.port}/v1", seeded)) as proxy:
            for client in range(10):  # ten clients, each with no cookie of its own (and enough to reuse a pool)
                answer = httpx.post(
                    f"{proxy.url}/v1/chat/completions",
                    json=request,
                    headers={"authorization": f"Bearer client-{client}"},
                )
                assert answer.status_code == 200
    assert len(seen) == 10
    assert [h for h in seen if "cookie" in h] == []


def test_a_redirect_is_never_followed(seeded):
    """A 307 would re-send the client's key and body to wherever the upstream says."""
    stolen: list[str] = []

    async def steal(request: Request) -> Response:
        stolen.append(request.headers.get("authorization", ""))
        return JSONResponse(TEXT)

    with ThreadedServer(Starlette(routes=[Route("/steal", steal, methods=["POST"])])) as thief:

        async def chat(request: Request) -> Response:
            return Response(status_code=307, headers={"location": f"http://127.0.0.1:{thief.port}/steal"})

        with ThreadedServer(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as server:
            with running_proxy(settings_for(f"http://127.0.0.1:{server.port}/v1", seeded)) as proxy:
                with pytest.raises(openai.APIStatusError) as info:
                    ask(proxy)
    assert info.value.status_code == 502
    assert stolen == []


def test_a_compressed_answer_is_decoded_before_enforcement(seeded):
    """gzip must not hide a call to a hidden tool from the enforcer."""
    hidden_call = completion(
        {
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "execute_command", "arguments": "{}"}}
            ],
        }
    )

    async def chat(request: Request) -> Response:
        return Response(
            gzip.compress(json.dumps(hidden_call).encode()),
            media_type="application/json",
            headers={"content-encoding": "gzip"},
        )

    with ThreadedServer(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as server:
        with running_proxy(settings_for(f"http://127.0.0.1:{server.port}/v1", seeded)) as proxy:
            raw = ask(proxy, tools=[{"type": "function", "function": {"name": "read_file", "parameters": {}}}])
    assert raw.headers["x-gatekeeper-blocked-calls"] == "execute_command"
    assert not raw.parse().choices[0].message.tool_calls


class RawUpstream:
    """A socket server that answers every request with `answer(count)` bytes, then keeps or
    closes the connection (`close_after`): for answers no HTTP framework would send."""

    def __init__(self, answer: Callable[[int], bytes], close_after: bool) -> None:
        self.count = 0
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                stream = self.request.makefile("rb")
                while True:
                    head = b""
                    while not head.endswith(b"\r\n\r\n"):
                        line = stream.readline()
                        if not line:
                            return
                        head += line
                    length = next(
                        (
                            int(h.split(b":")[1])
                            for h in head.lower().split(b"\r\n")
                            if h.startswith(b"content-length:")
                        ),
                        0,
                    )
                    stream.read(length)
                    outer.count += 1
                    self.request.sendall(answer(outer.count))
                    if close_after:
                        self.request.shutdown(socket.SHUT_RDWR)
                        return

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def raw_upstream() -> Iterator[Callable[[Callable[[int], bytes], bool], RawUpstream]]:
    servers: list[RawUpstream] = []

    def start(answer: Callable[[int], bytes], close_after: bool) -> RawUpstream:
        servers.append(RawUpstream(answer, close_after))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def http_answer(body: bytes, declared: int | None = None) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body) if declared is None else declared,
        body,
    )


def test_a_plain_answer_cut_short_is_an_error_never_a_partial_answer(seeded, raw_upstream):
    body = json.dumps(TEXT).encode()
    server = raw_upstream(lambda n: http_answer(body[:40], declared=len(body)), True)
    with running_proxy(settings_for(f"http://127.0.0.1:{server.port}/v1", seeded)) as proxy:
        with pytest.raises(openai.APIStatusError) as info:
            ask(proxy)
    assert info.value.status_code == 502
    assert info.value.body["code"] == "upstream_incomplete"


def test_a_pooled_connection_the_upstream_dropped_is_replaced(seeded, raw_upstream):
    """Like llama.cpp's server: the connection is closed after an answer, without saying so."""
    body = json.dumps(TEXT).encode()
    server = raw_upstream(lambda n: http_answer(body), True)
    with running_proxy(settings_for(f"http://127.0.0.1:{server.port}/v1", seeded)) as proxy:
        for _ in range(3):
            assert ask(proxy).parse().choices[0].message.content == "hello"
    assert server.count == 3
