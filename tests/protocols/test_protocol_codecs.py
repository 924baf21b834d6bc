"""The Responses and Messages codecs on their own: request gating and answer enforcement (pure)."""

from __future__ import annotations

import json

import pytest

from gatekeeper.errors import AnswerInvalid, RequestInvalid, ToolChoiceBlocked
from gatekeeper.protocols.base import Event, Offered
from gatekeeper.protocols.messages.codec import MessagesCodec
from gatekeeper.protocols.responses.codec import ResponsesCodec
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy

POLICY = ToolPolicy(
    {
        "execute_command": Tier.LARGE,
        "web_search": Tier.LARGE,
        "code_interpreter": Tier.LARGE,
        "danger": Tier.LARGE,
        "gh.delete_repo": Tier.LARGE,
        "bash": Tier.LARGE,
        "crm.drop": Tier.LARGE,
    }
)
R, M = ResponsesCodec(), MessagesCodec()


def fn(name: str) -> dict:
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


# -- Responses requests --------------------------------------------------------------------


def test_responses_gates_function_custom_and_builtin_tools():
    body = {
        "model": "m",
        "tools": [
            fn("read_file"),
            fn("execute_command"),
            {"type": "custom", "name": "danger"},
            {"type": "web_search"},
            {"type": "file_search", "vector_store_ids": ["v"]},
        ],
        "parallel_tool_calls": True,
    }
    gated = R.gate(body, Tier.SMALL, POLICY)
    assert gated.hidden == ["execute_command", "danger", "web_search"]
    assert [t.get("name", t["type"]) for t in body["tools"]] == ["read_file", "file_search"]
    assert body["parallel_tool_calls"] is True
    assert set(R.offered(body)) == {"read_file", "file_search"}


def test_responses_all_hidden_drops_tools_choice_and_parallel_tool_calls():
    body = {"model": "m", "tools": [fn("execute_command")], "tool_choice": "auto", "parallel_tool_calls": False}
    R.gate(body, Tier.SMALL, POLICY)
    assert "tools" not in body and "tool_choice" not in body and "parallel_tool_calls" not in body


def test_responses_mcp_gated_per_server_and_narrowed_by_allowed_tools():
    body = {
        "model": "m",
        "tools": [
            {"type": "mcp", "server_label": "danger", "server_url": "https://x"},
            {
                "type": "mcp",
                "server_label": "gh",
                "server_url": "https://y",
                "allowed_tools": ["list_repos", "delete_repo"],
            },
            {
                "type": "mcp",
                "server_label": "docs",
                "server_url": "https://z",
                "allowed_tools": {"tool_names": ["search"]},
            },
        ],
    }
    gated = R.gate(body, Tier.SMALL, POLICY)
    assert gated.hidden == ["danger", "gh.delete_repo"]
    assert body["tools"][0]["allowed_tools"] == ["list_repos"]
    assert body["tools"][1]["allowed_tools"] == {"tool_names": ["search"]}
    assert set(R.offered(body)) == {"gh.list_repos", "docs.search"}


def test_responses_namespace_tools_gated_as_namespace_dot_name():
    body = {
        "model": "m",
        "tools": [{"type": "namespace", "name": "crm", "description": "d", "tools": [fn("read"), fn("drop")]}],
    }
    R.gate(body, Tier.SMALL, POLICY)
    assert [t["name"] for t in body["tools"][0]["tools"]] == ["read"]


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "function", "name": "execute_command"},
        {"type": "custom", "name": "danger"},
        {"type": "web_search"},
        {"type": "mcp", "server_label": "gh", "name": "delete_repo"},
        {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "execute_command"}]},
    ],
)
def test_responses_tool_choice_forcing_hidden_tools_is_blocked(choice):
    body = {"model": "m", "tools": [fn("read_file"), fn("execute_command")], "tool_choice": choice}
    with pytest.raises(ToolChoiceBlocked):
        R.gate(body, Tier.SMALL, POLICY)


def test_responses_forcing_hidden_tool_without_tools_is_blocked():
    with pytest.raises(ToolChoiceBlocked):
        R.gate({"model": "m", "tool_choice": {"type": "function", "name": "execute_command"}}, Tier.SMALL, POLICY)


def test_responses_required_with_every_tool_hidden_is_blocked_naming_them():
    body = {"model": "m", "tools": [fn("execute_command"), {"type": "web_search"}], "tool_choice": "required"}
    with pytest.raises(ToolChoiceBlocked, match="execute_command,web_search"):
        R.gate(body, Tier.SMALL, POLICY)


