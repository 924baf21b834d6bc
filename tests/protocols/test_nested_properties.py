"""Properties of nested members: for any request whose tools carry tools of their own (a Messages
computer or browser toolset's `configs`, an `mcp_toolset`'s configs, pinned listing and default, an
`mcp_servers` entry, a typed tool and the name it carries, `tool_addition` blocks; a Responses
`namespace`, `mcp` server, `tool_search_output` and `additional_tools` item; chat function,
custom and legacy tools and every `tool_choice` form), no hidden tool is reachable in what the
upstream receives, under any reading of the protocol (a config key not turned off counts as
enabled, a server entry without a tool list as every tool). Members are drawn from the installed
SDKs' types (hypothesis.from_type) and from the gate's own member tables, with fields and hidden
tools added where no type puts them.

The pipeline is the proxy's own (gatekeeper.server.app), in process, in front of an in-package
`MockUpstream` that records each request: native and translated, under both
`upstream.unknown_fields` modes. Derandomized, and every case a review found is an @example, so
no run depends on a lucky draw; tests/protocols/test_nested_members.py pins each found case
through the real proxy on a real port."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import make_profile, seed_store, settings_for
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scripted import chat_completion
from starlette.testclient import TestClient

from gatekeeper import Gatekeeper
from gatekeeper.protocols.messages import fields as messages_fields
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import BUILTIN_FAMILIES
from gatekeeper.server.app import create_app
from gatekeeper.server.mock import MockAnswer, MockUpstream
from gatekeeper.server.upstream import UpstreamRequest

RULES = {
    "execute_command": "large",
    "str_replace_based_edit_tool": "large",
    "javascript_exec": "large",
    "computer.zoom": "large",
    "github.delete_*": "large",
    "web_search": "large",
    "bash": "large",
    "shell": "large",
}
HIDDEN_NAMES = frozenset({"execute_command", "str_replace_based_edit_tool", "javascript_exec", "web_search", "bash"})
HIDDEN_NAMES |= {"shell"}
HIDDEN_FAMILIES = frozenset({"web_search", "bash", "shell"})
NAMES = st.sampled_from(["read_file", "execute_command", "str_replace_based_edit_tool", "bash", "navigate"])
MCP_NAMES = st.lists(st.sampled_from(["list_repos", "delete_repo", "execute_command"]), max_size=3, unique=True)
GITHUB_URL = "https://mcp.example/github"
OBJECT = {"type": "object", "properties": {}}
JUNK = st.sampled_from(["execute_command", {"name": "execute_command"}, [{"type": "bash_20250124", "name": "bash"}]])
# Free-form values (protocols/schema.py OPAQUE_VALUES): a name there is data, not an offer.
OPAQUE_KEYS = frozenset({"parameters", "schema", "input_schema", "output_schema", "input", "arguments"})


def hidden_mcp(name: Any) -> bool:
    return isinstance(name, str) and (name in HIDDEN_NAMES or name.startswith("delete_"))


def hidden_member(family: str, name: str) -> bool:
    return name in HIDDEN_NAMES or (family, name) == ("computer", "zoom")


# -- the oracle: what a body lets the model reach -------------------------------------------------


def named(doc: Any, key: str = "") -> list[str]:
    """Every hidden name written as a value anywhere outside the free-form values, and every
    object whose `type` is of a hidden family."""
    if key in OPAQUE_KEYS:
        return []
    if isinstance(doc, dict):
        kind = doc.get("type")
        found = [kind] if isinstance(kind, str) and BUILTIN_FAMILIES.get(kind) in HIDDEN_FAMILIES else []
        return found + [n for k, v in doc.items() for n in named(v, k)]
    if isinstance(doc, list):
        return [n for v in doc for n in named(v, key)]
    return [doc] if hidden_mcp(doc) else []


def messages_reachable(body: dict[str, Any]) -> list[str]:
    """Hidden tools a Messages body offers: toolset members not turned off, `mcp_toolset` config
    keys not turned off, and a server some form (its entry, its toolset) leaves whole."""
    found = named({k: v for k, v in body.items() if k != "tools"})
    tools = list(body.get("tools") or [])
    for message in body.get("messages") or []:
        for block in message["content"] if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_addition":
                tools.append(block["tool"])
    forms: list[list[str] | None] = []
    for entry in body.get("mcp_servers") or []:
        forms.append((entry.get("tool_configuration") or {}).get("allowed_tools"))
    for tool in tools:
        kind = tool.get("type")
        configs = tool.get("configs") or {}
        found += named({k: v for k, v in tool.items() if k != "configs"})
        if kind in messages_fields.MESSAGES_TOOLSET_MEMBERS:
            family = BUILTIN_FAMILIES[kind]
            found += [
                f"{family}.{m}"
                for m in messages_fields.MESSAGES_TOOLSET_MEMBERS[kind]
                if (configs.get(m) or {}).get("enabled") is not False and hidden_member(family, m)
            ]
            found += [f"{family}.{k}" for k in configs if k not in messages_fields.MESSAGES_TOOLSET_MEMBERS[kind]]
        elif kind == "mcp_toolset":
            found += [
                f"github.{n}" for n, c in configs.items() if (c or {}).get("enabled") is not False and hidden_mcp(n)
            ]
            if tool.get("tools") is not None:
                forms.append([t["name"] for t in tool["tools"]])
            elif (tool.get("default_config") or {}).get("enabled") is False:
                forms.append([n for n, c in configs.items() if c.get("enabled") is True])
            else:
                forms.append(None)
    found += ["github.*" for form in forms if form is None]
    return found + [f"github.{n}" for form in forms for n in form or [] if hidden_mcp(n)]


def responses_reachable(body: dict[str, Any]) -> list[str]:
    found = named(body)
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    tools = [*(body.get("tools") or []), *(t for i in items for t in i.get("tools") or [])]
    return found + ["github.*" for t in tools if t.get("type") == "mcp" and t.get("allowed_tools") is None]


REACHABLE = {"chat": named, "responses": responses_reachable, "messages": messages_reachable}


# -- the pipeline ---------------------------------------------------------------------------------

_ANSWERS = {
    "/chat/completions": chat_completion({"content": "ok"}),
    "/responses": {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "m",
        "output": [],
        "tools": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
    },
    "/messages": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
}


def _answer(request: UpstreamRequest) -> MockAnswer:
    return MockAnswer.json(_ANSWERS[request.path])


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory, default_suite: Any) -> Iterator[list[Any]]:
    """(upstream, client) for each of: native / translated x refuse / drop."""
    store = tmp_path_factory.mktemp("nested-props") / "models_profile.json"
    seed_store(store, make_profile("small-model", Tier.SMALL, default_suite))
    made = []
    for protocols in (("chat", "responses", "messages"), ("chat",)):
        for mode in ("refuse", "drop"):
            upstream = MockUpstream(_answer, protocols=protocols)
            upstream_settings = {"base_url": "http://upstream.invalid/v1", "protocols": list(protocols)}
            gk = Gatekeeper(
                settings_for(
                    "http://upstream.invalid/v1",
                    store,
                    upstream=upstream_settings | {"unknown_fields": mode},
                    tools={"default_tier": "small", "required_tier": RULES},
                )
            )
            made.append((gk, upstream, TestClient(create_app(gk, upstream=upstream))))
    for _, _, client in made:
        client.__enter__()
    yield [(upstream, client) for _, upstream, client in made]
    for gk, _, client in made:
        client.__exit__(None, None, None)
        gk.close()


def no_hidden_tool_is_reachable(pipelines: list[Any], protocol: str, body: dict[str, Any]) -> None:
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}[protocol]
    for upstream, client in pipelines:
        before = len(upstream.requests)
        answer = client.post(path, json=json.loads(json.dumps(body)))
        assert answer.status_code in (200, 400), answer.text
        received = upstream.requests[before:]
        assert (answer.status_code == 200) == bool(received), answer.text
        for request in received:
            reach = REACHABLE[protocol if request.path != "/chat/completions" else "chat"]
            assert not reach(request.body), f"{reach(request.body)} reachable upstream from {body}"


# -- requests with nested members -----------------------------------------------------------------


def junk(draw: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj`, sometimes with a field no type has, carrying a hidden tool."""
    if draw(st.integers(0, 4)) == 0:
        obj[draw(st.sampled_from(["tools", "name", "configs", "enabled_tools", "x"]))] = draw(JUNK)
    return obj


