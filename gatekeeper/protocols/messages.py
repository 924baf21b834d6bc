"""The Anthropic Messages API codec (`POST /v1/messages`, `/v1/messages/count_tokens`).

How this protocol carries tools, and what gatekeeper calls each one:
  * `tools[]`: every tool has a `name` (client tools, and typed tools such as `bash_20250124`
    named `bash`, `text_editor_...` named `str_replace_based_edit_tool`, `web_search_...` named
    `web_search`); it is gated by that name. An `mcp_toolset` tool is gated by `mcp_server_name`.
  * `mcp_servers[]` (MCP connector): gated per server `name`; the entries of
    `tool_configuration.allowed_tools` are gated as `server.tool`.
  * `tool_choice`: `auto`, `any`, `tool` (forcing a hidden tool is a 400), `none`; `any` when every
    offered tool is hidden is a 400 too.

Effort: `output_config.effort` (`low` | `medium` | `high` | `xhigh` | `max`) is the effort, as the
API defines it (anthropic-sdk-python `types/output_config_param.py`: "How much effort the model
should put into its response"; https://platform.claude.com/docs/en/build-with-claude/effort).
Without it, manual extended thinking `thinking: {"type": "enabled", "budget_tokens": N}` (N >= 1024
and < max_tokens, https://platform.claude.com/docs/en/build-with-claude/extended-thinking) maps to
an effort so that profiles stay keyed `model@effort` whatever the protocol:
    N < 4096 -> low,   4096 <= N < 16384 -> medium,   N >= 16384 -> high.
(1024 is the API's minimum budget; 16k is where Anthropic's docs start to speak of "large"
budgets.) Anything else (adaptive or disabled thinking, no thinking) is the `default` level.

Answers carry calls as `content` blocks (`tool_use`, `server_tool_use`, `mcp_tool_use`). A block
calling a tool the gated request did not offer is removed, as is a block of an unknown type; when
no `tool_use` remains, `stop_reason` `tool_use` becomes `end_turn`. Streams: the events of a
removed block are dropped and later `index` values renumbered.
"""

from __future__ import annotations

from typing import Any

import orjson

from gatekeeper.errors import AnswerInvalid, RequestInvalid, ToolChoiceBlocked
from gatekeeper.gating import Gated, ToolPolicy
from gatekeeper.protocols.base import Call, Enforced, Event, RequestInfo
from gatekeeper.tiers import Tier

# Content block types that carry no call.
_NOT_CALLS = frozenset(
    {"text", "thinking", "redacted_thinking", "container_upload", "compaction", "document", "image", "search_result"}
)
_CALLS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
_MCP_ANY = "*"

# Thinking budget -> effort (see the module docstring).
_BUDGET_EFFORT = ((16384, "high"), (4096, "medium"), (0, "low"))

# HTTP status -> Anthropic error type (https://docs.anthropic.com/en/api/errors); the SDK maps the
# status to its exception class and reads `error.type` / `error.message`.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def effort_of(body: dict[str, Any]) -> str | None:
    """The effort a Messages request asks for (None: the `default` level)."""
    config = body.get("output_config")
    if config is not None:
        if not isinstance(config, dict):
            raise RequestInvalid(f"'output_config' must be an object, got {type(config).__name__}")
        effort = config.get("effort")
        if effort is not None:
            if not isinstance(effort, str) or not effort:
                raise RequestInvalid("'output_config.effort' must be a non-empty string")
            return effort
    thinking = body.get("thinking")
    if thinking is None:
        return None
    if not isinstance(thinking, dict):
        raise RequestInvalid(f"'thinking' must be an object, got {type(thinking).__name__}")
    if thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise RequestInvalid("'thinking.budget_tokens' must be a non-negative integer")
    return next(effort for floor, effort in _BUDGET_EFFORT if budget >= floor)