def test_responses_allowed_tools_list_filtered():
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "read_file"}, {"type": "function", "name": "execute_command"}],
    }
    body = {"model": "m", "tools": [fn("read_file"), fn("execute_command")], "tool_choice": choice}
    R.gate(body, Tier.SMALL, POLICY)
    assert body["tool_choice"]["tools"] == [{"type": "function", "name": "read_file"}]


def test_responses_allowed_tools_auto_with_only_hidden_becomes_none():
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "execute_command"}]}
    body = {"model": "m", "tools": [fn("read_file"), fn("execute_command")], "tool_choice": choice}
    R.gate(body, Tier.SMALL, POLICY)
    assert body["tool_choice"] == "none"


def test_responses_effort_is_reasoning_effort():
    assert R.parse({"model": "m", "reasoning": {"effort": "low"}}).effort == "low"
    assert R.parse({"model": "m"}).effort is None
    with pytest.raises(RequestInvalid, match="reasoning"):
        R.parse({"model": "m", "reasoning": "low"})


@pytest.mark.parametrize(
    "tools, message",
    [
        ("x", "'tools' must be an array"),
        ([{"type": "function"}], r"tools\[0\].name"),
        ([{}], r"tools\[0\].type"),
        ([{"type": "mcp"}], "server_label"),
    ],
)
def test_responses_malformed_tools_are_refused(tools, message):
    with pytest.raises(RequestInvalid, match=message):
        R.gate({"model": "m", "tools": tools}, Tier.SMALL, POLICY)


def test_responses_stored_prompt_is_refused():
    with pytest.raises(RequestInvalid, match="prompt"):
        R.gate({"model": "m", "prompt": {"id": "pmpt_1"}}, Tier.LARGE, POLICY)


# -- Responses answers ---------------------------------------------------------------------

OFFERED = Offered([(ToolId.function("read_file"), None), (ToolId.mcp("gh", "list_repos"), None)])


def test_responses_answer_hidden_calls_removed():
    doc = {
        "output": [
            {"type": "reasoning", "id": "r", "summary": []},
            {"type": "function_call", "name": "execute_command", "arguments": "{}", "call_id": "1"},
            {"type": "function_call", "name": "read_file", "arguments": "{}", "call_id": "2"},
            {"type": "mcp_call", "server_label": "gh", "name": "delete_repo", "arguments": "{}"},
            {"type": "mcp_call", "server_label": "gh", "name": "list_repos", "arguments": "{}"},
            {"type": "web_search_call", "id": "ws", "status": "completed"},
            {"type": "custom_tool_call", "name": "danger", "input": "rm -rf", "call_id": "3"},
            {"type": "brand_new_call", "id": "x"},
            {"type": "message", "role": "assistant", "content": []},
        ]
    }
    result = R.enforce(doc, OFFERED)
    assert result.removed == ["execute_command", "gh.delete_repo", "web_search_call", "danger", "brand_new_call"]
    assert [i["type"] for i in doc["output"]] == ["reasoning", "function_call", "mcp_call", "message"]


@pytest.mark.parametrize("doc", [[], {"output": {}}, {"output": [1]}, {"output": [{"type": "function_call"}]}])
def test_responses_unreadable_answer_is_invalid(doc):
    with pytest.raises(AnswerInvalid):
        R.enforce(doc, OFFERED)


def ev(doc: dict) -> Event:
    return Event(data=json.dumps(doc), event=doc["type"])


def responses_stream() -> list[Event]:
    hidden = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "execute_command", "arguments": ""}
    kept = {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "read_file", "arguments": ""}
    final = {"id": "resp", "output": [hidden | {"arguments": "{}"}, kept | {"arguments": "{}"}]}
    docs = [
        {"type": "response.created", "response": {"id": "resp", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": hidden},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": "{}"},
        {"type": "response.function_call_arguments.done", "output_index": 0, "item_id": "fc_1", "arguments": "{}"},
        {"type": "response.output_item.done", "output_index": 0, "item": hidden | {"arguments": "{}"}},
        {"type": "response.output_item.added", "output_index": 1, "item": kept},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "fc_2", "delta": "{}"},
        {"type": "response.output_item.done", "output_index": 1, "item": kept | {"arguments": "{}"}},
        {"type": "response.completed", "response": final},
    ]
    return [ev(d | {"sequence_number": i}) for i, d in enumerate(docs)]


