"""The proxy's pipeline without a port: the official clients talk to the app in process (Starlette's
TestClient is an httpx client) and the upstream is a `MockUpstream` handler. Fast; the real-HTTP
tests (test_proxy.py, test_upstream.py, tests/protocols) prove the same paths over sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anthropic
import openai
import pytest
import structlog
from conftest import TOOLS, make_profile, seed_store, settings_for
from scripted import chat_chunk, chat_completion
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse
from starlette.testclient import TestClient

from gatekeeper import Gatekeeper
from gatekeeper.observe.logs import bound, merge_context
from gatekeeper.rules.tiers import Tier
from gatekeeper.server.app import create_app
from gatekeeper.server.mock import MockAnswer, MockUpstream
from gatekeeper.server.pipeline import ModelCall, _Meanwhile
from gatekeeper.server.upstream import UpstreamRequest

HI = [{"role": "user", "content": "hi"}]
TEXT = chat_completion({"content": "hello"})


def calling(*names: str) -> dict:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": "{}"}} for i, n in enumerate(names)
    ]
    return chat_completion({"content": None, "tool_calls": calls}, "tool_calls")


@dataclass
class App:
    gk: Gatekeeper
    upstream: MockUpstream
    http: TestClient

    def openai(self, **options) -> openai.OpenAI:
        return openai.OpenAI(
            base_url="http://testserver/v1", api_key="k", http_client=self.http, **({"max_retries": 0} | options)
        )

    def anthropic(self, **options) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url="http://testserver", api_key="k", http_client=self.http, **({"max_retries": 0} | options)
        )


@contextmanager
def proxied(
    store_path, default_suite, handler: Callable[[UpstreamRequest], MockAnswer], protocols=("chat",), **settings
) -> Iterator[App]:
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    gk = Gatekeeper(settings_for("http://upstream.invalid/v1", store_path, **settings))
    upstream = MockUpstream(handler, protocols=protocols)
    try:
        with TestClient(create_app(gk, upstream=upstream)) as http:
            yield App(gk, upstream, http)
    finally:
        gk.close()


def test_a_plain_answer_reaches_the_client_and_the_mock_sees_the_gated_request(store_path, default_suite):
    with proxied(store_path, default_suite, lambda request: MockAnswer.json(TEXT)) as app:
        raw = app.openai().chat.completions.with_raw_response.create(model="m", messages=HI, tools=TOOLS)
    assert raw.parse().choices[0].message.content == "hello"
    assert raw.headers["x-gatekeeper-tier"] == "small"
    sent = app.upstream.requests[-1]
    assert (sent.method, sent.path, sent.stream) == ("POST", "/chat/completions", False)
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["read_file"]


def test_a_hidden_call_is_removed_from_a_plain_answer(store_path, default_suite):
    with proxied(store_path, default_suite, lambda request: MockAnswer.json(calling("execute_command"))) as app:
        raw = app.openai().chat.completions.with_raw_response.create(model="m", messages=HI, tools=TOOLS)
    assert not raw.parse().choices[0].message.tool_calls
    assert raw.headers["x-gatekeeper-blocked-calls"] == "execute_command"


def test_a_hidden_call_is_removed_from_a_stream(store_path, default_suite):
    def answer(request: UpstreamRequest) -> MockAnswer:
        assert request.stream
        start = {"index": 0, "id": "c0", "type": "function", "function": {"name": "execute_command", "arguments": ""}}
        return MockAnswer.sse(
            chat_chunk({"role": "assistant", "content": ""}),
            chat_chunk({"tool_calls": [start]}),
            chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
            chat_chunk({}, "tool_calls"),
        )

    with proxied(store_path, default_suite, answer) as app:
        stream = app.openai().chat.completions.create(model="m", messages=HI, tools=TOOLS, stream=True)
        chunks = list(stream)
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)


def test_a_stream_over_the_answer_cap_ends_in_an_error_event(store_path, default_suite):
    big = chat_chunk({"content": "x" * 4096})

    def answer(request: UpstreamRequest) -> MockAnswer:
        stream = MockAnswer.sse(*[big] * 4)
        stream.limit = 8192
        return stream

    with proxied(store_path, default_suite, answer) as app:
        stream = app.openai().chat.completions.create(model="m", messages=HI, stream=True)
        with pytest.raises(openai.APIError, match="max_response_bytes"):
            list(stream)


def test_messages_are_translated_to_chat_for_a_chat_only_upstream_and_back(store_path, default_suite):
    with proxied(store_path, default_suite, lambda request: MockAnswer.json(calling("read_file"))) as app:
        message = app.anthropic().messages.create(
            model="m",
            max_tokens=64,
            messages=HI,
            tools=[
                {"name": "read_file", "input_schema": {"type": "object"}},
                {"name": "execute_command", "input_schema": {"type": "object"}},
            ],
        )
    assert [b.name for b in message.content if b.type == "tool_use"] == ["read_file"]
    sent = app.upstream.requests[-1]
    assert sent.path == "/chat/completions"
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["read_file"]


def test_a_native_upstream_gets_the_clients_protocol(store_path, default_suite):
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    with proxied(
        store_path, default_suite, lambda request: MockAnswer.json(answer), protocols=("chat", "messages")
    ) as app:
        message = app.anthropic().messages.create(model="m", max_tokens=64, messages=HI)
    assert message.content[0].text == "hi"
    assert app.upstream.requests[-1].path == "/messages"


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "7", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "7s"},
        {"retry-after-ms": "1500", "anthropic-ratelimit-requests-remaining": "0"},
    ],
)
def test_an_upstream_429_keeps_its_retry_after_and_rate_limit_headers(store_path, default_suite, headers):
    error = {"error": {"message": "slow down", "type": "rate_limit_error", "code": None}}
    with proxied(store_path, default_suite, lambda request: MockAnswer.json(error, 429, headers)) as app:
        with pytest.raises(openai.RateLimitError) as info:
            app.openai().chat.completions.create(model="m", messages=HI)
    for name, value in headers.items():
        assert info.value.response.headers[name] == value
    assert "set-cookie" not in info.value.response.headers


def test_the_clients_retry_honours_the_relayed_retry_after(store_path, default_suite):
    """The SDK retries a 429 after the relayed `retry-after-ms` (a tiny delay here: its own
    default backoff would also retry, so the test reads the header on the first answer too)."""
    answers = [MockAnswer.json({"error": {"message": "later"}}, 429, {"retry-after-ms": "5"}), MockAnswer.json(TEXT)]
    with proxied(store_path, default_suite, lambda request: answers.pop(0)) as app:
        raw = app.openai(max_retries=1).chat.completions.with_raw_response.create(model="m", messages=HI)
    assert raw.parse().choices[0].message.content == "hello"
    assert raw.retries_taken == 1 and len(app.upstream.requests) == 2


def test_the_request_line_carries_the_request_context_and_the_context_is_undone(store_path, default_suite):
    with proxied(store_path, default_suite, lambda request: MockAnswer.json(calling("execute_command"))) as app:
        with structlog.testing.capture_logs(processors=[merge_context]) as logs:
            app.openai().chat.completions.create(
                model="m", messages=HI, tools=TOOLS, extra_headers={"x-request-id": "req-1"}
            )
    (line,) = [e for e in logs if e["event"] == "request"]
    assert line["request_id"] == "req-1" and line["model"] == "m" and line["effort"] == "default"
    assert (line["tier"], line["source"], line["status"]) == ("small", "measured", 200)
    assert line["tools_kept"] == ["read_file"] and line["tools_hidden"] == ["write_file", "execute_command"]
    assert line["blocked_calls"] == ["execute_command"] and line["upstream_status"] == 200
    (blocked,) = [e for e in logs if e["event"] == "tool_calls_blocked"]
    assert blocked["request_id"] == "req-1"  # every line of the request has its context
    assert structlog.contextvars.get_contextvars() == {} and bound() == {}


def test_a_plain_answer_whose_write_fails_still_logs_its_request_line_once(store_path, default_suite):
    """A plain answer's line is its response's background task, which a write that raises (or a
    cancelled task) never runs: the app's RequestScope writes it then, marked unfinished."""
    body = json.dumps({"model": "m", "messages": HI, "tools": TOOLS}).encode()
    path = "/v1/chat/completions"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.body":
            raise OSError("the connection broke mid-write")

    with proxied(store_path, default_suite, lambda request: MockAnswer.json(TEXT)) as app:
        with structlog.testing.capture_logs(processors=[merge_context]) as logs, pytest.raises(OSError):
            app.http.portal.call(app.http.app, scope, receive, send)
    (line,) = [e for e in logs if e["event"] == "request"]
    assert (line["answer"], line["status"], line["model"], line["tier"]) == ("unfinished", 200, "m", "small")