class MessagesCodec:
    name = "messages"
    upstream_path = "/messages"
    markers: tuple[bytes, ...] = (b"tool_use",)  # `tool_use`, `server_tool_use`, `mcp_tool_use`, `..._tool_use`

    def parse(self, body: dict[str, Any]) -> RequestInfo:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestInvalid("'model' is required and must be a non-empty string")
        if not isinstance(body.get("messages"), list):
            raise RequestInvalid("'messages' is required and must be an array")
        stream = body.get("stream", False)
        if not isinstance(stream, bool) and stream is not None:
            raise RequestInvalid("'stream' must be a boolean")
        return RequestInfo(model=model, effort=effort_of(body), stream=bool(stream))

    def gate(self, body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
        gated = Gated()
        tools = body.get("tools")
        kept: list[Any] = []
        if tools is not None:
            if not isinstance(tools, list):
                raise RequestInvalid(f"'tools' must be an array, got {type(tools).__name__}")
            for i, tool in enumerate(tools):
                name = _tool_name(tool, f"tools[{i}]")
                if policy.allows(tier, name):
                    kept.append(tool)
                    gated.kept.append(name)
                else:
                    gated.hidden.append(name)
        servers = _gate_servers(body, tier, policy, gated)
        any_kept = bool(kept) or bool(servers)
        choice = body.get("tool_choice")
        if choice is not None:
            if not isinstance(choice, dict):
                raise RequestInvalid(f"'tool_choice' must be an object, got {type(choice).__name__}")
            kind = choice.get("type")
            if kind == "tool":
                forced = choice.get("name")
                if not isinstance(forced, str) or not forced:
                    raise RequestInvalid("'tool_choice.name' must be a non-empty string")
                if not policy.allows(tier, forced):
                    raise ToolChoiceBlocked(forced, policy.required_tier(forced), tier)
            elif kind == "any":
                if not any_kept and gated.hidden:
                    names = ",".join(gated.hidden)
                    exc = ToolChoiceBlocked(
                        names, max((policy.required_tier(n) for n in gated.hidden), key=lambda t: t.rank), tier
                    )
                    exc.args = (
                        f"tool_choice 'any' demands a tool call, but every offered tool is hidden at "
                        f"tier {tier.value!r}: {names}",
                    )
                    raise exc
            elif kind not in ("auto", "none"):
                raise RequestInvalid(f"'tool_choice.type' must be 'auto', 'any', 'tool' or 'none', got {kind!r}")
        if kept:
            body["tools"] = kept
        else:
            body.pop("tools", None)
            if not servers:
                body.pop("tool_choice", None)  # a choice with no tool to choose from is refused by the API
        return gated

    def offered(self, body: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
        offered: dict[str, dict[str, Any] | None] = {}
        for tool in body.get("tools") or []:
            if tool.get("type") == "mcp_toolset":
                offered[f"{tool['mcp_server_name']}.{_MCP_ANY}"] = None
            else:
                offered[tool["name"]] = tool.get("input_schema")
        for server in body.get("mcp_servers") or []:
            for name in _server_allowed(server) or [_MCP_ANY]:
                offered[f"{server['name']}.{name}"] = None
        return offered

    def enforce(self, doc: Any, offered: dict[str, dict[str, Any] | None]) -> Enforced:
        if not isinstance(doc, dict):
            raise AnswerInvalid(f"a Messages answer must be a JSON object, got {type(doc).__name__}")
        result = Enforced()
        _enforce_message(doc, offered, result)
        return result

    def stream_filter(self, offered: dict[str, dict[str, Any] | None]) -> MessagesStreamFilter:
        return MessagesStreamFilter(offered)

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        kind = kind if kind in _ERROR_TYPES.values() or kind == "api_error" else _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def stream_error(self, message: str, kind: str, code: str | None) -> Event:
        # anthropic-python raises its APIStatusError on an `event: error` in a stream.
        body = self.error_body(500, message, kind, code)
        return Event(data=orjson.dumps(body).decode(), event="error")


# -- request gating ------------------------------------------------------------------------


def _tool_name(tool: Any, where: str) -> str:
    if not isinstance(tool, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(tool).__name__}")
    field = "mcp_server_name" if tool.get("type") == "mcp_toolset" else "name"
    name = tool.get(field)
    if not isinstance(name, str) or not name:
        raise RequestInvalid(f"{where}.{field} must be a non-empty string")
    return name


def _server_allowed(server: dict[str, Any]) -> list[str] | None:
    config = server.get("tool_configuration")
    allowed = config.get("allowed_tools") if isinstance(config, dict) else None
    return allowed if isinstance(allowed, list) else None


def _gate_servers(body: dict[str, Any], tier: Tier, policy: ToolPolicy, gated: Gated) -> list[Any]:
    servers = body.get("mcp_servers")
    if servers is None:
        return []
    if not isinstance(servers, list):
        raise RequestInvalid(f"'mcp_servers' must be an array, got {type(servers).__name__}")
    kept = []
    for i, server in enumerate(servers):
        if not isinstance(server, dict) or not isinstance(server.get("name"), str) or not server["name"]:
            raise RequestInvalid(f"mcp_servers[{i}].name must be a non-empty string")
        label = server["name"]
        if not policy.allows(tier, label):
            gated.hidden.append(label)
            continue
        found = server.get("tool_configuration")
        config: dict[str, Any] = found if isinstance(found, dict) else {}
        allowed = config.get("allowed_tools")
        if allowed is None:
            kept.append(server)
            gated.kept.append(label)
            continue
        if not isinstance(allowed, list) or not all(isinstance(n, str) and n for n in allowed):
            raise RequestInvalid(f"mcp_servers[{i}].tool_configuration.allowed_tools must be an array of names")
        names = [n for n in allowed if policy.allows(tier, f"{label}.{n}")]
        gated.kept += [f"{label}.{n}" for n in names]
        gated.hidden += [f"{label}.{n}" for n in allowed if n not in names]
        if names:
            kept.append(
                server
                if len(names) == len(allowed)
                else server | {"tool_configuration": config | {"allowed_tools": names}}
            )
    if kept:
        body["mcp_servers"] = kept
    else:
        body.pop("mcp_servers")
    return kept


# -- answer enforcement --------------------------------------------------------------------


def _call_key(block: dict[str, Any], offered: dict[str, dict[str, Any] | None]) -> tuple[str, bool] | None:
    kind = block.get("type")
    if not isinstance(kind, str):
        raise AnswerInvalid("a content block has no string 'type'")
    if kind in _NOT_CALLS or kind.endswith("_result"):
        return None
    name = block.get("name")
    if kind == "mcp_tool_use":
        server = block.get("server_name")
        if not isinstance(server, str) or not isinstance(name, str):
            raise AnswerInvalid("an mcp_tool_use block has no string 'server_name' / 'name'")
        key = f"{server}.{name}"
        return key, key in offered or f"{server}.{_MCP_ANY}" in offered
    if kind in _CALLS or kind.endswith("tool_use"):
        if not isinstance(name, str):
            raise AnswerInvalid(f"a {kind} block has no string 'name'")
        return name, name in offered
    return kind, False  # a type this codec does not know: it may be a call, so it goes


def _enforce_message(message: dict[str, Any], offered: dict[str, dict[str, Any] | None], result: Enforced) -> None:
    content = message.get("content")
    if content is None:
        return
    if not isinstance(content, list):
        raise AnswerInvalid(f"'content' must be an array, got {type(content).__name__}")
    kept = []
    for block in content:
        if not isinstance(block, dict):
            raise AnswerInvalid(f"a content block must be an object, got {type(block).__name__}")
        call = _call_key(block, offered)
        if call is None:
            kept.append(block)
            continue
        name, ok = call
        # `input` arrives parsed; its JSON text is what the drift tracker validates.
        arguments = orjson.dumps(block["input"]).decode() if "input" in block else None
        result.calls.append(Call(name=name, arguments=arguments, offered=ok))
        if ok:
            kept.append(block)
        else:
            result.removed.append(name)
    if len(kept) != len(content):
        message["content"] = kept
        if message.get("stop_reason") == "tool_use" and not any(b.get("type") == "tool_use" for b in kept):
            message["stop_reason"] = "end_turn"


class MessagesStreamFilter:
    """Drops the content_block_start/_delta/_stop events of a removed block, renumbers later
    `index` values, and turns the final `stop_reason` `tool_use` into `end_turn` when no
    `tool_use` block reached the client. Events are re-serialised from what was parsed, with
    `event:` set to the data's own `type`."""

    def __init__(self, offered: dict[str, dict[str, Any] | None]) -> None:
        self.offered = offered
        self.result = Enforced()
        self._index: dict[int, int | None] = {}  # upstream index -> client index (None: removed)
        self._open: set[int] = set()
        self._next = 0
        self._tool_uses_kept = 0
        self._arguments: dict[int, tuple[int, list[str]]] = {}  # index -> (position in calls, input parts)

    def feed(self, event: Event) -> list[Event]:
        try:
            doc = orjson.loads(event.data)
        except orjson.JSONDecodeError as exc:
            raise AnswerInvalid(f"a Messages stream event is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise AnswerInvalid(f"a Messages stream event must be a JSON object, got {type(doc).__name__}")
        kind = doc.get("type")
        if not isinstance(kind, str):
            raise AnswerInvalid("a Messages stream event has no string 'type'")
        if kind.startswith("content_block_"):
            if not self._route(kind, doc):
                return []
        elif kind == "message_start":
            message = doc.get("message")
            if not isinstance(message, dict):
                raise AnswerInvalid("a message_start event has no 'message' object")
            scratch = Enforced()  # blocks arrive as content_block events; this only cleans the snapshot
            _enforce_message(message, self.offered, scratch)
        elif kind == "message_delta":
            delta = doc.get("delta")
            if not isinstance(delta, dict):
                raise AnswerInvalid("a message_delta event has no 'delta' object")
            if delta.get("stop_reason") == "tool_use" and self.result.removed and not self._tool_uses_kept:
                delta["stop_reason"] = "end_turn"
        elif "index" in doc or "content_block" in doc:
            raise AnswerInvalid(f"a {kind!r} event carries a content block index it should not")
        return [Event(data=orjson.dumps(doc).decode(), event=kind, id=event.id, retry=event.retry)]

    def _route(self, kind: str, doc: dict[str, Any]) -> bool:
        index = doc.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise AnswerInvalid(f"a {kind!r} event has an invalid index {index!r}")
        if kind == "content_block_start":
            if index in self._index:
                raise AnswerInvalid(f"content block {index} was started twice")
            block = doc.get("content_block")
            if not isinstance(block, dict):
                raise AnswerInvalid("a content_block_start event has no 'content_block' object")
            call = _call_key(block, self.offered)
            ok = True
            if call is not None:
                name, ok = call
                self._arguments[index] = (len(self.result.calls), [])
                self.result.calls.append(Call(name=name, arguments=None, offered=ok))
                if not ok:
                    self.result.removed.append(name)
                elif block.get("type") == "tool_use":
                    self._tool_uses_kept += 1
            self._index[index] = self._next if ok else None
            self._open.add(index)
            if ok:
                self._next += 1
        elif kind in ("content_block_delta", "content_block_stop"):
            if index not in self._open:
                raise AnswerInvalid(f"a {kind!r} event for block {index}, which is not open")
            delta = doc.get("delta")
            if index in self._arguments and isinstance(delta, dict) and delta.get("type") == "input_json_delta":
                part = delta.get("partial_json")
                if isinstance(part, str):
                    self._arguments[index][1].append(part)
            if kind == "content_block_stop":
                self._open.discard(index)
                if index in self._arguments:  # the streamed input, for the drift tracker
                    position, parts = self._arguments.pop(index)
                    seen = self.result.calls[position]
                    self.result.calls[position] = Call(seen.name, "".join(parts) or "{}", seen.offered)
        else:
            raise AnswerInvalid(f"unknown content block event {kind!r}")
        client_index = self._index[index]
        if client_index is None:
            return False
        doc["index"] = client_index
        return True

    def finish(self) -> list[Event]:
        return []


CODEC = MessagesCodec()
