"""The codecs' field allowlists (gatekeeper/protocols/<protocol>/fields.py) against the installed SDKs'
request types: every field a real client can send is known, so none is refused as unknown."""

from __future__ import annotations

import collections.abc
import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

import pytest

from gatekeeper.errors import RequestInvalid
from gatekeeper.protocols import passthrough, schema
from gatekeeper.protocols.chat import fields as chat_fields
from gatekeeper.protocols.messages import fields as messages_fields
from gatekeeper.protocols.responses import fields as responses_fields

# Every table module: the language (schema), each protocol's tables and the tool-free endpoints'.
TABLE_MODULES = (schema, chat_fields, responses_fields, messages_fields, passthrough)


def _keys(td: Any) -> set[str]:
    return set(td.__required_keys__) | set(td.__optional_keys__)


def _strip(hint: Any) -> Any:
    while get_origin(hint) in (typing.Required, typing.NotRequired, typing.Annotated):
        hint = get_args(hint)[0]
    return hint


def _members(union: Any) -> list[Any]:
    union = _strip(union)
    members = get_args(union) if get_origin(union) in (Union, types.UnionType) else [union]
    return [_strip(m) for m in members]


def _literal(td: Any, key: str) -> tuple[Any, ...]:
    hint = _hints(td).get(key)
    return tuple(a for m in _members(hint) for a in get_args(m) if isinstance(a, str)) if hint is not None else ()


@functools.cache
def _hints(td: Any) -> dict[str, Any]:
    return typing.get_type_hints(td, include_extras=True)


def _is_td(t: Any) -> bool:
    return isinstance(t, type) and hasattr(t, "__required_keys__")


def _kinds(hint: Any) -> tuple[list[Any], list[Any], bool, list[str]]:
    """What a field's hint allows: object types, `Dict[str, V]` value types, whether it allows any
    value (`object`), and the string literals (of an array of them too)."""
    tds: list[Any] = []
    maps: list[Any] = []
    anything = False
    literals: list[str] = []
    for m in _members(hint):
        origin = get_origin(m)
        if _is_td(m):
            tds.append(m)
        elif m is object:
            anything = True
        elif origin is typing.Literal:
            literals += [a for a in get_args(m) if isinstance(a, str)]
        elif origin in (dict, collections.abc.Mapping):
            maps.append(get_args(m)[1])
        elif origin is not None and get_args(m):  # Iterable, List, SequenceNotStr: an array of its items
            inner_tds, inner_maps, inner_any, inner_literals = _kinds(get_args(m)[0])
            tds += inner_tds
            maps += inner_maps
            anything = anything or inner_any
            literals += inner_literals
    return tds, maps, anything, literals


def _by_type(*unions: Any, untyped: str | None = None) -> dict[str, set[str]]:
    """type -> the union of the field names of the SDK types that carry it."""
    return {kind: set().union(*map(_keys, tds)) for kind, tds in _tds_by_type(unions, untyped).items()}


def _tds_by_type(unions: Any, untyped: str | None = None) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for union in unions:
        for member in _kinds(union)[0]:
            kinds = _literal(member, "type") or ((untyped,) if untyped else ())
            for kind in kinds:
                found.setdefault(kind, []).append(member)
    return found