def test_an_error_after_the_answer_is_logged_and_the_answer_stands(store_path, default_suite, monkeypatch):
    """What runs after a plain answer is written (the drift monitor's look for a call written as
    text) may have a bug: it is logged as gatekeeper's own error, never raised to the server (which
    would close the client's connection), and the request line is still written."""

    def broken(self, raw, enforced):
        raise RuntimeError("a bug in the look for a written call")

    monkeypatch.setattr(ModelCall, "_text_call", broken)
    with proxied(store_path, default_suite, lambda request: MockAnswer.json(TEXT)) as app:
        with structlog.testing.capture_logs(processors=[merge_context]) as logs:
            answers = [app.openai().chat.completions.create(model="m", messages=HI, tools=TOOLS) for _ in range(2)]
    assert [a.choices[0].message.content for a in answers] == ["hello", "hello"]
    failed = [e for e in logs if e["event"] == "after_answer_failed"]
    assert len(failed) == 2 and isinstance(failed[0]["exc_info"], RuntimeError)
    assert [e["status"] for e in logs if e["event"] == "request"] == [200, 200]


def test_a_refused_request_logs_its_context_and_the_mock_is_not_called(store_path, default_suite):
    force = {"type": "function", "function": {"name": "execute_command"}}
    with proxied(store_path, default_suite, lambda request: MockAnswer.json(TEXT)) as app:
        with structlog.testing.capture_logs(processors=[merge_context]) as logs:
            with pytest.raises(openai.BadRequestError) as info:
                app.openai().chat.completions.create(model="m", messages=HI, tools=TOOLS, tool_choice=force)
    assert info.value.response.headers["x-gatekeeper-tier"] == "small"
    (line,) = [e for e in logs if e["event"] == "request"]
    assert line["status"] == 400 and line["blocked_choice"] == "execute_command" and line["model"] == "m"
    assert app.upstream.requests == []


