"""The codecs' field allowlists (gatekeeper/protocols/fields.py) against the installed SDKs'
request types: every field a real client can send is known, so none is refused as unknown."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

import pytest

from gatekeeper.protocols import fields as F


def _keys(td: Any) -> set[str]:
    return set(td.__required_keys__) | set(td.__optional_keys__)


def _members(union: Any) -> list[Any]:
    members = get_args(union) if get_origin(union) is Union else [union]
    return [get_args(m)[0] if get_origin(m) is typing.Annotated else m for m in members]


def _literal(td: Any, key: str) -> tuple[Any, ...]:
    hint = typing.get_type_hints(td, include_extras=True).get(key)
    while get_origin(hint) in (typing.Required, typing.NotRequired, typing.Annotated):
        hint = get_args(hint)[0]
    return tuple(a for a in get_args(hint) if isinstance(a, str)) if hint is not None else ()


def _by_type(*unions: Any, untyped: str | None = None) -> dict[str, set[str]]:
    """type -> the union of the field names of the SDK types that carry it."""
    found: dict[str, set[str]] = {}
    for union in unions:
        for member in _members(union):
            if not hasattr(member, "__required_keys__"):
                continue  # a string form (tool_choice "auto", ...)
            kinds = _literal(member, "type") or ((untyped,) if untyped else ())
            for kind in kinds:
                found.setdefault(kind, set()).update(_keys(member))
    return found


def _assert_covers(table: Mapping[str, Any], sdk: set[str], what: str) -> None:
    missing = sdk - set(table)
    assert not missing, f"{what}: fields of the SDK missing from protocols/fields.py: {sorted(missing)}"


def _assert_typed(tables: Mapping[str, Mapping[str, Any]], sdk: dict[str, set[str]], what: str) -> None:
    missing_types = set(sdk) - set(tables)
    assert not missing_types, f"{what}: types of the SDK missing: {sorted(missing_types)}"
    for kind, keys in sdk.items():
        _assert_covers(tables[kind], keys, f"{what} {kind!r}")


def test_chat_request_fields() -> None:
    from openai.types.chat import completion_create_params as p
    from openai.types.chat.chat_completion_custom_tool_param import Custom
    from openai.types.chat.chat_completion_message_param import ChatCompletionMessageParam
    from openai.types.chat.chat_completion_tool_union_param import ChatCompletionToolUnionParam
    from openai.types.shared_params.function_definition import FunctionDefinition

    _assert_covers(F.CHAT_REQUEST, _keys(p.CompletionCreateParamsStreaming), "chat request")
    for member in _members(ChatCompletionMessageParam):
        for role in _literal(member, "role"):
            _assert_covers(F.CHAT_MESSAGE[role], _keys(member), f"chat {role} message")
    _assert_typed(F.CHAT_TOOL, _by_type(ChatCompletionToolUnionParam), "chat tool")
    _assert_covers(F.CHAT_FUNCTION, _keys(FunctionDefinition), "chat function")
    _assert_covers(F.CHAT_CUSTOM, _keys(Custom), "chat custom tool")
    _assert_covers(F.CHAT_LEGACY_FUNCTION, _keys(p.Function), "chat legacy function")


def test_chat_tool_choice_fields() -> None:
    from openai.types.chat.chat_completion_tool_choice_option_param import ChatCompletionToolChoiceOptionParam

    _assert_typed(F.CHAT_TOOL_CHOICE, _by_type(ChatCompletionToolChoiceOptionParam), "chat tool_choice")


def test_responses_request_fields() -> None:
    from openai.types.responses import response_create_params as p
    from openai.types.responses.namespace_tool_param import Tool as NamespaceTool
    from openai.types.responses.response_input_item_param import ResponseInputItemParam
    from openai.types.responses.tool_param import ToolParam

    _assert_covers(F.RESPONSES_REQUEST, _keys(p.ResponseCreateParamsStreaming), "responses request")
    _assert_typed(F.RESPONSES_TOOL, _by_type(ToolParam), "responses tool")
    _assert_typed(F.RESPONSES_NAMESPACE_TOOL, _by_type(NamespaceTool), "responses namespace tool")
    _assert_typed(F.RESPONSES_TOOL_CHOICE, _by_type(p.ToolChoice), "responses tool_choice")
    _assert_typed(F.RESPONSES_INPUT_ITEM, _by_type(ResponseInputItemParam, untyped="item_reference"), "input item")


@pytest.mark.parametrize("beta", [False, True])
def test_messages_request_fields(beta: bool) -> None:
    if beta:
        from anthropic.types.beta import message_count_tokens_params as c
        from anthropic.types.beta import message_create_params as p
        from anthropic.types.beta.beta_tool_choice_param import BetaToolChoiceParam as Choice
        from anthropic.types.beta.beta_tool_union_param import BetaToolUnionParam as Tools
    else:
        from anthropic.types import message_count_tokens_params as c  # type: ignore[no-redef]
        from anthropic.types import message_create_params as p  # type: ignore[no-redef]
        from anthropic.types.tool_choice_param import ToolChoiceParam as Choice  # type: ignore[assignment]
        from anthropic.types.tool_union_param import ToolUnionParam as Tools  # type: ignore[assignment]

    header = {"betas"}  # the SDK sends it as the anthropic-beta header, not in the body
    _assert_covers(F.MESSAGES_REQUEST, _keys(p.MessageCreateParamsStreaming) - header, "messages request")
    _assert_covers(F.MESSAGES_COUNT_TOKENS, _keys(c.MessageCountTokensParams) - header, "count_tokens request")
    _assert_typed(F.MESSAGES_TOOL, _by_type(Tools, untyped="custom"), "messages tool")
    _assert_typed(F.MESSAGES_TOOL_CHOICE, _by_type(Choice), "messages tool_choice")
    for member in _members(Tools):
        names = _literal(member, "name")
        for kind in _literal(member, "type"):
            if names and kind != "custom":
                assert F.MESSAGES_BUILTIN_NAMES.get(kind) == names[0], kind


def test_messages_messages_blocks_and_servers() -> None:
    from anthropic.types.beta import (
        BetaRequestMCPServerToolConfigurationParam,
        BetaRequestMCPServerURLDefinitionParam,
    )
    from anthropic.types.beta.beta_content_block_param import BetaContentBlockParam
    from anthropic.types.beta.beta_mcp_tool_config_param import BetaMCPToolConfigParam
    from anthropic.types.beta.beta_mcp_tool_param_param import BetaMCPToolParamParam
    from anthropic.types.beta.beta_message_param import BetaMessageParam

    for member in _members(BetaMessageParam):
        for role in _literal(member, "role"):
            _assert_covers(F.MESSAGES_MESSAGE[role], _keys(member), f"messages {role} message")
    _assert_typed(F.MESSAGES_CONTENT_BLOCK, _by_type(BetaContentBlockParam), "content block")
    _assert_covers(F.MESSAGES_MCP_SERVER, _keys(BetaRequestMCPServerURLDefinitionParam), "mcp server")
    _assert_covers(
        F.MESSAGES_MCP_TOOL_CONFIGURATION, _keys(BetaRequestMCPServerToolConfigurationParam), "tool_configuration"
    )
    _assert_covers(F.MESSAGES_MCP_TOOL_CONFIG, _keys(BetaMCPToolConfigParam), "mcp tool config")
    _assert_covers(F.MESSAGES_LISTED_MCP_TOOL, _keys(BetaMCPToolParamParam), "listed mcp tool")


def test_unknown_fields_are_refused_or_dropped_and_logged() -> None:
    import structlog

    from gatekeeper.errors import RequestInvalid

    with pytest.raises(RequestInvalid, match=r"'extra_body' is not a field gatekeeper knows"):
        F.check({"model": "m", "extra_body": {}}, F.CHAT_REQUEST, "", "refuse")
    with pytest.raises(RequestInvalid, match=r"tools\[0\]\.function\.x"):
        F.check({"x": 1}, F.CHAT_FUNCTION, "tools[0].function", "refuse")
    body = {"model": "m", "extra_body": {"tools": []}}
    with structlog.testing.capture_logs() as logs:
        F.check(body, F.CHAT_REQUEST, "", "drop")
    assert body == {"model": "m"}
    assert logs[0]["event"] == "request_field_dropped" and logs[0]["field"] == "extra_body"
    long = "k" * 10_000
    with pytest.raises(RequestInvalid) as info:
        F.check({long: 1}, F.CHAT_REQUEST, "", "refuse")
    assert len(str(info.value)) < 300  # a client's key is capped in the error


def test_refused_fields_say_why() -> None:
    from gatekeeper.errors import RequestInvalid

    with pytest.raises(RequestInvalid, match="stored prompt"):
        F.check({"prompt": {"id": "p"}}, F.RESPONSES_REQUEST, "", "drop")  # refused even under drop
    with pytest.raises(RequestInvalid, match="substitute models"):
        F.check({"fallbacks": ["m2"]}, F.MESSAGES_REQUEST, "", "refuse")


def test_messages_system_carries_text_blocks_only() -> None:
    from gatekeeper.errors import RequestInvalid
    from gatekeeper.gating import ToolPolicy
    from gatekeeper.protocols.messages import CODEC
    from gatekeeper.tiers import Tier

    body = {"model": "m", "max_tokens": 1, "messages": [], "system": [{"type": "text", "text": "be brief"}]}
    CODEC.gate(body, Tier.SMALL, ToolPolicy())
    addition = {"type": "tool_addition", "tool": {"name": "execute_command", "input_schema": {}}}
    with pytest.raises(RequestInvalid, match=r"system\[0\]\.type 'tool_addition'"):
        CODEC.gate(body | {"system": [addition]}, Tier.SMALL, ToolPolicy())


def test_every_refused_field_is_in_the_fast_pre_filter() -> None:
    tables = [v for v in vars(F).values() if isinstance(v, dict)]
    tables += [t for v in tables for t in v.values() if isinstance(t, dict)]
    refused = {k for t in tables for k, how in t.items() if isinstance(how, F.Refused)}
    assert refused and refused <= F._REFUSABLE


def test_carriers_name_what_could_offer_tools() -> None:
    hi = [{"role": "user", "content": "hi"}]
    assert F.carriers("chat", {"model": "m", "messages": hi}) == []
    assert F.carriers("chat", {"model": "m", "messages": hi, "extra_body": {}}) == []  # empty: nothing merged
    assert F.carriers("chat", {"model": "m", "messages": hi, "extra_body": {"x": 1}}) == ["extra_body"]
    addition = {"type": "additional_tools", "tools": []}
    assert F.carriers("responses", {"model": "m", "input": [addition]}) == ["input"]
    block = {"type": "tool_addition", "tool": {"name": "x"}}
    assert F.carriers("messages", {"model": "m", "messages": [{"role": "user", "content": [block]}]}) == ["messages"]


def test_every_refused_field_of_every_table_is_in_check_s_pre_filter():
    # `check` looks for refused keys among _REFUSABLE only: a Refused added to any other table
    # must be found there too, or it would be forwarded.
    def refused(value: Any, seen: set[int]) -> set[str]:
        if id(value) in seen or not isinstance(value, Mapping):
            return set()
        seen.add(id(value))
        found = {k for k, how in value.items() if isinstance(how, F.Refused)}
        for inner in value.values():
            found |= refused(inner, seen)
        return found

    every = set().union(*(refused(v, set()) for v in vars(F).values()))
    assert every and every <= F._REFUSABLE, every - F._REFUSABLE
