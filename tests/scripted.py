"""A scripted OpenAI-compatible server: a real HTTP server whose answers tests choose.

`responder(body)` returns the assistant message as `{"content": str | None, "tool_calls":
[{"name", "arguments"}]}` (and an optional `"refusal": str`, as a model declining a format sends it), or `{"status": int, "error": str}` to fail that call. Every body
received is recorded in `requests`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from instances import locate_instance
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gatekeeper.measuring.budget import answer_key
from gatekeeper.suite.loader import BenchTest, Suite, load_suite

Responder = Callable[[dict], dict]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThreadedServer:
    """Runs an ASGI app with uvicorn in a background thread on a free loopback port."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.port = port or free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> ThreadedServer:
        self._thread.start()
        deadline = (
            time.monotonic() + 60
        )  # a liveness wait, not a speed check: litellm routes import litellm at start-up, slow on a loaded machine
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


class ScriptedServer(ThreadedServer):
    def __init__(
        self, responder: Responder | None = None, *, delay_s: float = 0.0, models: tuple[str, ...] = ("scripted",)
    ) -> None:
        self.responder: Responder = responder or (lambda body: {"content": "ok", "tool_calls": []})
        self.delay_s = delay_s
        self.models = models
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        super().__init__(app)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "scripted"} for m in self.models]}
        )

    async def _chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        reply = self.responder(body)
        if reply.get("delay_s"):  # this one answer is slow (a model rambling on)
            await asyncio.sleep(reply["delay_s"])
        if "status" in reply:
            return JSONResponse(
                {"error": {"message": reply["error"], "type": "scripted_error", "code": None}},
                status_code=reply["status"],
            )
        calls = [
            {
                "id": c.get("id") or f"call_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]),
                },
            }
            for c in reply.get("tool_calls") or []
        ]
        content = reply.get("content")
        usage = {"prompt_tokens": 10, "completion_tokens": reply.get("completion_tokens", 7), "total_tokens": 17}
        finish = reply.get("finish_reason") or ("tool_calls" if calls else "stop")
        if body.get("stream"):
            return StreamingResponse(
                self._stream(body["model"], content, calls, usage, finish, reply.get("refusal")),
                media_type="text/event-stream",
            )
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reply.get("refusal"):
            message["refusal"] = reply["refusal"]
        if calls:
            message["tool_calls"] = calls
        return JSONResponse(
            {
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )

    async def _stream(
        self, model: str, content: str | None, calls: list[dict], usage: dict, finish: str, refusal: str | None = None
    ):
        def chunk(delta: dict, finish_reason: str | None = None, **extra: Any) -> bytes:
            doc = {
                "id": "chatcmpl-scripted",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                **extra,
            }
            return f"data: {json.dumps(doc)}\n\n".encode()

        yield chunk({"role": "assistant", "content": ""})
        text = content or ""
        for i in range(0, len(text), 5):
            yield chunk({"content": text[i : i + 5]})
        if refusal:
            yield chunk({"refusal": refusal})
        for index, call in enumerate(calls):
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
            arguments = call["function"]["arguments"]
            for i in range(0, len(arguments), 4):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[i : i + 4]}}]})
        yield chunk({}, finish)
        yield f"data: {json.dumps({'id': 'chatcmpl-scripted', 'object': 'chat.completion.chunk', 'choices': [], 'usage': usage})}\n\n".encode()
        yield b"data: [DONE]\n\n"


BUDGET_TEST = "tool_budget"  # what SuiteScript.locate calls an instance of the budget measurement


def budget_test(prompt: str) -> BenchTest:
    """A tool-budget instance (gatekeeper.measuring.budget) as a located test: every behaviour of
    tests/answers.py answers it (perfect: the right call; no_tool_calls: the call as text ...)."""
    test = BenchTest(
        name=BUDGET_TEST, category="toolCalling", prompt=prompt, checks=[{"type": "tool_called", "value": "x"}]
    )
    test.bindings["prompt"] = prompt
    return test


