"""Properties, driven through a real proxy on a real port in front of a real HTTP upstream.

Answers: whatever an upstream answers, plain or streamed, well-formed or not, under any SSE
framing, no hidden tool name survives a client's accumulation (openai-python's or openai-node's),
and nothing raises past the proxy (every answer is a complete HTTP response, never a 500).

Requests: for any request built from a protocol's own published types with random extra fields
(top level, in tools, tool choices and input items, and in any object nested in them: content
parts, response formats, content blocks' sources, ...), no hidden tool reaches the upstream, on chat, Responses and Messages, native and translated, under both
`upstream.unknown_fields` modes.

Every property is derandomized (the same draws on every run, so CI cannot go red on a lucky
one), and each case a draw once found is an @example."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import hypothesis
import pytest
import structlog
from accumulate import plain_names, stream_names
from conftest import Proxy, make_profile, running_proxy, seed_store, settings_for
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scripted import RawAnswer, RawUpstream

from gatekeeper.protocols.sse import SSEParser
from gatekeeper.rules.tiers import Tier

OFFERED = {"read_file"}
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("read_file", "execute_command")
]  # at tier small only read_file is offered
NAMES = st.sampled_from(["read_file", "execute_command", "ghost", "", "read_file ", "execute_"])
# The SDK types say `float`; JSON has no NaN or infinity, so from_type draws finite ones only.
st.register_type_strategy(float, st.floats(allow_nan=False, allow_infinity=False))
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


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
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


@settings(max_examples=300, deadline=None, derandomize=True)
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


# -- the request side: no hidden tool reaches the upstream -----------------------------------------
#
# Requests are built from each protocol's own published types (the installed SDKs' TypedDicts,
# drawn by hypothesis.from_type), with tool names drawn from a visible and a hidden set, and
# random extra fields added at the top level and inside tools, tool choices and input items,
# each carrying hidden tools. Whatever the proxy does (forward, narrow, drop, refuse), the
# upstream must not receive a hidden tool. Checked on both `upstream.unknown_fields` modes, with
# the protocol native and translated to chat.

REQUEST_RULES = {
    "default_tier": "small",
    "required_tier": {
        "execute_command": "large",
        "github.delete_*": "large",
        "web_search": "large",
        "computer": "large",
        "bash": "large",
        "shell": "large",
    },
}
HIDDEN_NAMES = {"execute_command", "delete_repo"}
HIDDEN_FAMILIES = {"web_search", "computer", "bash", "shell"}
FUNCTION_NAMES = st.sampled_from(["read_file", "execute_command"])
MCP_NAMES = st.lists(st.sampled_from(["list_repos", "delete_repo"]), min_size=1, max_size=2, unique=True)
EXTRA_KEYS = st.one_of(
    st.sampled_from(["extra_body", "tools", "functions", "chat_template_kwargs", "mcp_servers", "hidden", "input"]),
    st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10),
)


def _plain(value: Any) -> Any:
    """A drawn TypedDict value as JSON would carry it (iterables as lists, other values as null).

    JSON has no NaN or infinity: drawn for `object`, they come back as null too."""

    def default(o: Any) -> Any:
        if isinstance(o, (tuple, set, frozenset)) or type(o).__name__ == "PrettyIter":
            return list(itertools.islice(o, 5))  # hypothesis draws Iterable[...] as a lazy iterator
        return None  # a non-JSON value drawn for `object` (a date, a path, ...)

    return json.loads(json.dumps(value, default=default), parse_constant=lambda _: None)


def _hidden_in(doc: Any) -> list[str]:
    """Every hidden tool a request body offers or names, found by walking all of it."""
    from gatekeeper.rules.tools import BUILTIN_FAMILIES

    found: list[str] = []
    if isinstance(doc, dict):
        kind = doc.get("type")
        if isinstance(kind, str) and BUILTIN_FAMILIES.get(kind) in HIDDEN_FAMILIES:
            found.append(kind)
        for value in doc.values():
            found += _hidden_in(value)
    elif isinstance(doc, list):
        for value in doc:
            found += _hidden_in(value)
    elif isinstance(doc, str) and (doc in HIDDEN_NAMES or doc.endswith(("__execute_command", ".delete_repo"))):
        found.append(doc)
    return found


# Values the protocols define as free-form (protocols/schema.py OPAQUE_VALUES): forwarded unread,
# so a hidden tool's name written inside one (a schema's property, a call's input) is data, not
# an offer; extras are not put there.
OPAQUE_KEYS = frozenset({"parameters", "schema", "input_schema", "output_schema", "input", "input_examples"})
OPAQUE_KEYS |= {"annotations", "filters", "trigger", "arguments"}


def _objects(doc: Any, key: str = "") -> Iterator[dict[str, Any]]:
    """Every object in `doc` outside the free-form values."""
    if key in OPAQUE_KEYS:
        return
    if isinstance(doc, dict):
        yield doc
        for k, value in doc.items():
            yield from _objects(value, k)
    elif isinstance(doc, list):
        for value in doc:
            yield from _objects(value, key)


@st.composite
def nested_extras(draw: Any, body: dict[str, Any], payload: Any) -> None:
    """Add (in place) up to two random fields carrying `payload` to objects anywhere in `body`:
    a content part, a response format, a citation, a content block's source, ..."""
    objects = list(_objects(body))
    for _ in range(draw(st.integers(0, 2))):
        target = draw(st.sampled_from(objects))
        carried = json.loads(json.dumps(payload))  # a copy: `target` may be inside another one
        target[draw(EXTRA_KEYS)] = draw(st.sampled_from([carried, {"tools": carried}, [carried]]))