class _Walk:
    """Compares a table, and the tables of the objects inside it, with SDK types; collects the
    fields a nested table lists that the SDK does not (`extras`, by path)."""

    def __init__(self) -> None:
        self.extras: set[str] = set()
        self.seen: set[tuple[int, Any]] = set()

    def fields(
        self,
        table: Mapping[str, Any],
        tds: list[Any],
        what: str,
        nested: bool = False,
        skip: frozenset[str] = frozenset(),
    ) -> None:
        key = (id(table), tuple(tds))
        if key in self.seen:
            return
        self.seen.add(key)
        sdk = set().union(*map(_keys, tds)) - skip
        missing = sdk - set(table)
        assert not missing, f"{what}: fields of the SDK missing from protocols/<protocol>/fields.py: {sorted(missing)}"
        if nested:
            self.extras |= {f"{what}.{k}" for k in set(table) - sdk}
        for name in sorted(sdk):
            hints = [_hints(td)[name] for td in tds if name in _hints(td)]
            self.entry(table[name], hints, f"{what}.{name}")

    def typed(self, tables: Mapping[str, Any], tds: list[Any], what: str, default: str | None, nested: bool) -> None:
        groups = _tds_by_type(tds, default)
        missing = set(groups) - set(tables)
        assert not missing, f"{what}: types of the SDK missing: {sorted(missing)}"
        if nested:
            self.extras |= {f"{what}[{k!r}]" for k in set(tables) - set(groups)}
        for kind, members in sorted(groups.items()):
            self.fields(tables[kind], members, f"{what}[{kind!r}]", nested)

    def entry(self, entry: Any, hints: list[Any], what: str) -> None:
        tds, maps, anything, literals = [], [], False, []
        for hint in hints:
            t, m, a, lit = _kinds(hint)
            tds, maps, anything, literals = tds + t, maps + m, anything or a, literals + lit
        if entry == schema.GATED or isinstance(entry, (schema.Refused, schema.Opaque)):
            return  # the codec checks a GATED value; an Opaque one is free-form (on the list)
        if tds:
            assert isinstance(entry, (schema.Obj, schema.Typed)), (
                f"{what}: the SDK sends an object here, the table no shape"
            )
            if isinstance(entry, schema.Obj):
                self.fields(entry.fields, tds, what, nested=True)
            else:
                self.typed(entry.tables, tds, what, entry.default, nested=True)
        elif maps:
            assert isinstance(entry, schema.Map), f"{what}: the SDK sends a map here, the table no Map or Opaque"
            self.entry(entry.values, maps, f"{what}.*")
        elif anything:
            raise AssertionError(f"{what}: the SDK allows any value here: list it as Opaque (saying why)")
        elif isinstance(entry, schema.OneOf):
            unknown = set(literals) - entry.values
            assert not unknown, (
                f"{what}: values of the SDK missing from protocols/<protocol>/fields.py: {sorted(unknown)}"
            )


def _assert_covers(
    table: Mapping[str, Any], sdk: Any, what: str = "", skip: frozenset[str] = frozenset(), extras: bool = True
) -> None:
    """`table` lists every field of the SDK type `sdk` (but `skip`), and the objects inside have
    tables that list theirs (recursively); a nested table's extra field must be on NOT_IN_SDK."""
    walk = _Walk()
    walk.fields(table, [sdk], what, skip=skip)
    if extras:
        _assert_extras_known(walk)


def _assert_typed(
    tables: Mapping[str, Mapping[str, Any]], *unions: Any, what: str, untyped: str | None = None, extras: bool = True
) -> None:
    walk = _Walk()
    walk.typed(tables, list(unions), what, untyped, nested=False)
    if extras:
        _assert_extras_known(walk)


def _assert_extras_known(walk: _Walk) -> None:
    unknown = {path for path in walk.extras if path.split(".", 1)[1] not in NOT_IN_SDK}
    assert not unknown, (
        f"fields of nested tables the SDK does not know (name the server in NOT_IN_SDK): {sorted(unknown)}"
    )


# Fields of nested tables that the SDKs do not know, by path below the compared table, and the
# servers that take them (fields.py says so where they are listed).
NOT_IN_SDK: Mapping[str, str] = {
    "content['text'].cache_control": "LiteLLM, OpenRouter (Anthropic prompt caching in the chat format)",
    "content['image_url'].cache_control": "LiteLLM, OpenRouter",
    "content['file'].cache_control": "LiteLLM, OpenRouter",
    "content['video_url']": "vLLM",
    "content['audio_url']": "vLLM",
    "prediction['content'].content['text'].cache_control": "LiteLLM, OpenRouter (the chat text part's table)",
}


def test_chat_request_fields() -> None:
    from openai.types.chat import completion_create_params as p
    from openai.types.chat.chat_completion_custom_tool_param import Custom
    from openai.types.chat.chat_completion_message_param import ChatCompletionMessageParam
    from openai.types.chat.chat_completion_tool_union_param import ChatCompletionToolUnionParam
    from openai.types.shared_params.function_definition import FunctionDefinition

    _assert_covers(chat_fields.CHAT_REQUEST, p.CompletionCreateParamsStreaming, "chat request")
    for member in _members(ChatCompletionMessageParam):
        for role in _literal(member, "role"):
            _assert_covers(chat_fields.CHAT_MESSAGE[role], member, f"chat {role} message")
    _assert_typed(chat_fields.CHAT_TOOL, ChatCompletionToolUnionParam, what="chat tool")
    _assert_covers(chat_fields.CHAT_FUNCTION, FunctionDefinition, "chat function")
    _assert_covers(chat_fields.CHAT_CUSTOM, Custom, "chat custom tool")
    _assert_covers(chat_fields.CHAT_LEGACY_FUNCTION, p.Function, "chat legacy function")