def test_an_upstream_that_is_not_json_is_a_502_never_a_call(store_path, default_suite):
    with proxied(store_path, default_suite, lambda request: MockAnswer(b'{"choices": [tool_calls', 200)) as app:
        with pytest.raises(openai.APIStatusError) as info:
            app.openai().chat.completions.create(model="m", messages=HI, tools=TOOLS)
    assert info.value.status_code == 502


def test_the_mock_answers_models_too(store_path, default_suite):
    models = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "mock"}]}
    with proxied(store_path, default_suite, lambda request: MockAnswer.json(models)) as app:
        assert [m.id for m in app.openai().models.list()] == ["m"]
    assert (app.upstream.requests[-1].method, app.upstream.requests[-1].path) == ("GET", "/models")
    assert json.loads(json.dumps(app.upstream.requests[-1].body)) is None


def test_mounts_pick_a_models_route_by_its_exact_name_and_the_default_otherwise():
    from gatekeeper.server.mounts import Mounts

    default, routed = MockUpstream(lambda r: MockAnswer()), MockUpstream(lambda r: MockAnswer())
    mounts = Mounts({"*": default, "claude-route": routed})
    assert mounts.for_model("claude-route") is routed
    assert mounts.for_model("claude-route-2") is default and mounts.for_model("claude-*") is default
    with pytest.raises(ValueError, match=r"'\*'"):
        Mounts({"claude-route": routed})


def test_one_injected_upstream_serves_every_model_even_a_litellm_route(store_path, default_suite):
    route = {"name": "routed", "litellm_model": "openai/x", "api_base": "http://provider.invalid/v1"}
    with proxied(store_path, default_suite, lambda request: MockAnswer.json(TEXT), models=[route]) as app:
        app.openai().chat.completions.create(model="routed", messages=HI)
    assert app.upstream.requests[-1].body["model"] == "routed"