def _drawn(draw: Any, kind: Any, most: int) -> list[Any]:
    """Up to `most` values of the SDK type `kind`, as JSON would carry them."""
    return [_plain(draw(st.from_type(kind))) for _ in range(draw(st.integers(0, most)))]


@st.composite
def extras(draw: Any, target: dict[str, Any], payload: Any) -> None:
    """Add (in place) up to two random fields carrying `payload` (hidden tools) to `target`."""
    for _ in range(draw(st.integers(0, 2))):
        target[draw(EXTRA_KEYS)] = draw(st.sampled_from([payload, {"tools": payload}, [payload]]))


# Items that offer tools are drawn on purpose above, with the names the rules know.
_CARRYING = frozenset({"additional_tools", "tool_search_output", "mcp_list_tools"})
_BLOCK_TYPES = [
    "BetaTextBlockParam",
    "BetaImageBlockParam",
    "BetaRequestDocumentBlockParam",
    "BetaSearchResultBlockParam",
    "BetaToolUseBlockParam",
    "BetaToolResultBlockParam",
    "BetaWebSearchToolResultBlockParam",
    "BetaCodeExecutionToolResultBlockParam",
    "BetaThinkingBlockParam",
    "BetaContainerUploadBlockParam",
]


def _choice(draw: Any, forms: list[Any]) -> Any:
    return draw(st.sampled_from(forms))


@st.composite
def chat_request(draw: Any) -> dict[str, Any]:
    from openai.types.chat.chat_completion_tool_union_param import ChatCompletionToolUnionParam

    tools = []
    for _ in range(draw(st.integers(0, 3))):
        tool = _plain(draw(st.from_type(ChatCompletionToolUnionParam)))
        tool[tool["type"]]["name"] = draw(FUNCTION_NAMES)
        tools.append(tool)
    from openai.types.chat import completion_create_params as p
    from openai.types.chat.chat_completion_message_param import ChatCompletionMessageParam

    hidden = [{"type": "function", "function": {"name": "execute_command"}}]
    messages = [{"role": "user", "content": "hi"}, *_drawn(draw, ChatCompletionMessageParam, 2)]
    body: dict[str, Any] = {"model": "small-model", "messages": messages}
    for field, kind in (("response_format", p.ResponseFormat), ("prediction", p.ChatCompletionPredictionContentParam)):
        if draw(st.booleans()):
            body[field] = _plain(draw(st.from_type(kind)))
    if tools:
        body["tools"] = tools
        body["tool_choice"] = _choice(
            draw, ["auto", "none", "required", {"type": "function", "function": {"name": "read_file"}}]
        )
    for target in [body, body["messages"][0], *tools, *[t[t["type"]] for t in tools]]:
        if draw(st.integers(0, 3)) == 0:
            draw(extras(target, hidden))
    draw(nested_extras(body, hidden))
    return body