def test_tool_free_endpoint_fields() -> None:
    from openai.types import completion_create_params, embedding_create_params

    _assert_covers(
        passthrough.COMPLETIONS_REQUEST, completion_create_params.CompletionCreateParamsStreaming, "completions"
    )
    _assert_covers(passthrough.EMBEDDINGS_REQUEST, embedding_create_params.EmbeddingCreateParams, "embeddings")
    # what they forward as is passes the check: token arrays, a logit_bias map, stream_options
    body = {
        "model": "m",
        "prompt": [[1, 2], [3]],
        "logit_bias": {"50256": -100},
        "stream_options": {"include_usage": True},
    }
    schema.check(body, passthrough.COMPLETIONS_REQUEST, "", "refuse")
    schema.check({"model": "m", "input": [[1, 2], [3]]}, passthrough.EMBEDDINGS_REQUEST, "", "refuse")


def test_chat_tool_choice_fields() -> None:
    from openai.types.chat.chat_completion_tool_choice_option_param import ChatCompletionToolChoiceOptionParam

    _assert_typed(chat_fields.CHAT_TOOL_CHOICE, ChatCompletionToolChoiceOptionParam, what="chat tool_choice")


def test_responses_request_fields() -> None:
    from openai.types.responses import response_create_params as p
    from openai.types.responses.namespace_tool_param import Tool as NamespaceTool
    from openai.types.responses.response_input_item_param import ResponseInputItemParam
    from openai.types.responses.tool_param import ToolParam

    _assert_covers(responses_fields.RESPONSES_REQUEST, p.ResponseCreateParamsStreaming, "responses request")
    _assert_typed(responses_fields.RESPONSES_TOOL, ToolParam, what="responses tool")
    _assert_typed(responses_fields.RESPONSES_NAMESPACE_TOOL, NamespaceTool, what="responses namespace tool")
    _assert_typed(responses_fields.RESPONSES_TOOL_CHOICE, p.ToolChoice, what="responses tool_choice")
    _assert_typed(
        responses_fields.RESPONSES_INPUT_ITEM, ResponseInputItemParam, untyped="item_reference", what="input item"
    )


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

    header = frozenset({"betas"})  # the SDK sends it as the anthropic-beta header, not in the body
    _assert_covers(messages_fields.MESSAGES_REQUEST, p.MessageCreateParamsStreaming, "messages request", header, beta)
    _assert_covers(
        messages_fields.MESSAGES_COUNT_TOKENS, c.MessageCountTokensParams, "count_tokens request", header, beta
    )
    _assert_typed(messages_fields.MESSAGES_TOOL, Tools, untyped="custom", what="messages tool", extras=beta)
    _assert_typed(messages_fields.MESSAGES_TOOL_CHOICE, Choice, what="messages tool_choice", extras=beta)
    for member in _members(Tools):
        names = _literal(member, "name")
        for kind in _literal(member, "type"):
            if names and kind != "custom":
                assert messages_fields.MESSAGES_BUILTIN_NAMES.get(kind) == names[0], kind


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
            _assert_covers(messages_fields.MESSAGES_MESSAGE[role], member, f"messages {role} message")
    _assert_typed(messages_fields.MESSAGES_CONTENT_BLOCK, BetaContentBlockParam, what="content block")
    _assert_covers(messages_fields.MESSAGES_MCP_SERVER, BetaRequestMCPServerURLDefinitionParam, "mcp server")
    _assert_covers(
        messages_fields.MESSAGES_MCP_TOOL_CONFIGURATION,
        BetaRequestMCPServerToolConfigurationParam,
        "tool_configuration",
    )
    _assert_covers(messages_fields.MESSAGES_MCP_TOOL_CONFIG, BetaMCPToolConfigParam, "mcp tool config")
    _assert_covers(messages_fields.MESSAGES_LISTED_MCP_TOOL, BetaMCPToolParamParam, "listed mcp tool")


