"""The answer side of the gate, codec by codec (pure; tests/protocols/test_answer_proxy.py runs the
same instances through the real proxy): a call is kept only on an exact kind-and-name match with
an offered tool, every item type is known or removed, MCP calls are judged per tool, removed calls
are explained or stripped, and streams cut before their end marker are errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.errors import AnswerIncomplete, AnswerInvalid
from gatekeeper.protocols.base import Allowed, Event
from gatekeeper.protocols.chat.codec import ChatCodec
from gatekeeper.protocols.messages.answer import _SERVER_CALLS, _TOOL_USE_NAMES
from gatekeeper.protocols.messages.codec import MessagesCodec
from gatekeeper.protocols.responses.answer import _BUILTIN_CALLS
from gatekeeper.protocols.responses.codec import ResponsesCodec
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import BUILTIN_FAMILIES, ToolId, ToolPolicy

C, R, M = ChatCodec(), ResponsesCodec(), MessagesCodec()
POLICY = ToolPolicy({"execute_command": Tier.LARGE, "github.delete_*": Tier.LARGE, "computer": Tier.LARGE})


def fn(name: str) -> dict:
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


def responses_allowed(*tools: dict, explain: bool = False) -> Allowed:
    return Allowed(R.offered({"tools": list(tools)}), Tier.SMALL, POLICY, explain)


def messages_allowed(body: dict, explain: bool = False) -> Allowed:
    return Allowed(M.offered(body), Tier.SMALL, POLICY, explain)


# -- exact kinds ---------------------------------------------------------------------------

LOOKALIKES = [
    ("computer_call", "computer_notes", {"type": "computer_use_preview", "display_width": 1, "display_height": 1}),
    ("local_shell_call", "local_shell_notes", {"type": "local_shell"}),
    ("shell_call", "shell_history", {"type": "shell"}),
    ("apply_patch_call", "apply_patch_preview", {"type": "apply_patch"}),
    ("code_interpreter_call", "code_interpreter_help", {"type": "code_interpreter", "container": {"type": "auto"}}),
    ("web_search_call", "web_search_notes", {"type": "web_search_preview"}),
    ("file_search_call", "file_search_notes", {"type": "file_search", "vector_store_ids": ["v"]}),
    ("image_generation_call", "image_generation_notes", {"type": "image_generation"}),
]


@pytest.mark.parametrize(("item_type", "lookalike", "builtin"), LOOKALIKES)
def test_a_builtin_call_needs_its_builtin_not_a_function_named_alike(item_type, lookalike, builtin):
    item = {"type": item_type, "id": "x1", "call_id": "c1", "status": "completed"}
    doc = {"output": [dict(item)]}
    result = R.enforce(doc, responses_allowed(fn(lookalike)))
    assert doc["output"] == [] and result.removed == [item_type]
    doc = {"output": [dict(item)]}
    assert R.enforce(doc, responses_allowed(builtin)).removed == [] and len(doc["output"]) == 1


def test_builtin_call_table_names_only_known_builtin_types():
    for item_type, types in _BUILTIN_CALLS.items():
        assert set(types) <= set(BUILTIN_FAMILIES), item_type
    for types in _SERVER_CALLS.values():
        assert types and set(types) <= set(BUILTIN_FAMILIES)
    assert set(_TOOL_USE_NAMES) <= set(BUILTIN_FAMILIES)


def test_a_builtin_named_like_a_function_offers_no_function():
    """`{"type": "web_search", "name": "read_file"}` offers the built-in, not a read_file function."""
    doc = {"output": [{"type": "function_call", "name": "read_file", "arguments": "{}", "call_id": "c"}]}
    assert R.enforce(doc, responses_allowed({"type": "web_search", "name": "read_file"})).removed == ["read_file"]


def test_a_custom_call_needs_a_custom_tool_and_a_function_call_a_function():
    doc = {"output": [{"type": "custom_tool_call", "name": "read_file", "input": "x", "call_id": "c"}]}
    assert R.enforce(doc, responses_allowed(fn("read_file"))).removed == ["read_file"]
    chat = {
        "choices": [{"message": {"tool_calls": [{"type": "custom", "custom": {"name": "read_file", "input": ""}}]}}]
    }
    assert C.enforce(chat, {"read_file": None}).removed == ["read_file"]


def test_a_chat_call_whose_type_disagrees_with_its_key_is_removed():
    call = {"type": "custom", "function": {"name": "read_file", "arguments": "{}"}}
    chat = {"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    assert C.enforce(chat, {"read_file": None}).removed == ["read_file"]
    assert chat["choices"][0]["finish_reason"] == "stop"


def test_a_namespaced_call_needs_its_namespace():
    body = {"tools": [{"type": "namespace", "name": "ns", "description": "d", "tools": [fn("read_file")]}]}
    allow = Allowed(R.offered(body))
    plain = {"output": [{"type": "function_call", "name": "read_file", "arguments": "{}", "call_id": "c"}]}
    assert R.enforce(plain, allow).removed == ["read_file"]
    spaced = {"output": [{"type": "function_call", "namespace": "ns", "name": "read_file", "arguments": "{}"}]}
    assert R.enforce(spaced, allow).removed == []


@pytest.mark.parametrize("item_type", ["function_call_output_v2", "evil_output", "search_result", "document"])
def test_an_unknown_item_type_is_removed_even_when_it_looks_harmless(item_type):
    doc = {"output": [{"type": item_type, "call_id": "c"}]}
    R.enforce(doc, responses_allowed())
    assert doc["output"] == []
    message = {"content": [{"type": item_type, "tool_use_id": "t"}]}
    M.enforce(message, messages_allowed({}))
    assert message["content"] == []


def test_the_output_of_a_removed_call_goes_with_it():
    doc = {
        "output": [
            {"type": "computer_call", "id": "cu1", "call_id": "c1", "action": {"type": "screenshot"}},
            {"type": "computer_call_output", "call_id": "c1", "output": {"type": "computer_screenshot"}},
            {"type": "function_call_output", "call_id": "other", "output": "kept"},
        ]
    }
    R.enforce(doc, responses_allowed(fn("computer_notes")))
    assert [i["type"] for i in doc["output"]] == ["function_call_output"]


def test_messages_server_tool_needs_the_server_tool_not_a_custom_tool_of_its_name():
    block = {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "q"}}
    result_block = {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []}
    custom = {"tools": [{"name": "web_search", "input_schema": {"type": "object"}}]}
    message = {"content": [dict(block), dict(result_block)]}
    assert M.enforce(message, messages_allowed(custom)).removed == ["web_search"]
    assert message["content"] == []
    server = {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    message = {"content": [dict(block), dict(result_block)]}
    assert M.enforce(message, messages_allowed(server)).removed == []
    assert [b["type"] for b in message["content"]] == ["server_tool_use", "web_search_tool_result"]


def test_messages_client_builtin_is_called_by_its_fixed_name():
    call = {"type": "tool_use", "id": "t", "name": "bash", "input": {"command": "ls"}}
    bash = {"tools": [{"type": "bash_20250124", "name": "bash"}]}
    assert M.enforce({"content": [dict(call)]}, messages_allowed(bash)).removed == []
    renamed = {"tools": [{"type": "bash_20250124", "name": "read_file"}]}
    assert M.enforce({"content": [dict(call, name="read_file")]}, messages_allowed(renamed)).removed == ["read_file"]


# -- MCP calls, per tool -------------------------------------------------------------------

GITHUB = {"type": "mcp", "server_label": "github", "server_url": "https://mcp.example/github"}


@pytest.mark.parametrize("item_type", ["mcp_call", "mcp_approval_request"])
def test_an_mcp_call_of_a_whole_server_is_kept_only_for_tools_the_tier_admits(item_type):
    doc = {
        "output": [
            {"type": item_type, "id": "m1", "server_label": "github", "name": "delete_repo", "arguments": "{}"},
            {"type": item_type, "id": "m2", "server_label": "github", "name": "list_repos", "arguments": "{}"},
        ]
    }
    result = R.enforce(doc, responses_allowed(GITHUB))
    assert result.removed == ["github.delete_repo"] and [i["name"] for i in doc["output"]] == ["list_repos"]


def test_a_whole_server_admits_nothing_without_the_tier_rules():
    doc = {"output": [{"type": "mcp_call", "id": "m", "server_label": "github", "name": "list_repos"}]}
    assert R.enforce(doc, Allowed(R.offered({"tools": [GITHUB]}))).removed == ["github.list_repos"]


def test_an_mcp_listing_shows_only_the_tools_the_tier_admits():
    listing = {
        "type": "mcp_list_tools",
        "id": "l",
        "server_label": "github",
        "tools": [{"name": "delete_repo", "input_schema": {}}, {"name": "list_repos", "input_schema": {}}],
    }
    doc = {"output": [listing]}
    R.enforce(doc, responses_allowed(GITHUB))
    assert [t["name"] for t in doc["output"][0]["tools"]] == ["list_repos"]
    doc = {"output": [dict(listing, server_label="other")]}
    assert R.enforce(doc, responses_allowed(GITHUB)).removed == ["other.*"] and doc["output"] == []


def test_messages_mcp_tool_use_of_a_whole_server_is_judged_per_tool():
    body = {"mcp_servers": [{"type": "url", "name": "github", "url": "https://mcp.example/github"}]}
    message = {
        "stop_reason": "tool_use",
        "content": [
            {"type": "mcp_tool_use", "id": "u1", "server_name": "github", "name": "delete_repo", "input": {}},
            {"type": "mcp_tool_result", "tool_use_id": "u1", "content": []},
            {"type": "mcp_tool_use", "id": "u2", "server_name": "github", "name": "list_repos", "input": {}},
        ],
    }
    assert M.enforce(message, messages_allowed(body)).removed == ["github.delete_repo"]
    assert [b.get("name") for b in message["content"]] == ["list_repos"]


# -- blocked_calls: explain ----------------------------------------------------------------


def test_explain_replaces_a_removed_chat_call_with_text_naming_tool_and_tier():
    chat = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [{"function": {"name": "execute_command", "arguments": ""}}],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    allow = Allowed(C.offered({"tools": []}), Tier.SMALL, POLICY, explain=True)
    C.enforce(chat, allow)
    choice = chat["choices"][0]
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"
    assert "execute_command" in choice["message"]["content"] and "tier large" in choice["message"]["content"]


@pytest.mark.parametrize("explain", [False, True])
def test_a_chat_answer_with_a_null_function_call_whose_calls_are_all_removed_finishes_with_stop(explain):
    # `"function_call": null` beside the calls (LiteLLM's answers, an SDK object dumped with its
    # nulls) is no legacy call left: the client must not be told to run calls that are not there.
    call = {"id": "c1", "type": "function", "function": {"name": "execute_command", "arguments": "{}"}}
    chat = {
        "choices": [
            {
                "message": {"role": "assistant", "content": None, "function_call": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ]
    }
    C.enforce(chat, Allowed(C.offered({"tools": []}), Tier.SMALL, POLICY, explain=explain))
    choice = chat["choices"][0]
    assert not choice["message"].get("tool_calls") and choice["finish_reason"] == "stop"


def test_explain_says_not_offered_for_a_tool_the_tier_would_allow():
    doc = {"output": [{"type": "function_call", "name": "invented", "arguments": "{}", "call_id": "c"}]}
    R.enforce(doc, responses_allowed(explain=True))
    assert doc["output"][0]["type"] == "message"
    assert "did not offer" in doc["output"][0]["content"][0]["text"]


def test_explain_never_shows_a_model_name_raw():
    name = "x`" + "\u202e" * 3 + "y" * 500
    doc = {"output": [{"type": "function_call", "name": name, "arguments": "{}", "call_id": "c"}]}
    R.enforce(doc, responses_allowed(explain=True))
    text = doc["output"][0]["content"][0]["text"]
    assert "`x?" in text and "\u202e" not in text and len(text) < 200


def test_strip_removes_without_a_trace():
    message = {"content": [{"type": "tool_use", "id": "t", "name": "execute_command", "input": {}}]}
    M.enforce(message, messages_allowed({}))
    assert message["content"] == []


def ev(doc: dict) -> Event:
    return Event(json.dumps(doc), doc["type"])


def test_explained_responses_stream_sends_a_whole_message_in_the_call_s_place():
    hidden = {"type": "function_call", "id": "fc1", "call_id": "c1", "name": "execute_command", "arguments": ""}
    docs = [
        {"type": "response.created", "response": {"id": "r", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": hidden},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc1", "delta": "{}"},
        {"type": "response.output_item.done", "output_index": 0, "item": hidden | {"arguments": "{}"}},
        {"type": "response.completed", "response": {"id": "r", "output": [hidden | {"arguments": "{}"}]}},
    ]
    flt = R.stream_filter(responses_allowed(explain=True))
    out = [json.loads(e.data) for d in docs for e in flt.feed(ev(d))]
    assert [d["type"] for d in out] == [
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [d["sequence_number"] for d in out] == list(range(8))
    final = out[-1]["response"]["output"]
    assert [i["type"] for i in final] == ["message"] and final[0]["id"] == out[1]["item"]["id"]
    assert flt.result.removed == ["execute_command"] and flt.finish() == []


def test_explained_messages_stream_sends_a_text_block_in_the_call_s_place():
    docs = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "x"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    ]
    flt = M.stream_filter(messages_allowed({}, explain=True))
    out = [json.loads(e.data) for d in docs for e in flt.feed(ev(d))]
    assert [(d["type"], d.get("index")) for d in out] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert out[1]["content_block"]["type"] == "text" and "`x`" in out[2]["delta"]["text"]
    assert out[4]["delta"]["stop_reason"] == "end_turn"


# -- streams end at their end marker -------------------------------------------------------


def test_responses_stream_cut_before_completed_is_incomplete():
    flt = R.stream_filter(responses_allowed())
    flt.feed(ev({"type": "response.created", "response": {"id": "r", "output": []}}))
    with pytest.raises(AnswerIncomplete, match=r"response\.completed"):
        flt.finish()
    error = json.loads(flt.error("cut", "upstream_error", "upstream_incomplete").data)
    assert error["type"] == "error" and error["sequence_number"] == 1 and error["error"]["message"] == "cut"


def test_messages_stream_cut_before_message_stop_is_incomplete():
    flt = M.stream_filter(messages_allowed({}))
    flt.feed(ev({"type": "message_start", "message": {"id": "m", "content": []}}))
    with pytest.raises(AnswerIncomplete, match="message_stop"):
        flt.finish()


def test_nothing_after_the_end_marker_reaches_the_client():
    flt = M.stream_filter(messages_allowed({}))
    flt.feed(ev({"type": "message_stop"}))
    late = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "name": "x", "id": "t"}}
    assert flt.feed(ev(late)) == [] and flt.finish() == []
    flt = R.stream_filter(responses_allowed())
    flt.feed(ev({"type": "response.completed", "response": {"id": "r", "output": []}}))
    assert flt.feed(Event("[DONE]")) == [] and flt.feed(ev({"type": "response.in_progress"})) == []


def test_an_upstream_responses_error_event_ends_the_stream_as_an_error_the_client_raises():
    flt = R.stream_filter(responses_allowed())
    out = flt.feed(ev({"type": "error", "code": "server_error", "message": "boom", "param": None}))
    assert json.loads(out[0].data)["error"] == {"type": "upstream_error", "code": "server_error", "message": "boom"}
    assert flt.finish() == []


def test_offered_is_typed_and_keeps_schemas_for_the_drift_tracker():
    offered = R.offered({"tools": [fn("read_file"), {"type": "web_search", "name": "read_file"}]})
    assert offered.tools == {ToolId.function("read_file"), ToolId.builtin("web_search")}
    assert offered["read_file"] == {"type": "object", "properties": {}}


def test_blocked_calls_defaults_to_explain_and_refuses_other_values():
    from gatekeeper.config import Settings
    from gatekeeper.errors import ConfigError

    assert Settings().blocked_calls == "explain"
    assert Settings.model_validate({"blocked_calls": "strip"}).blocked_calls == "strip"
    with pytest.raises((ConfigError, ValueError), match="blocked_calls"):
        Settings.model_validate({"blocked_calls": "hide"})


def test_the_known_responses_item_events_are_the_sdk_s():
    import typing

    from openai.types.responses.response_stream_event import ResponseStreamEvent

    from gatekeeper.protocols.responses.answer import _ITEM_EVENTS, _KNOWN_EVENTS

    members = typing.get_args(typing.get_args(ResponseStreamEvent)[0])
    kinds = {typing.get_args(m.model_fields["type"].annotation)[0]: "output_index" in m.model_fields for m in members}
    assert {k for k, has_index in kinds.items() if has_index} == _ITEM_EVENTS
    assert set(kinds) == _KNOWN_EVENTS


def test_an_event_of_a_type_the_codec_does_not_know_is_dropped():
    flt = R.stream_filter(responses_allowed())
    assert flt.feed(ev({"type": "response.tool_preview.delta", "item_id": "fc_hidden", "delta": "rm -rf"})) == []
    flt = M.stream_filter(messages_allowed({}))
    assert flt.feed(ev({"type": "tool_use_preview", "name": "execute_command"})) == []


def test_an_item_event_without_its_output_index_is_unreadable():
    flt = R.stream_filter(responses_allowed())
    with pytest.raises(AnswerInvalid):
        flt.feed(ev({"type": "response.function_call_arguments.delta", "item_id": "fc_hidden", "delta": "{}"}))


def test_a_content_delta_of_an_unknown_type_is_dropped():
    flt = M.stream_filter(messages_allowed({}))
    flt.feed(ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))
    assert flt.feed(ev({"type": "content_block_delta", "index": 0, "delta": {"type": "tool_delta", "x": 1}})) == []


def test_a_kept_call_of_a_whole_mcp_server_is_one_the_drift_tracker_finds_offered():
    from gatekeeper.drift.window import classify

    allow = responses_allowed(GITHUB)
    doc = {"output": [{"type": "mcp_call", "id": "m", "server_label": "github", "name": "list_repos"}]}
    (call,) = R.enforce(doc, allow).calls
    assert call.offered and "github.list_repos" in allow.offered and classify(call, allow.offered) is None
    assert "other.list_repos" not in allow.offered


def test_free_form_custom_input_is_not_given_to_the_drift_tracker_as_json():
    doc = {"output": [{"type": "custom_tool_call", "name": "patch", "input": "*** Begin", "call_id": "c"}]}
    (call,) = R.enforce(doc, responses_allowed({"type": "custom", "name": "patch"})).calls
    assert call.offered and call.arguments is None
    chat = {"choices": [{"message": {"tool_calls": [{"type": "custom", "custom": {"name": "patch", "input": "x"}}]}}]}
    (call,) = C.enforce(chat, Allowed(C.offered({"tools": [{"type": "custom", "custom": {"name": "patch"}}]}))).calls
    assert call.offered and call.arguments is None


# -- a property: whatever the upstream answers, only exactly offered calls reach the client ------

NAMES = ["read_file", "computer_notes", "delete_repo", "list_repos"]  # few: lookalikes collide often
ITEM_TYPES = [*_BUILTIN_CALLS, "function_call", "custom_tool_call", "mcp_call", "mcp_approval_request", "x_call"]
OFFERABLE = [
    *[fn(n) for n in NAMES],
    *[{"type": "custom", "name": n} for n in NAMES],
    *[{"type": t} for t in ("computer_use_preview", "local_shell", "shell", "web_search_preview", "apply_patch")],
    GITHUB,
    GITHUB | {"server_label": "other", "allowed_tools": ["read_file"]},
]
ITEMS = st.builds(
    lambda kind, name, label, namespace: {
        "type": kind,
        "id": f"it_{kind}_{name}",
        "call_id": f"c_{name}",
        "name": name,
        "server_label": label,
        "arguments": "{}",
        **({"namespace": namespace} if namespace and kind == "function_call" else {}),
    },
    st.sampled_from(ITEM_TYPES),
    st.sampled_from(NAMES),
    st.sampled_from(["github", "other"]),
    st.sampled_from([None, "ns"]),
)


def admitted(item: dict, allow: Allowed) -> bool:
    """The oracle, written from the rule rather than from the codec: the exact identity the item
    calls is offered (or, for an MCP tool, its server is offered and the tier admits it)."""
    kind, name, tools = item["type"], item["name"], allow.offered.tools
    if kind == "function_call":
        own = ToolId.namespaced("ns", name) if item.get("namespace") else ToolId.function(name)
        return own in tools
    if kind == "custom_tool_call":
        return ToolId.custom(name) in tools
    if kind in ("mcp_call", "mcp_approval_request"):
        exact = ToolId.mcp(item["server_label"], name)
        whole = ToolId.mcp(item["server_label"], "*") in tools and POLICY.allows(Tier.SMALL, exact)
        return exact in tools or whole
    return any(t.kind.value == "builtin" and t.name in _BUILTIN_CALLS.get(kind, ()) for t in tools)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(ITEMS, max_size=5), st.lists(st.sampled_from(OFFERABLE), max_size=5), st.booleans())
def test_only_exactly_offered_calls_reach_the_client(items, offered, explain):
    allow = responses_allowed(*offered, explain=explain)
    doc = {"output": [dict(i) for i in items]}
    R.enforce(doc, allow)
    assert all(i["type"] == "message" or admitted(i, allow) for i in doc["output"])
    flt = R.stream_filter(allow)
    events = [
        {"type": "response.created", "response": {"id": "r", "output": []}},
        *[{"type": "response.output_item.added", "output_index": n, "item": dict(i)} for n, i in enumerate(items)],
        {"type": "response.completed", "response": {"id": "r", "output": [dict(i) for i in items]}},
    ]
    out = [json.loads(e.data) for d in events for e in flt.feed(ev(d))]
    seen = [d["item"] for d in out if d["type"] == "response.output_item.added"]
    seen += out[-1]["response"]["output"]
    assert all(i["type"] == "message" or admitted(i, allow) for i in seen)
    assert [d["output_index"] for d in out if d["type"] == "response.output_item.added"] == list(range(len(seen) // 2))