@st.composite
def responses_tool(draw: Any) -> dict[str, Any]:
    from openai.types.responses.tool_param import ToolParam

    tool = _plain(draw(st.from_type(ToolParam)))
    kind = tool["type"]
    if kind in ("function", "custom"):
        tool["name"] = draw(FUNCTION_NAMES)
    elif kind == "namespace":
        tool["name"] = "ops"
        tool["tools"] = [t for t in tool.get("tools") or [] if isinstance(t, dict)]
        for inner in tool["tools"]:
            inner["name"] = draw(FUNCTION_NAMES)
    elif kind == "mcp":
        tool["server_label"] = "github"
        names = draw(MCP_NAMES)
        tool["allowed_tools"] = draw(st.sampled_from([None, names, {"tool_names": names}, {"read_only": True}]))
    return tool


@st.composite
def responses_request(draw: Any) -> dict[str, Any]:
    from openai.types.responses.easy_input_message_param import EasyInputMessageParam
    from openai.types.responses.response_input_item_param import ResponseInputItemParam
    from openai.types.responses.response_text_config_param import ResponseTextConfigParam

    hidden = [{"type": "function", "name": "execute_command"}, {"type": "web_search_preview"}]
    tools = draw(st.lists(responses_tool(), max_size=3))
    items: list[dict[str, Any]] = [{"role": "user", "content": "hi"}, *_drawn(draw, EasyInputMessageParam, 2)]
    items += [i for i in _drawn(draw, ResponseInputItemParam, 2) if i.get("type") not in _CARRYING]
    if draw(st.booleans()):
        items.append({"type": "additional_tools", "tools": draw(st.lists(responses_tool(), min_size=1, max_size=2))})
    if draw(st.booleans()):
        names = draw(MCP_NAMES)
        listed = [{"name": n, "input_schema": {}} for n in names]
        items.append({"type": "mcp_list_tools", "id": "l1", "server_label": "github", "tools": listed})
    body: dict[str, Any] = {"model": "small-model", "input": items}
    if draw(st.booleans()):
        body["text"] = _plain(draw(st.from_type(ResponseTextConfigParam)))
    if tools:
        body["tools"] = tools
        body["tool_choice"] = _choice(draw, ["auto", "none", "required", {"type": "function", "name": "read_file"}])
    for target in [body, *items, *tools]:
        if draw(st.integers(0, 3)) == 0:
            draw(extras(target, hidden))
    draw(nested_extras(body, hidden))
    return body


@st.composite
def messages_request(draw: Any) -> dict[str, Any]:
    from anthropic.types.beta.beta_tool_union_param import BetaToolUnionParam

    tools = []
    for _ in range(draw(st.integers(0, 3))):
        tool = _plain(draw(st.from_type(BetaToolUnionParam)))
        if tool.get("type") in (None, "custom"):
            tool["name"] = draw(FUNCTION_NAMES)
        elif tool["type"] == "mcp_toolset":
            tool["mcp_server_name"] = "github"
            if tool.get("tools") is not None:
                tool["tools"] = [t for t in tool["tools"] if isinstance(t, dict)]
            for entry in tool.get("tools") or []:
                entry["name"] = draw(st.sampled_from(["list_repos", "delete_repo"]))
            if isinstance(tool.get("configs"), dict):
                tool["configs"] = {n: {"enabled": True} for n in draw(MCP_NAMES)}
        tools.append(tool)
    from anthropic.types import beta

    hidden = [{"name": "execute_command", "input_schema": {}}, {"type": "bash_20250124", "name": "bash"}]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "hi"}]
    # Block types hypothesis can draw (the whole union holds response models it cannot build).
    for kind in draw(st.lists(st.sampled_from(_BLOCK_TYPES), max_size=2)):
        blocks.append(_plain(draw(st.from_type(getattr(beta, kind)))))
    if draw(st.booleans()):
        blocks.append({"type": "tool_addition", "tool": {"name": draw(FUNCTION_NAMES), "input_schema": {}}})
    body: dict[str, Any] = {"model": "small-model", "max_tokens": 5, "messages": [{"role": "user", "content": blocks}]}
    if draw(st.booleans()):
        server: dict[str, Any] = {"type": "url", "url": "https://mcp.example", "name": "github"}
        if draw(st.booleans()):
            server["tool_configuration"] = {"allowed_tools": draw(MCP_NAMES)}
        body["mcp_servers"] = [server]
    if tools:
        body["tools"] = tools
        body["tool_choice"] = _choice(draw, [{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "read_file"}])
    for target in [body, body["messages"][0], *blocks, *tools]:
        if draw(st.integers(0, 3)) == 0:
            draw(extras(target, hidden))
    draw(nested_extras(body, hidden))
    return body