def test_messages_toolset_members_are_the_sdks() -> None:
    # A toolset's `configs` keys are its member tools, each gated by name: a member the SDK grows
    # must be named here (an unknown key is refused), and a member's config read whole.
    from anthropic.types.beta import beta_browser_toolset_configs_param as browser
    from anthropic.types.beta import beta_computer_toolset_configs_param as computer

    sdk = {
        "browser_toolset_20260801": browser.BetaBrowserToolsetConfigsParam,
        "computer_toolset_20260801": computer.BetaComputerToolsetConfigsParam,
    }
    assert set(messages_fields.MESSAGES_TOOLSET_MEMBERS) == set(sdk)
    for kind, configs in sdk.items():
        assert messages_fields.MESSAGES_TOOLSET_MEMBERS[kind] == _keys(configs), kind
        for member, hint in _hints(configs).items():
            (config,) = _kinds(hint)[0]
            assert _keys(config) == set(messages_fields.MESSAGES_MEMBER_CONFIG), (kind, member)


def test_unknown_fields_are_refused_or_dropped_and_logged() -> None:
    import structlog

    from gatekeeper.errors import RequestInvalid

    with pytest.raises(RequestInvalid, match=r"'extra_body' is not a field gatekeeper knows"):
        schema.check({"model": "m", "extra_body": {}}, chat_fields.CHAT_REQUEST, "", "refuse")
    with pytest.raises(RequestInvalid, match=r"tools\[0\]\.function\.x"):
        schema.check({"x": 1}, chat_fields.CHAT_FUNCTION, "tools[0].function", "refuse")
    body = {"model": "m", "extra_body": {"tools": []}}
    with structlog.testing.capture_logs() as logs:
        schema.check(body, chat_fields.CHAT_REQUEST, "", "drop")
    assert body == {"model": "m"}
    assert logs[0]["event"] == "request_field_dropped" and logs[0]["field"] == "extra_body"
    long = "k" * 10_000
    with pytest.raises(RequestInvalid) as info:
        schema.check({long: 1}, chat_fields.CHAT_REQUEST, "", "refuse")
    assert len(str(info.value)) < 300  # a client's key is capped in the error


def test_refused_fields_say_why() -> None:
    from gatekeeper.errors import RequestInvalid

    with pytest.raises(RequestInvalid, match="stored prompt"):
        schema.check({"prompt": {"id": "p"}}, responses_fields.RESPONSES_REQUEST, "", "drop")  # refused even under drop
    with pytest.raises(RequestInvalid, match="substitute models"):
        schema.check({"fallbacks": ["m2"]}, messages_fields.MESSAGES_REQUEST, "", "refuse")


def test_messages_system_carries_text_blocks_only() -> None:
    from gatekeeper.errors import RequestInvalid
    from gatekeeper.protocols.messages.codec import CODEC
    from gatekeeper.rules.tiers import Tier
    from gatekeeper.rules.tools import ToolPolicy

    body = {"model": "m", "max_tokens": 1, "messages": [], "system": [{"type": "text", "text": "be brief"}]}
    CODEC.gate(body, Tier.SMALL, ToolPolicy())
    addition = {"type": "tool_addition", "tool": {"name": "execute_command", "input_schema": {}}}
    with pytest.raises(RequestInvalid, match=r"system\[0\]\.type 'tool_addition'"):
        CODEC.gate(body | {"system": [addition]}, Tier.SMALL, ToolPolicy())


def test_carriers_name_what_could_offer_tools() -> None:
    hi = [{"role": "user", "content": "hi"}]
    assert chat_fields.carriers({"model": "m", "messages": hi}) == []
    assert chat_fields.carriers({"model": "m", "messages": hi, "extra_body": {}}) == []  # empty: nothing merged
    assert chat_fields.carriers({"model": "m", "messages": hi, "extra_body": {"x": 1}}) == ["extra_body"]
    addition = {"type": "additional_tools", "tools": []}
    assert responses_fields.carriers({"model": "m", "input": [addition]}) == ["input"]
    block = {"type": "tool_addition", "tool": {"name": "x"}}
    assert messages_fields.carriers({"model": "m", "messages": [{"role": "user", "content": [block]}]}) == ["messages"]