async def test_a_request_under_older_settings_gets_their_pool_never_a_new_one():
    from gatekeeper.config import Settings
    from gatekeeper.server.mounts import Upstreams

    upstreams = Upstreams()
    old, new = (Settings(upstream={"base_url": f"http://{h}.invalid/v1"}) for h in ("old", "new"))
    try:
        first = upstreams.mounts(old).default
        assert upstreams.mounts(new).default is not first
        assert upstreams.mounts(old).default is first  # a request still running under `old`
        assert upstreams.mounts(old.model_copy()).default is first  # same values, new object
        assert len(upstreams._pools) == 2
    finally:
        await upstreams.aclose()


def _failing(request: UpstreamRequest) -> MockAnswer:
    raise RuntimeError("a bug on the request path")


def test_an_unexpected_error_is_a_500_naming_the_request_with_the_traceback_in_the_log(store_path, default_suite):
    with proxied(store_path, default_suite, _failing) as app:
        with structlog.testing.capture_logs(processors=[merge_context]) as logs:
            with pytest.raises(openai.InternalServerError) as info:
                app.openai().chat.completions.create(model="m", messages=HI, extra_headers={"x-request-id": "req-9"})
    response = info.value.response
    assert response.json()["error"]["message"] == "gatekeeper internal error (request req-9)"
    assert (response.headers["x-request-id"], response.headers["x-gatekeeper-tier"]) == ("req-9", "small")
    (failed,) = [e for e in logs if e["event"] == "request_failed"]
    assert failed["request_id"] == "req-9" and isinstance(failed["exc_info"], RuntimeError)
    assert [e["status"] for e in logs if e["event"] == "request"] == [500]
    assert structlog.contextvars.get_contextvars() == {} and bound() == {}


def test_middleware_and_handlers_added_to_the_app_apply_to_the_model_routes(store_path, default_suite):
    """The model routes skip Starlette's stack only while nothing was added to it."""
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with Gatekeeper(settings_for("http://upstream.invalid/v1", store_path)) as gk:
        app = create_app(gk, upstream=MockUpstream(lambda request: MockAnswer.json(TEXT)))
        seen: list[str] = []

        async def noted(request, call_next):
            seen.append(request.url.path)
            return await call_next(request)

        app.add_middleware(BaseHTTPMiddleware, dispatch=noted)
        with TestClient(app) as http:
            assert http.post("/v1/chat/completions", json={"model": "m", "messages": HI}).status_code == 200
            assert http.post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": HI}).status_code == 200
        assert seen == ["/v1/chat/completions", "/v1/messages"]

        app = create_app(gk, upstream=MockUpstream(_failing))
        app.add_exception_handler(RuntimeError, lambda request, exc: JSONResponse({"own": str(exc)}, 418))
        with TestClient(app) as http:
            answer = http.post("/v1/chat/completions", json={"model": "m", "messages": HI})
        assert (answer.status_code, answer.json()) == (418, {"own": "a bug on the request path"})


def test_what_the_answer_side_needs_is_made_once_while_the_request_waits_and_its_error_reaches_it():
    async def main() -> None:
        made: list[int] = []
        prepared = _Meanwhile(lambda: made.append(1) or len(made))
        assert made == []  # queued, not made yet
        await asyncio.sleep(0)  # the task waits (for the upstream): the loop makes it meanwhile
        assert made == [1] and prepared.result() == 1 and made == [1]
        failing = _Meanwhile(lambda: 1 // 0)
        with pytest.raises(ZeroDivisionError):
            failing.result()  # asked for before the task waited: made now, its error raised to the task
        await asyncio.sleep(0)
        with pytest.raises(ZeroDivisionError):
            failing.result()  # never made twice
        unasked = _Meanwhile(lambda: made.append(2))
        unasked.abandon()  # the upstream send failed before the task waited: never made
        await asyncio.sleep(0)
        assert made == [1]
        lost = _Meanwhile(lambda: 1 // 0)
        await asyncio.sleep(0)
        with structlog.testing.capture_logs() as logs:
            lost.abandon()  # the upstream send failed after it was made: its error is logged
        assert [(e["event"], type(e["exc_info"])) for e in logs] == [("answer_setup_failed", ZeroDivisionError)]

    asyncio.run(main())
