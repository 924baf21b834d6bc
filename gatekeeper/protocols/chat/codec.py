"""The OpenAI Chat Completions codec (`POST /v1/chat/completions`): what a request says (model,
effort, stream), and where its gating (protocols/chat/gate.py) and its answers' enforcement
(protocols/chat/answer.py) are."""

from __future__ import annotations

from typing import Any

from gatekeeper.errors import RequestInvalid
from gatekeeper.protocols.base import Allowed, Enforced, Event, Offered, RequestInfo
from gatekeeper.protocols.chat.answer import (
    ChatStreamFilter,
    enforce,
    error_body,
    parameters_of,
    stream_error,
)
from gatekeeper.protocols.chat.gate import check_request, gate_request
from gatekeeper.protocols.enforce import json_format
from gatekeeper.protocols.gate import Gated, tool_id, tool_name
from gatekeeper.protocols.memo import JsonMemo
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy

_MARKERS = (b"tool_calls", b"function_call")


def _template_effort(body: dict[str, Any], effort: str | None) -> str | None:
    """The effort a request really runs at. Servers such as vLLM let `chat_template_kwargs`
    override the top-level field (`reasoning_effort` for gpt-oss templates; `enable_thinking` /
    `thinking` false turn reasoning off, effort `none`): the tier must be the one of that effort,
    so a template effort is the request's effort, and one that contradicts `reasoning_effort` is
    refused (a high effort's tier for a low-effort run)."""
    kwargs = body.get("chat_template_kwargs")
    if not isinstance(kwargs, dict):
        return effort
    implied = kwargs.get("reasoning_effort")
    if implied is not None and (not isinstance(implied, str) or not implied or "@" in implied):
        raise RequestInvalid("'chat_template_kwargs.reasoning_effort' must be a non-empty string without '@'")
    for key in ("enable_thinking", "thinking"):
        # Only true and false are read here; a template may take 0, "" or "false" for off.
        if kwargs.get(key) is not None and not isinstance(kwargs[key], bool):
            raise RequestInvalid(f"'chat_template_kwargs.{key}' must be true or false")
    off = [k for k in ("enable_thinking", "thinking") if kwargs.get(k) is False]
    if off and implied not in (None, "none"):
        raise RequestInvalid(
            f"'chat_template_kwargs.{off[0]}' false (no reasoning) contradicts "
            f"'chat_template_kwargs.reasoning_effort' {implied[:32]!r}"
        )
    implied = implied or ("none" if off else None)
    if implied is None or effort == implied:
        return effort
    if effort is not None:
        where = "reasoning_effort" if "reasoning_effort" in kwargs else f"{off[0]}: false"
        raise RequestInvalid(
            f"'chat_template_kwargs.{where}' contradicts 'reasoning_effort' {effort[:32]!r}: the server "
            f"would run at effort {implied[:32]!r}; send one effort, in 'reasoning_effort'"
        )
    return implied


def _offered(carriers: Any) -> Offered:
    """The offered tools of a gated body's `tools` and `functions` (all it reads)."""
    listed, functions = carriers
    tools: list[tuple[ToolId, dict[str, Any] | None]] = []
    for tool in listed or []:
        kind = tool.get("type", "function")
        if kind in ("function", "custom"):
            make = ToolId.function if kind == "function" else ToolId.custom
            tools.append((make(tool_name(tool, "tools[]")), parameters_of(tool.get(kind))))
        else:
            tools.append((ToolId.builtin(kind), None))  # chat answers carry no call to one
    for function in functions or []:
        tools.append((ToolId.function(function["name"]), parameters_of(function)))
    return Offered(tools)


_OFFERED = JsonMemo(_offered)  # a conversation sends the same tools with every request


class ChatCodec:
    name = "chat"
    upstream_path = "/chat/completions"
    markers: tuple[bytes, ...] = _MARKERS
    plain_types: frozenset[bytes] | None = (
        None  # a chat answer's calls are its `tool_calls` / `function_call`: the markers
    )

    def parse(self, body: dict[str, Any]) -> RequestInfo:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestInvalid("'model' is required and must be a non-empty string")
        effort = body.get("reasoning_effort")
        if effort is not None and (not isinstance(effort, str) or not effort):
            raise RequestInvalid("'reasoning_effort' must be a non-empty string")
        if effort is not None and "@" in effort:
            raise RequestInvalid("'reasoning_effort' must not contain '@'")
        if not isinstance(body.get("messages"), list):
            raise RequestInvalid("'messages' is required and must be an array")
        stream = body.get("stream", False)
        if stream is not None and not isinstance(stream, bool):
            raise RequestInvalid("'stream' must be a boolean")
        return RequestInfo(model, _template_effort(body, effort), bool(stream))

    def gate(self, body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
        check_request(body, policy.unknown_fields)
        gated = gate_request(body, tier, policy)
        if body.get("web_search_options") is not None:
            # It switches on the search models' built-in web search: gated as that built-in.
            search = ToolId.builtin("web_search")
            if policy.allows(tier, search):
                gated.kept.append(search.name)
            else:
                del body["web_search_options"]
                gated.hidden.append(search.name)
        return gated

    def offered(self, body: dict[str, Any]) -> Offered:
        return _OFFERED((body.get("tools"), body.get("functions")))

    def enforce(self, doc: Any, offered: Allowed | Offered) -> Enforced:
        return enforce(doc, offered)

    def stream_filter(self, offered: Allowed | Offered) -> ChatStreamFilter:
        return ChatStreamFilter(offered)

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        return error_body(status, message, kind, code)

    def listed_tool(self, tool: dict[str, Any], where: str) -> ToolId | None:
        # Chat's shape: the name is in its `function` / `custom` object.
        return tool_id(tool, where) if isinstance(tool.get(tool.get("type") or "function"), dict) else None

    def asks_structured(self, body: dict[str, Any]) -> bool:
        return json_format(body.get("response_format"))

    def stream_error(self, message: str, kind: str, code: str | None) -> Event:
        return stream_error(message, kind, code)


CODEC = ChatCodec()
