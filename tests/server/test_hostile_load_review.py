"""A hostile client and a slow upstream against a real proxy on a real port: a client that leaves
must not keep the upstream busy, nor be logged as an internal error."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest
from conftest import small_model_proxy, wait_until
from structlog.testing import capture_logs

from gatekeeper.suite.loader import Suite

ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "small-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class HangingUpstream:
    """A raw chat upstream: a request whose last message says "hang" is never answered (the
    connection stays open until the proxy closes it); any other is answered at once. `open`
    counts the connections the proxy holds."""

    def __init__(self) -> None:
        self.open = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> HangingUpstream:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(lambda: self._stop and self._stop.set())
        self._thread.join(10)

    def _run(self) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop.wait()
            server.close()

        self._loop.run_until_complete(main())

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                length = next(
                    (
                        int(line.split(":", 1)[1])
                        for line in head.split("\r\n")
                        if line.lower().startswith("content-length:")
                    ),
                    0,
                )
                body = json.loads(await reader.readexactly(length) or b"{}")
                if "hang" in (body.get("input"), body.get("messages", [{}])[-1].get("content")):
                    await reader.read()  # until the proxy lets go of the connection
                    return
                doc = json.dumps(ANSWER).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(doc) + doc
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


@contextmanager
def proxy_before(upstream: HangingUpstream, store: Path, suite: Suite, **changes) -> Iterator[str]:
    changes.setdefault("upstream", {"base_url": upstream.base_url, "max_connections": 2})
    with small_model_proxy(upstream.base_url, store, suite, **changes) as proxy:
        yield proxy.url


def chat(url: str, content: str, timeout: float, path: str = "/v1/chat/completions") -> httpx.Response:
    body = {"model": "small-model", "messages": [{"role": "user", "content": content}]}
    if path == "/v1/embeddings":
        body = {"model": "small-model", "input": content}
    return httpx.post(url + path, json=body, timeout=timeout)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_a_client_that_leaves_frees_its_upstream_connection(path: str, store_path: Path, default_suite: Suite) -> None:
    with HangingUpstream() as upstream, proxy_before(upstream, store_path, default_suite) as url:
        for _ in range(6):  # three times the pool: every slot would be held by a gone client
            with suppress(httpx.TimeoutException):
                chat(url, "hang", timeout=0.3, path=path)
        wait_until(lambda: upstream.open == 0, "the proxy to close the upstream connections of gone clients", 10)
        answer = chat(url, "hello", timeout=10)  # before: waited for a pooled connection until timeout_s
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["message"]["content"] == "ok"


def test_a_client_that_leaves_mid_body_is_no_internal_error(store_path: Path, default_suite: Suite) -> None:
    with (
        HangingUpstream() as upstream,
        proxy_before(upstream, store_path, default_suite) as url,
        capture_logs() as lines,
    ):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n{"model":')
        wait_until(lambda: any(line["event"] == "client_disconnected" for line in lines), "the disconnect logged", 10)
        assert chat(url, "hello", timeout=10).status_code == 200
    assert not [line for line in lines if line["log_level"] == "error"]