def budget_reply(messages: list[dict]) -> dict | None:
    """The right call for a tool-budget instance (gatekeeper.measuring.budget: every persona chooses
    the right tool among many); None for any other conversation."""
    first = next((m["content"] for m in messages if m["role"] == "user"), None)
    key = answer_key(first) if isinstance(first, str) else None
    if key is None:
        return None
    name, argument, value = key
    return {"content": None, "tool_calls": [{"name": name, "arguments": {argument: value}}]}


class SuiteScript:
    """Answers the prompts of known suites with a chosen behaviour (see tests/answers.py).

    The test is found from the conversation's first user message (a randomised test's instance
    from its template, see tests/instances.py); the step from the number of assistant messages.
    """

    def __init__(self, *suites: Suite | str | Path) -> None:
        self.tests: dict[str, BenchTest] = {}
        self.suites: list[Suite] = []
        for suite in suites:
            loaded = suite if isinstance(suite, Suite) else load_suite(suite)
            self.suites.append(loaded)
            for test in loaded.tests:
                # A randomised test is always recovered from its template: an instance whose
                # first prompt happens to equal the loaded draw's still has its own later values.
                if test.name not in loaded.templates:
                    self.tests[test.all_steps[0].prompt or ""] = test

    def locate(self, body: dict) -> tuple[BenchTest, int]:
        messages = body["messages"]
        first = next(m["content"] for m in messages if m["role"] == "user")
        step = sum(1 for m in messages if m["role"] == "assistant")
        test = self.tests.get(first) or next(
            (found for suite in self.suites if (found := locate_instance(suite, messages)) is not None), None
        )
        if test is None and isinstance(first, str) and answer_key(first) is not None:
            return budget_test(first), step
        if test is None:
            raise KeyError(first)
        return test, step

    def responder(self, behaviour: Callable[[BenchTest, int], dict]) -> Responder:
        def respond(body: dict) -> dict:
            test, step = self.locate(body)
            return behaviour(test, step)

        return respond


class RawAnswer:
    """Exactly what a misbehaving upstream sends: status, content type (sent as written, any
    case, or none), and the body as separate chunks (one write each)."""

    def __init__(
        self,
        chunks: list[bytes] | bytes = b"",
        status: int = 200,
        content_type: str | None = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.chunks = [chunks] if isinstance(chunks, bytes) else chunks
        self.status, self.content_type, self.headers = status, content_type, headers or {}


class RawUpstream(ThreadedServer):
    """A real HTTP upstream answering every request under /v1 with `answer` (a RawAnswer, or a
    callable body -> RawAnswer). Bodies and headers received are recorded."""

    def __init__(self, answer: RawAnswer | Callable[[dict], RawAnswer] | None = None) -> None:
        self.answer = answer or RawAnswer(b"{}")
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.paths: list[str] = []
        super().__init__(Starlette(routes=[Route("/v1/{path:path}", self._any, methods=["GET", "POST"])]))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _any(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw) if raw else {}
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        self.paths.append(request.url.path)
        answer = self.answer(body) if callable(self.answer) else self.answer
        headers = dict(answer.headers)
        if answer.content_type is not None:
            headers["content-type"] = answer.content_type

        async def body_chunks():
            for chunk in answer.chunks:
                yield chunk

        return StreamingResponse(body_chunks(), status_code=answer.status, headers=headers)


def chat_completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    """A chat.completion document around one assistant message."""
    return {
        "id": "chatcmpl-raw",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": None} | message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def sse(*docs: dict[str, Any] | str, newline: bytes = b"\n", done: bool = True) -> bytes:
    """Events framed with `newline` (LF, CRLF or CR); a str is sent as the data as it is."""
    out = b""
    for doc in docs:
        data = doc if isinstance(doc, str) else json.dumps(doc)
        out += b"data: " + data.encode() + newline + newline
    if done:
        out += b"data: [DONE]" + newline + newline
    return out