@pytest.fixture(scope="module")
def request_rigs(tmp_path_factory: pytest.TempPathFactory, default_suite: Any) -> Iterator[list[Any]]:
    """(upstream, proxy) for each of: native / translated x refuse / drop."""
    from contextlib import ExitStack

    from upstreams import NativeServer

    store = tmp_path_factory.mktemp("request-props") / "models_profile.json"
    seed_store(store, make_profile("small-model", Tier.SMALL, default_suite))
    rigs = []
    with ExitStack() as stack:
        for protocols in (["chat", "responses", "messages"], ["chat"]):
            for mode in ("refuse", "drop"):
                upstream = stack.enter_context(NativeServer(lambda body: {"content": "ok"}))
                upstream_settings = {"base_url": upstream.base_url, "protocols": protocols, "unknown_fields": mode}
                settings = settings_for(upstream.base_url, store, upstream=upstream_settings, tools=REQUEST_RULES)
                rigs.append((upstream, stack.enter_context(running_proxy(settings))))
        yield rigs


def _no_hidden_tool_reaches_the_upstream(rigs: list[Any], path: str, body: dict[str, Any]) -> None:
    for upstream, proxy in rigs:
        before = len(upstream.requests) + len(upstream.responses_requests) + len(upstream.messages_requests)
        answer = httpx.post(proxy.url + path, json=body, timeout=30)
        assert answer.status_code in (200, 400), answer.text
        received = (upstream.requests + upstream.responses_requests + upstream.messages_requests)[before:]
        assert (answer.status_code == 200) == bool(received)
        for sent in received:
            assert not _hidden_in(sent), f"{_hidden_in(sent)} reached the upstream from {body}"
        hypothesis.event(f"{answer.status_code}")


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(body=chat_request())
def test_no_hidden_tool_reaches_the_upstream_chat(request_rigs: list[Any], body: dict[str, Any]):
    _no_hidden_tool_reaches_the_upstream(request_rigs, "/v1/chat/completions", body)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(body=responses_request())
def test_no_hidden_tool_reaches_the_upstream_responses(request_rigs: list[Any], body: dict[str, Any]):
    _no_hidden_tool_reaches_the_upstream(request_rigs, "/v1/responses", body)


# Found by draws before (issue 30): a toolset's `configs` (gated, and forwarded unread) carrying
# an extra field with hidden tools, under a member's name or a key that is no member.
_TOOLSET_CONFIGS = [
    {"navigate": {"enabled": True, "tools": [{"name": "execute_command", "input_schema": {}}]}},
    {"tools": [{"name": "execute_command", "input_schema": {}}]},
]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(body=messages_request())
@example(
    body={
        "model": "small-model",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "browser_toolset_20260801", "configs": _TOOLSET_CONFIGS[0]}],
    }
)
@example(
    body={
        "model": "small-model",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "browser_toolset_20260801", "configs": _TOOLSET_CONFIGS[1]}],
    }
)
def test_no_hidden_tool_reaches_the_upstream_messages(request_rigs: list[Any], body: dict[str, Any]):
    _no_hidden_tool_reaches_the_upstream(request_rigs, "/v1/messages", body)