MEMBER_CONFIG = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"enabled": st.booleans(), "defer_loading": st.booleans()}),
)


@st.composite
def member_toolset(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(messages_fields.MESSAGES_TOOLSET_MEMBERS)))
    keys = st.sampled_from([*sorted(messages_fields.MESSAGES_TOOLSET_MEMBERS[kind]), "execute_command", "ghost"])
    tool: dict[str, Any] = {"type": kind}
    if draw(st.booleans()):
        configs = draw(st.dictionaries(keys, MEMBER_CONFIG, max_size=5))
        tool["configs"] = {k: junk(draw, c) if isinstance(c, dict) else c for k, c in configs.items()}
    return junk(draw, tool)


@st.composite
def sdk_tool(draw: Any) -> dict[str, Any]:
    """A Messages tool drawn from the SDK's union, named from the names the rules know (a typed
    tool under its fixed name, mostly)."""
    from anthropic.types.beta.beta_tool_union_param import BetaToolUnionParam

    tool = json.loads(json.dumps(draw(st.from_type(BetaToolUnionParam)), default=lambda o: None))
    kind = tool.get("type")
    if kind in (None, "custom"):
        tool["name"] = draw(NAMES)
    elif kind == "mcp_toolset":
        return draw(mcp_toolset())
    elif kind in messages_fields.MESSAGES_BUILTIN_NAMES:
        tool["name"] = draw(st.sampled_from([messages_fields.MESSAGES_BUILTIN_NAMES[kind]] * 3 + ["read_file"]))
    return junk(draw, tool)