def _entries(value: Any, seen: set[int]) -> list[tuple[str, Any]]:
    """Every (key, entry) of every table reachable from `value`, nested shapes included."""
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, schema.Obj):
        return _entries(value.fields, seen)
    if isinstance(value, schema.Typed):
        return _entries(value.tables, seen)
    if isinstance(value, schema.Map):
        return _entries(value.values, seen)
    if not isinstance(value, Mapping):
        return []
    found = [(k, how) for k, how in value.items() if isinstance(k, str)]
    for inner in value.values():
        found += _entries(inner, seen)
    return found


def _tables(value: Any, seen: set[int]) -> list[Mapping[str, Any]]:
    """Every field table reachable from `value` (a table: a mapping of field names to entries)."""
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, schema.Obj):
        return _tables(value.fields, seen)
    if isinstance(value, (schema.Typed, schema.Map)):
        return _tables(value.tables if isinstance(value, schema.Typed) else value.values, seen)
    if not isinstance(value, Mapping):
        return []
    found = [value] if any(isinstance(how, schema.Refused) for how in value.values()) else []
    for inner in value.values():
        found += _tables(inner, seen)
    return found


def test_every_refused_field_of_every_table_is_refused_by_check():
    # `check` looks for refused keys among each table's own pre-filter: every Refused of every
    # table (a nested one too) must be refused with its reason, never forwarded.
    seen: set[int] = set()
    tables = [t for m in TABLE_MODULES for v in vars(m).values() for t in _tables(v, seen)]
    refused = [(t, k) for t in tables for k, how in t.items() if isinstance(how, schema.Refused)]
    assert len(refused) >= 3
    for table, key in refused:
        with pytest.raises(RequestInvalid, match=re.escape(f"'{key}' is refused: {table[key].why}")):
            schema.check({key: "x"}, table, "", "refuse")


def test_every_free_form_value_is_on_the_one_commented_list():
    seen: set[int] = set()
    entries = [e for v in (v for m in TABLE_MODULES for v in vars(m).values()) for e in _entries(v, seen)]
    used = {id(how) for _, how in entries if isinstance(how, (schema.Opaque, schema.Map))}
    listed = {id(v) for v in schema.OPAQUE_VALUES}
    assert used and used <= listed, "an Opaque or Map not on schema.OPAQUE_VALUES"


# -- nested objects: the same refuse/drop rule, the same paths -------------------------------------


def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


def test_an_unknown_key_in_a_content_part_is_refused_naming_its_path() -> None:
    from gatekeeper.errors import RequestInvalid
    from gatekeeper.protocols.chat.gate import check_request

    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "foo": 1}]
    with pytest.raises(RequestInvalid, match=r"^messages\[0\]\.content\[1\]\.foo is not a field gatekeeper knows"):
        check_request(_chat(messages=[{"role": "user", "content": parts}]), "refuse")


def test_an_unknown_nested_key_is_dropped_and_logged_under_drop() -> None:
    import structlog

    from gatekeeper.protocols.chat.gate import check_request

    schema = {"name": "a", "schema": {"type": "object", "x-anything": 1}, "tools": [{"name": "execute_command"}]}
    body = _chat(response_format={"type": "json_schema", "json_schema": schema})
    with structlog.testing.capture_logs() as logs:
        check_request(body, "drop")
    assert body["response_format"]["json_schema"] == {"name": "a", "schema": {"type": "object", "x-anything": 1}}
    assert [e["field"] for e in logs] == ["response_format.json_schema.tools"]


@pytest.mark.parametrize("mode", ["refuse", "drop"])
def test_an_object_in_a_plain_field_is_refused_whatever_the_mode(mode: str) -> None:
    from gatekeeper.errors import RequestInvalid
    from gatekeeper.protocols.chat.gate import check_request

    with pytest.raises(RequestInvalid, match=r"^top_p is an object where gatekeeper knows only plain values"):
        check_request(_chat(top_p={"tools": [{"name": "execute_command"}]}), mode)
    with pytest.raises(RequestInvalid, match=r"^stop\[1\] must be a plain value"):
        check_request(_chat(stop=["a", {"tools": []}]), mode)
    with pytest.raises(RequestInvalid, match=r"^metadata\.k is an object"):  # a map's values are plain
        check_request(_chat(metadata={"k": {"tools": []}}), mode)