def test_responses_stream_drops_removed_item_and_renumbers():
    flt = R.stream_filter(OFFERED)
    out = [json.loads(e.data) for event in responses_stream() for e in flt.feed(event)]
    assert [d["type"] for d in out] == [
        "response.created",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.output_item.done",
        "response.completed",
    ]
    assert [d["output_index"] for d in out if "output_index" in d] == [0, 0, 0]
    assert [d["sequence_number"] for d in out] == [0, 1, 2, 3, 4]
    assert [i["name"] for i in out[-1]["response"]["output"]] == ["read_file"]
    assert flt.result.removed == ["execute_command"]


def test_responses_stream_event_before_added_is_invalid():
    flt = R.stream_filter(OFFERED)
    with pytest.raises(AnswerInvalid):
        flt.feed(ev({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{}"}))


def test_responses_stream_rename_mid_item_is_invalid():
    flt = R.stream_filter(OFFERED)
    item = {"type": "function_call", "name": "read_file", "arguments": "", "call_id": "c"}
    flt.feed(ev({"type": "response.output_item.added", "output_index": 0, "item": item}))
    with pytest.raises(AnswerInvalid):
        flt.feed(
            ev({"type": "response.output_item.done", "output_index": 0, "item": item | {"name": "execute_command"}})
        )


@pytest.mark.parametrize(
    "data", ["{", "[]", '{"type": 1}', '{"type": "x", "item": {}}', '{"type": "response.completed", "response": []}']
)
def test_responses_stream_unreadable_event_is_invalid(data):
    with pytest.raises(AnswerInvalid):
        R.stream_filter(OFFERED).feed(Event(data=data))


def test_responses_stream_event_name_follows_data_type():
    flt = R.stream_filter(OFFERED)
    out = flt.feed(Event(data=json.dumps({"type": "response.created", "response": {"output": []}}), event="lies"))
    assert out[0].event == "response.created"


# -- Messages requests ---------------------------------------------------------------------


def tool(name: str, **extra) -> dict:
    return {"name": name, "input_schema": {"type": "object", "properties": {}}, **extra}


def test_messages_gates_client_tools_by_name_and_typed_tools_by_type():
    body = {
        "model": "m",
        "messages": [],
        "tools": [
            tool("read_file"),
            tool("execute_command"),
            {"type": "bash_20250124", "name": "bash"},
            {"type": "web_search_20250305", "name": "web_search"},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        ],
    }
    gated = M.gate(body, Tier.SMALL, POLICY)
    assert gated.hidden == ["execute_command", "bash_20250124", "web_search_20250305"]
    assert set(M.offered(body)) == {"read_file", "text_editor_20250728"}  # a built-in by its type


def test_messages_tool_choice_forms():
    base = {"model": "m", "messages": [], "tools": [tool("read_file"), tool("execute_command")]}
    with pytest.raises(ToolChoiceBlocked):
        M.gate(base | {"tool_choice": {"type": "tool", "name": "execute_command"}}, Tier.SMALL, POLICY)
    with pytest.raises(ToolChoiceBlocked, match="execute_command"):
        M.gate(
            {"model": "m", "messages": [], "tools": [tool("execute_command")], "tool_choice": {"type": "any"}},
            Tier.SMALL,
            POLICY,
        )
    body = dict(base, tool_choice={"type": "any"})
    M.gate(body, Tier.SMALL, POLICY)
    assert body["tool_choice"] == {"type": "any"}
    body = {"model": "m", "messages": [], "tools": [tool("execute_command")], "tool_choice": {"type": "auto"}}
    M.gate(body, Tier.SMALL, POLICY)
    assert "tools" not in body and "tool_choice" not in body
    with pytest.raises(RequestInvalid, match="tool_choice"):
        M.gate(base | {"tool_choice": "auto"}, Tier.SMALL, POLICY)


def test_messages_mcp_servers_gated_and_narrowed():
    body = {
        "model": "m",
        "messages": [],
        "mcp_servers": [
            {"type": "url", "url": "https://x", "name": "danger"},
            {
                "type": "url",
                "url": "https://y",
                "name": "gh",
                "tool_configuration": {"allowed_tools": ["list_repos", "delete_repo"]},
            },
        ],
    }
    gated = M.gate(body, Tier.SMALL, POLICY)
    assert gated.hidden == ["danger", "gh.delete_repo"]
    assert body["mcp_servers"] == [
        {"type": "url", "url": "https://y", "name": "gh", "tool_configuration": {"allowed_tools": ["list_repos"]}}
    ]


@pytest.mark.parametrize(
    "body, effort",
    [
        ({"output_config": {"effort": "medium"}}, "medium"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "low"),
        ({"thinking": {"type": "enabled", "budget_tokens": 8000}}, "medium"),
        ({"thinking": {"type": "enabled", "budget_tokens": 32000}}, "high"),
        ({"thinking": {"type": "adaptive"}}, None),
        ({"output_config": {"effort": "max"}, "thinking": {"type": "adaptive"}}, "max"),
        ({"output_config": {"effort": "low"}, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "low"),
        ({"thinking": {"type": "disabled"}}, None),
        ({}, None),
    ],
)
def test_messages_effort(body, effort):
    assert M.parse({"model": "m", "messages": []} | body).effort == effort


def test_messages_error_shape():
    assert M.error_body(400, "nope", "invalid_request_error", "tool_not_allowed") == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "nope"},
    }
    assert M.error_body(502, "bad", "upstream_error", None)["error"]["type"] == "api_error"


# -- Messages answers ----------------------------------------------------------------------


def test_messages_answer_hidden_tool_use_removed_and_stop_reason_fixed():
    doc = {
        "type": "message",
        "stop_reason": "tool_use",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "t1", "name": "execute_command", "input": {}},
            {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
            {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []},
        ],
    }
    result = M.enforce(doc, {"read_file": None})
    assert result.removed == ["execute_command", "web_search"]
    assert [b["type"] for b in doc["content"]] == ["text"]  # a removed call's result goes with it
    assert doc["stop_reason"] == "end_turn"


def messages_stream() -> list[Event]:
    docs = [
        {
            "type": "message_start",
            "message": {"id": "msg", "type": "message", "role": "assistant", "content": [], "stop_reason": None},
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t1", "name": "execute_command", "input": {}},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "t2", "name": "read_file", "input": {}},
        },
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]
    return [ev(d) for d in docs]


def test_messages_stream_drops_removed_block_and_renumbers():
    flt = M.stream_filter({"read_file": None})
    out = [json.loads(e.data) for event in messages_stream() for e in flt.feed(event)]
    assert len(out) == 9
    assert [d["index"] for d in out if "index" in d] == [0, 0, 0, 1, 1, 1]
    assert out[-2]["delta"]["stop_reason"] == "tool_use"
    assert flt.result.removed == ["execute_command"]


def test_messages_stream_only_hidden_call_ends_turn():
    flt = M.stream_filter({})
    out = [json.loads(e.data) for event in messages_stream() for e in flt.feed(event)]
    assert [d["index"] for d in out if "index" in d] == [0, 0, 0]
    assert out[-2]["delta"]["stop_reason"] == "end_turn"


@pytest.mark.parametrize(
    "data",
    [
        "nan",
        "[]",
        '{"type": "content_block_delta", "index": 0, "delta": {}}',
        '{"type": "content_block_start", "index": "0", "content_block": {}}',
        '{"type": "ping", "content_block": {"type": "tool_use", "name": "x"}}',
    ],
)
def test_messages_stream_unreadable_event_is_invalid(data):
    with pytest.raises(AnswerInvalid):
        M.stream_filter({}).feed(Event(data=data))


def test_messages_calls_carry_their_input_as_json_text_for_the_drift_tracker():
    doc = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {"count": "5"}}],
        "stop_reason": "tool_use",
    }
    result = M.enforce(doc, {"read_file": None})
    assert [(c.name, json.loads(c.arguments)) for c in result.calls] == [("read_file", {"count": "5"})]


def test_messages_stream_calls_carry_their_streamed_input():
    events = messages_stream()
    split = [
        ev({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": p}})
        for p in ('{"path": ', '"a.txt"}')
    ]
    events = events[:8] + split + events[9:]  # index 2's input arrives in two parts
    flt = M.stream_filter({"read_file": None})
    for event in events:
        flt.feed(event)
    assert [(c.name, c.arguments) for c in flt.result.calls] == [
        ("execute_command", "{}"),
        ("read_file", '{"path": "a.txt"}'),
    ]


def test_mcp_verdicts_name_tools_not_a_server_that_kept_none():
    policy = ToolPolicy({"github.delete_*": Tier.LARGE})
    body = {"model": "m", "tools": [{"type": "mcp", "server_label": "github", "allowed_tools": ["delete_repo"]}]}
    gated = R.gate(body, Tier.SMALL, policy)
    assert gated.kept == [] and gated.hidden == ["github.delete_repo"] and "tools" not in body
    body = {"model": "m", "tools": [{"type": "mcp", "server_label": "docs"}]}
    # (at large: at small, `docs`, a label no rule names, may be github; tests/protocols/test_mcp_identity.py)
    assert R.gate(body, Tier.LARGE, policy).kept == ["docs.*"]