@st.composite
def mcp_toolset(draw: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "mcp_toolset", "mcp_server_name": "github"}
    if draw(st.booleans()):
        tool["tools"] = [{"name": n, "input_schema": OBJECT} for n in draw(MCP_NAMES)]
    if draw(st.booleans()):
        tool["default_config"] = {"enabled": draw(st.booleans())}
    if draw(st.booleans()):
        enabled = st.fixed_dictionaries({}, optional={"enabled": st.booleans(), "defer_loading": st.booleans()})
        tool["configs"] = {n: junk(draw, draw(enabled)) for n in draw(MCP_NAMES)}
    return tool


@st.composite
def typed_tool(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(messages_fields.MESSAGES_BUILTIN_NAMES)))
    fixed = messages_fields.MESSAGES_BUILTIN_NAMES[kind]
    return {"type": kind, "name": draw(st.sampled_from([fixed, fixed, "read_file", "execute_command"]))}


@st.composite
def messages_request(draw: Any) -> dict[str, Any]:
    tool = st.one_of(sdk_tool(), member_toolset(), mcp_toolset(), typed_tool())
    tools = draw(st.lists(tool, max_size=3))
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "hi"}]
    for added in draw(st.lists(st.one_of(typed_tool(), member_toolset()), max_size=1)):
        blocks.append({"type": "tool_addition", "tool": added})
    body: dict[str, Any] = {"model": "small-model", "max_tokens": 5, "messages": [{"role": "user", "content": blocks}]}
    if draw(st.booleans()):
        server: dict[str, Any] = {"type": "url", "url": GITHUB_URL, "name": "github"}
        if draw(st.booleans()):
            server["tool_configuration"] = {"allowed_tools": draw(MCP_NAMES)}
        body["mcp_servers"] = [junk(draw, server)]
    if tools:
        body["tools"] = tools
        body["tool_choice"] = draw(
            st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "bash"}])
        )
    return body


@st.composite
def responses_tool(draw: Any) -> dict[str, Any]:
    function = st.builds(lambda n: {"type": "function", "name": n, "parameters": OBJECT}, NAMES)
    custom = st.builds(lambda n: {"type": "custom", "name": n}, NAMES)
    namespace = st.builds(
        lambda inner: {"type": "namespace", "name": "ops", "description": "d", "tools": inner},
        st.lists(st.one_of(function, custom), min_size=1, max_size=3),
    )
    names = draw(MCP_NAMES)
    mcp = st.sampled_from(
        [
            {"type": "mcp", "server_label": "github", "server_url": GITHUB_URL},
            {"type": "mcp", "server_label": "github", "server_url": GITHUB_URL, "allowed_tools": names},
            {"type": "mcp", "server_label": "github", "server_url": GITHUB_URL, "allowed_tools": {"tool_names": names}},
            {"type": "mcp", "server_label": "github", "server_url": GITHUB_URL, "allowed_tools": {"read_only": True}},
        ]
    )
    builtin = st.sampled_from(
        [{"type": "web_search"}, {"type": "shell"}, {"type": "file_search", "vector_store_ids": []}]
    )
    return junk(draw, draw(st.one_of(function, custom, namespace, mcp, builtin)))