@pytest.mark.parametrize("mode", ["refuse", "drop"])
def test_a_nested_object_of_an_unknown_type_is_refused_whatever_the_mode(mode: str) -> None:
    from gatekeeper.errors import RequestInvalid
    from gatekeeper.protocols.chat.gate import check_request

    with pytest.raises(RequestInvalid, match=r"^response_format\.type 'tools' is not a type gatekeeper knows"):
        check_request(_chat(response_format={"type": "tools", "tools": []}), mode)
    parts = [{"type": "tool", "name": "execute_command"}]
    with pytest.raises(RequestInvalid, match=r"^messages\[0\]\.content\[0\]\.type 'tool'"):
        check_request(_chat(messages=[{"role": "user", "content": parts}]), mode)


def test_include_values_are_a_closed_set() -> None:
    import structlog

    from gatekeeper.errors import RequestInvalid

    body = {"model": "m", "include": ["reasoning.encrypted_content", "tools.hidden"]}
    with pytest.raises(RequestInvalid, match=r"^include\[1\] 'tools.hidden' is not a value gatekeeper knows"):
        schema.check(dict(body, include=list(body["include"])), responses_fields.RESPONSES_REQUEST, "", "refuse")
    with structlog.testing.capture_logs() as logs:
        schema.check(body, responses_fields.RESPONSES_REQUEST, "", "drop")
    assert body["include"] == ["reasoning.encrypted_content"]
    assert logs[0]["event"] == "request_value_dropped" and logs[0]["field"] == "include[1]"


def test_gated_objects_are_checked_too() -> None:
    from gatekeeper.errors import RequestInvalid

    with pytest.raises(RequestInvalid, match=r"^reasoning\.tools is not a field"):
        schema.check(
            {"model": "m", "reasoning": {"effort": "low", "tools": []}},
            responses_fields.RESPONSES_REQUEST,
            "",
            "refuse",
        )
    with pytest.raises(RequestInvalid, match=r"^thinking\.type 'tools' is not a type"):
        schema.check({"model": "m", "thinking": {"type": "tools"}}, messages_fields.MESSAGES_REQUEST, "", "drop")
    with pytest.raises(RequestInvalid, match=r"^output_config\.format\.tools is not a field"):
        body = {"model": "m", "output_config": {"format": {"type": "json_schema", "schema": {}, "tools": []}}}
        schema.check(body, messages_fields.MESSAGES_REQUEST, "", "refuse")


def test_free_form_values_are_forwarded_unread() -> None:
    # A tool's JSON schema, an earlier call's input: their keys are the protocol's business.
    tool = {"name": "f", "parameters": {"type": "object", "properties": {"tools": {"type": "array"}}, "$defs": {}}}
    schema.check(tool, chat_fields.CHAT_FUNCTION, "tools[0].function", "refuse")
    block = {"type": "tool_use", "id": "t", "name": "f", "input": {"anything": {"nested": [1, {"x": 2}]}}}
    schema.check_typed(block, messages_fields.MESSAGES_CONTENT_BLOCK, "messages[1].content[0]", "refuse")


def test_messages_content_blocks_nested_objects_are_checked() -> None:
    from gatekeeper.errors import RequestInvalid

    image = {"type": "image", "source": {"type": "url", "url": "https://x/y.png", "tools": []}}
    with pytest.raises(RequestInvalid, match=r"^messages\[0\]\.content\[0\]\.source\.tools is not a field"):
        schema.check_typed(image, messages_fields.MESSAGES_CONTENT_BLOCK, "messages[0].content[0]", "refuse")
    result = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [{"type": "text", "text": "ok", "cache_control": {"type": "ephemeral", "scope": "all"}}],
    }
    with pytest.raises(RequestInvalid, match=r"content\[0\]\.content\[0\]\.cache_control\.scope is not a field"):
        schema.check_typed(result, messages_fields.MESSAGES_CONTENT_BLOCK, "messages[0].content[0]", "refuse")


def test_a_table_built_per_call_is_read_as_itself():
    # `check` remembers what it derives per table; a table built per call may take a dead one's
    # id, and must still be read as itself (a cache keyed by id alone let its Refused field pass).
    for _ in range(200):
        plain = {"x": schema.FORWARD, "y": schema.FORWARD}
        schema.check({"y": 1}, plain, "", "refuse")
        del plain
        refusing = {"x": schema.FORWARD, "y": schema.Refused("not here")}
        with pytest.raises(RequestInvalid, match="'y' is refused: not here"):
            schema.check({"y": 1}, refusing, "", "refuse")
