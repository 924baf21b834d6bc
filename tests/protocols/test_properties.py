"""Property: whatever an upstream answers, plain or streamed, well-formed or not, under any SSE
framing, no hidden tool name survives a client's accumulation (openai-python's or openai-node's),
and nothing raises past the proxy (every answer is a complete HTTP response, never a 500).

Driven through a real proxy on a real port in front of a real HTTP upstream whose answer each
example sets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import structlog
from accumulate import plain_names, stream_names
from conftest import Proxy, make_profile, running_proxy, seed_store, settings_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scripted import RawAnswer, RawUpstream

from gatekeeper.server.sse import SSEParser
from gatekeeper.tiers import Tier

OFFERED = {"read_file"}
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("read_file", "execute_command")
]  # at tier small only read_file is offered
NAMES = st.sampled_from(["read_file", "execute_command", "ghost", "", "read_file ", "execute_"])
JUNK = st.one_of(st.none(), st.integers(-1, 3), st.booleans(), st.text(max_size=3), st.lists(st.integers(), max_size=2))


def maybe(draw: Any, value: Any, junk_odds: int = 8) -> Any:
    """Mostly `value`, sometimes a value of the wrong type."""
    return draw(JUNK) if draw(st.integers(0, junk_odds)) == 0 else value


@st.composite
def tool_call(draw: Any, streamed: bool) -> Any:
    fn: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        fn["name"] = maybe(draw, draw(NAMES))
    if draw(st.booleans()):
        fn["arguments"] = maybe(draw, draw(st.sampled_from(["{}", '{"a":', "1}", ""])))
    call: dict[str, Any] = {draw(st.sampled_from(["function", "function", "custom"])): maybe(draw, fn)}
    if streamed and draw(st.integers(0, 4)):
        call["index"] = maybe(draw, draw(st.integers(0, 2)))
    if draw(st.booleans()):
        call["id"], call["type"] = "call_x", "function"
    return maybe(draw, call, 20)


@st.composite
def delta(draw: Any) -> Any:
    d: dict[str, Any] = {}
    if draw(st.booleans()):
        d["content"] = draw(st.sampled_from(["hi", "execute_command", "", None]))
    if draw(st.integers(0, 3)):
        d["tool_calls"] = maybe(draw, draw(st.lists(tool_call(True), max_size=3)))
    if not draw(st.integers(0, 6)):
        d["function_call"] = maybe(draw, {"name": draw(NAMES), "arguments": "{}"})
    return d


@st.composite
def chunk(draw: Any) -> Any:
    choice = {
        "index": maybe(draw, draw(st.integers(0, 1)), 12),
        "delta": maybe(draw, draw(delta()), 15),
        "finish_reason": draw(st.sampled_from([None, None, "tool_calls", "stop", "function_call"])),
    }
    doc = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": maybe(draw, [choice], 15),
    }
    return maybe(draw, doc, 25)


@st.composite
def completion(draw: Any) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": draw(st.sampled_from(["x", None]))}
    if draw(st.integers(0, 3)):
        message["tool_calls"] = maybe(draw, draw(st.lists(tool_call(False), max_size=3)))
    if not draw(st.integers(0, 5)):
        message["function_call"] = maybe(draw, {"name": draw(NAMES), "arguments": "{}"})
    choice = {
        "index": 0,
        "message": maybe(draw, message, 15),
        "finish_reason": draw(st.sampled_from(["tool_calls", "stop", "function_call"])),
    }
    doc = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": maybe(draw, [choice], 15)}
    return maybe(draw, doc, 25)


@st.composite
def json_text(draw: Any, doc: Any) -> str:
    """`doc` as JSON, sometimes written as an attacker would: escaped key names, NaN, duplicate
    keys that smuggle a hidden call, several lines."""
    text = json.dumps(doc, indent=draw(st.sampled_from([None, None, 1])))
    if draw(st.integers(0, 4)) == 0:
        text = text.replace('"tool_calls"', '"tool\\u005fcalls"').replace('"name"', '"n\\u0061me"')
    if draw(st.integers(0, 6)) == 0 and text.startswith("{"):
        text = '{"nan": NaN, ' + text[1:] if len(text) > 2 else text
    if draw(st.integers(0, 5)) == 0:
        smuggled = '{"tool_calls": [{"index": 0, "function": {"name": "execute_command", "arguments": "{}"}}], '
        text = text.replace('"delta": {', '"delta": ' + smuggled, 1)
        text = text.replace('"message": {', '"message": ' + smuggled.replace('"index": 0, ', ""), 1)
    return text


FIELDS = ["id: 7", "event: message", "event: completion", "retry: 100", ": keep-alive", "id", "retry: soon", "x: y"]


@st.composite
def sse_stream(draw: Any) -> bytes:
    newline = draw(st.sampled_from(["\n", "\r\n", "\r", "mixed"]))
    lines: list[str] = []
    for doc in draw(st.lists(chunk(), max_size=6)):
        lines += draw(st.lists(st.sampled_from(FIELDS), max_size=2))
        lines += ["data: " + part for part in draw(json_text(doc)).split("\n")]
        lines += draw(st.lists(st.sampled_from(FIELDS), max_size=1))
        lines.append("")
    if draw(st.integers(0, 4)):
        lines += ["data: [DONE]", ""]
    if newline == "mixed":
        text = "".join(line + draw(st.sampled_from(["\n", "\r\n", "\r"])) for line in lines)
    else:
        text = "".join(line + newline for line in lines)
    raw = text.encode()
    if draw(st.integers(0, 10)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]  # cut anywhere
    if draw(st.integers(0, 12)) == 0:
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + b"\xff" + raw[at:]
    return raw


@st.composite
def plain_body(draw: Any) -> bytes:
    text = draw(json_text(draw(completion())))
    encoding = draw(st.sampled_from(["utf-8"] * 8 + ["utf-16", "utf-8-sig", "latin-1-broken"]))
    if encoding == "latin-1-broken":
        return text.encode() + b"\xff"
    return text.encode(encoding)


def splits(draw: Any, raw: bytes) -> list[bytes]:
    cuts = sorted(set(draw(st.lists(st.integers(0, len(raw)), max_size=6))))
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True) if b > a] or [raw]


@st.composite
def upstream_answer(draw: Any) -> tuple[RawAnswer, bool]:
    raw = draw(st.one_of(sse_stream(), plain_body()))
    content_type = draw(
        st.sampled_from(
            ["text/event-stream", "Text/Event-Stream; charset=utf-8", "application/json", "text/plain", None]
        )
    )
    status = draw(st.sampled_from([200] * 10 + [400, 500, 302]))
    return RawAnswer(splits(draw, raw), status=status, content_type=content_type), draw(st.booleans())


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, default_suite: Any) -> Iterator[tuple[RawUpstream, Proxy]]:
    store = tmp_path_factory.mktemp("props") / "models_profile.json"
    seed_store(store, make_profile("m", Tier.SMALL, default_suite))
    with RawUpstream() as upstream, running_proxy(settings_for(upstream.base_url, store)) as proxy:
        yield upstream, proxy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=upstream_answer())
def test_no_hidden_name_survives_any_upstream_answer(rig: tuple[RawUpstream, Proxy], case: tuple[RawAnswer, bool]):
    upstream, proxy = rig
    upstream.answer, stream = case
    with structlog.testing.capture_logs() as logs:
        answer = httpx.post(
            proxy.url + "/v1/chat/completions",
            timeout=30,
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "stream": stream},
        )
    sent = upstream.answer.status
    expected = {sent} if sent >= 400 else {502} if sent >= 300 else {200, 502}
    assert answer.status_code in expected  # never our own 500
    assert not [e for e in logs if e["event"] in ("stream_failed", "request_failed")]
    if answer.status_code == 200:
        assert stream_names(answer.content) <= OFFERED
        assert plain_names(answer.content) <= OFFERED


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_sse_parser_reads_any_split_like_the_whole(data: st.DataObject):
    raw = data.draw(sse_stream())
    whole, parts = SSEParser(), SSEParser()
    try:
        expected = whole.feed(raw) + whole.finish()
    except Exception as exc:  # noqa: BLE001 - then every split must fail the same way
        expected = type(exc)
    try:
        got = [e for part in splits(data.draw, raw) for e in parts.feed(part)] + parts.finish()
    except Exception as exc:  # noqa: BLE001
        got = type(exc)
    assert got == expected