@st.composite
def responses_request(draw: Any) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    if draw(st.booleans()):
        items.append({"type": "additional_tools", "tools": draw(st.lists(responses_tool(), min_size=1, max_size=2))})
    if draw(st.booleans()):
        listed = [{"name": n, "input_schema": OBJECT} for n in draw(MCP_NAMES)]
        items.append({"type": "mcp_list_tools", "id": "l1", "server_label": "github", "tools": listed})
    body: dict[str, Any] = {"model": "small-model", "input": items}
    tools = draw(st.lists(responses_tool(), max_size=3))
    if tools:
        body["tools"] = tools
        choice = st.sampled_from(
            [
                "required",
                {"type": "function", "name": "execute_command"},
                {"type": "mcp", "server_label": "github", "name": "delete_repo"},
                {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "bash"}]},
            ]
        )
        body["tool_choice"] = draw(choice)
    return body


@st.composite
def chat_request(draw: Any) -> dict[str, Any]:
    function = st.builds(lambda n: {"type": "function", "function": {"name": n, "parameters": OBJECT}}, NAMES)
    custom = st.builds(lambda n: {"type": "custom", "custom": {"name": n}}, NAMES)
    tools = [junk(draw, t) for t in draw(st.lists(st.one_of(function, custom), max_size=3))]
    body: dict[str, Any] = {"model": "small-model", "messages": [{"role": "user", "content": "hi"}]}
    if tools:
        body["tools"] = tools
        body["tool_choice"] = draw(
            st.sampled_from(
                [
                    "required",
                    {"type": "function", "function": {"name": "execute_command"}},
                    {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": tools}},
                ]
            )
        )
    if draw(st.booleans()):
        body["functions"] = [{"name": n, "parameters": OBJECT} for n in draw(st.lists(NAMES, max_size=2))]
    return body


# -- the properties -------------------------------------------------------------------------------

_SETTINGS = settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
_EDITOR = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}
_HI = [{"role": "user", "content": "hi"}]


@_SETTINGS
@given(body=messages_request())
# The review's cases (issue 30's hostile kit, issue 32's MCP item), each pinned.
@example(body={"model": "small-model", "max_tokens": 5, "messages": _HI, "tools": [_EDITOR]})
@example(
    body={
        "model": "small-model",
        "max_tokens": 5,
        "messages": _HI,
        "tools": [{"type": "browser_toolset_20260801", "configs": {"javascript_exec": {"enabled": True}}}],
    }
)
@example(
    body={
        "model": "small-model",
        "max_tokens": 5,
        "messages": _HI,
        "mcp_servers": [{"type": "url", "url": GITHUB_URL, "name": "github"}],
        "tools": [
            {
                "type": "mcp_toolset",
                "mcp_server_name": "github",
                "tools": [{"name": "list_repos", "input_schema": OBJECT}],
                "configs": {"delete_repo": {"enabled": True}},
            }
        ],
    }
)
@example(
    body={
        "model": "small-model",
        "max_tokens": 5,
        "messages": _HI,
        "mcp_servers": [{"type": "url", "url": GITHUB_URL, "name": "github"}],
        "tools": [
            {
                "type": "mcp_toolset",
                "mcp_server_name": "github",
                "default_config": {"enabled": False},
                "configs": {"list_repos": {"enabled": True}},
            }
        ],
    }
)
def test_no_hidden_nested_member_reaches_the_upstream_messages(pipelines: list[Any], body: dict[str, Any]):
    no_hidden_tool_is_reachable(pipelines, "messages", body)


@_SETTINGS
@given(body=responses_request())
def test_no_hidden_nested_member_reaches_the_upstream_responses(pipelines: list[Any], body: dict[str, Any]):
    no_hidden_tool_is_reachable(pipelines, "responses", body)


@_SETTINGS
@given(body=chat_request())
def test_no_hidden_nested_member_reaches_the_upstream_chat(pipelines: list[Any], body: dict[str, Any]):
    no_hidden_tool_is_reachable(pipelines, "chat", body)
