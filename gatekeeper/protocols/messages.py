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

from gatekeeper.errors import AnswerIncomplete, AnswerInvalid, RequestInvalid, ToolChoiceBlocked
from gatekeeper.gating import BUILTIN_FAMILIES, Gated, ToolId, ToolKind, ToolPolicy
from gatekeeper.protocols.base import Allowed, Call, Enforced, Event, Offered, RequestInfo
from gatekeeper.protocols.enforce import Positions, allowed, enforce_items, explanation, record
from gatekeeper.protocols.stream import read_object
from gatekeeper.tiers import Tier

# Content block types of the Messages API (anthropic/types/beta/beta_content_block.py) that call
# nothing.
_NOT_CALLS = frozenset({"text", "thinking", "redacted_thinking", "container_upload", "compaction", "fallback"})
# The results of server-run calls, each naming its call in `tool_use_id`: removed with that call.
_RESULTS = frozenset(
    {
        "web_search_tool_result",
        "web_fetch_tool_result",
        "advisor_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_result",
    }
)
# A `tool_use` block calls a client tool by name: a custom tool's own name, or the fixed name a
# client-run built-in type is called by (anthropic/types/tool_bash_20250124_param.py: `name:
# Literal["bash"]`, ...). Exact types: a custom tool named `bash` is a function, not this.
_TOOL_USE_NAMES = {
    "bash_20241022": "bash",
    "bash_20250124": "bash",
    "computer_20241022": "computer",
    "computer_20250124": "computer",
    "computer_20251124": "computer",
    "memory_20250818": "memory",
    "text_editor_20241022": "str_replace_editor",
    "text_editor_20250124": "str_replace_editor",
    "text_editor_20250429": "str_replace_based_edit_tool",
    "text_editor_20250728": "str_replace_based_edit_tool",
}


def _family_types(family: str) -> tuple[str, ...]:
    """The Messages API's types of one built-in family: the dated ones (`web_search_20250305`);
    the undated types of the family are OpenAI's."""
    return tuple(t for t, f in BUILTIN_FAMILIES.items() if f == family and t[-8:].isdigit())


# A `server_tool_use` block's name (anthropic/types/server_tool_use_block.py) -> the server tool
# types whose offer lets it through (the first stands for the family in an explanation).
_SERVER_CALLS: dict[str, tuple[str, ...]] = {
    "web_search": _family_types("web_search"),
    "web_fetch": _family_types("web_fetch"),
    "code_execution": _family_types("code_execution"),
    "bash_code_execution": _family_types("code_execution"),
    "text_editor_code_execution": _family_types("code_execution"),
    "tool_search_tool_regex": ("tool_search_tool_regex_20251119", "tool_search_tool_regex"),
    "tool_search_tool_bm25": ("tool_search_tool_bm25_20251119", "tool_search_tool_bm25"),
    "advisor": _family_types("advisor"),
}
_TERMINAL = frozenset({"message_stop", "error"})  # events that end a Messages stream

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

    def offered(self, body: dict[str, Any]) -> Offered:
        tools: list[tuple[ToolId, dict[str, Any] | None]] = []
        for tool in body.get("tools") or []:
            kind = tool.get("type")
            if kind == "mcp_toolset":
                tools.append((ToolId.mcp(tool["mcp_server_name"], "*"), None))
            elif kind in (None, "custom"):
                schema = tool.get("input_schema")
                tools.append((ToolId.function(tool["name"]), schema if isinstance(schema, dict) else None))
            else:
                tools.append((ToolId.builtin(kind), None))  # by its type, whatever `name` it carries
        for server in body.get("mcp_servers") or []:
            for name in _server_allowed(server) or ["*"]:  # `*`: the server offered whole
                tools.append((ToolId.mcp(server["name"], name), None))
        return Offered(tools)

    def enforce(self, doc: Any, offered: Allowed | Offered) -> Enforced:
        if not isinstance(doc, dict):
            raise AnswerInvalid(f"a Messages answer must be a JSON object, got {type(doc).__name__}")
        result = Enforced()
        _enforce_message(doc, allowed(offered), result)
        return result

    def stream_filter(self, offered: Allowed | Offered) -> MessagesStreamFilter:
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


class _Judge:
    """What each content block of one answer (plain, or one stream) calls, and whether it may
    reach the client (see enforce.Judge). Remembers the calls it removed: their results go too."""

    __slots__ = ("allow", "removed_ids")

    def __init__(self, allow: Allowed) -> None:
        self.allow = allow
        self.removed_ids: set[str] = set()

    def __call__(self, block: dict[str, Any]) -> tuple[Call, ToolId | None] | bool:
        kind = block.get("type")
        if not isinstance(kind, str):
            raise AnswerInvalid("a content block has no string 'type'")
        if kind in _NOT_CALLS:
            return True
        if kind in _RESULTS:
            answered = block.get("tool_use_id")
            return not (isinstance(answered, str) and answered in self.removed_ids)
        if kind == "mcp_tool_listing":
            return self._listing(block)
        call, tool = self._call(kind, block)
        if not call.offered and isinstance(block.get("id"), str):
            self.removed_ids.add(block["id"])
        return call, tool

    def _call(self, kind: str, block: dict[str, Any]) -> tuple[Call, ToolId | None]:
        # `input` arrives parsed; its JSON text is what the drift tracker validates.
        arguments = orjson.dumps(block["input"]).decode() if "input" in block else None
        if kind not in ("tool_use", "server_tool_use", "mcp_tool_use"):  # not a type this codec knows
            return Call(kind, arguments, False), None
        name = block.get("name")
        if not isinstance(name, str):
            raise AnswerInvalid(f"a {kind} block has no string 'name'")
        offered = self.allow.offered.tools
        if kind == "mcp_tool_use":
            server = block.get("server_name")
            if not isinstance(server, str):
                raise AnswerInvalid("an mcp_tool_use block has no string 'server_name'")
            tool = ToolId.mcp(server, name)
            return Call(str(tool), arguments, self.allow.admits(tool)), tool
        if kind == "tool_use":
            function = ToolId.function(name)
            if function in offered:
                return Call(name, arguments, True), function
            typed = [t for t, called in _TOOL_USE_NAMES.items() if called == name]
            builtin = next((t for t in typed if ToolId.builtin(t) in offered), None)
            if builtin is not None:
                return Call(builtin, arguments, True), ToolId.builtin(builtin)
            return Call(name, arguments, False), ToolId.builtin(typed[0]) if typed else function
        types = _SERVER_CALLS.get(name, ())
        matched = next((t for t in types if ToolId.builtin(t) in offered), None)
        stands_for = ToolId.builtin(matched or types[0]) if types else None
        return Call(matched or name, arguments, matched is not None), stands_for

    def _listing(self, block: dict[str, Any]) -> tuple[Call, ToolId | None] | bool:
        """An `mcp_tool_listing` block: kept for a server the request offered, listing only the
        tools the tier admits."""
        server = block.get("mcp_server_name")
        if not isinstance(server, str):
            raise AnswerInvalid("an mcp_tool_listing block has no string 'mcp_server_name'")
        if not any(t.kind is ToolKind.MCP and t.group == server for t in self.allow.offered.tools):
            return Call(f"{server}.*", None, False), ToolId.mcp(server, "*")
        listed = block.get("tools")
        if listed is not None:
            if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
                raise AnswerInvalid("an mcp_tool_listing block's 'tools' must be an array of objects")
            block["tools"] = [
                t for t in listed if isinstance(t.get("name"), str) and self.allow.admits(ToolId.mcp(server, t["name"]))
            ]
        return True


def _stand_in(block: dict[str, Any], position: int, text: str) -> dict[str, Any]:
    """The text block that replaces a removed call under `blocked_calls: explain`."""
    return {"type": "text", "text": text}


def _enforce_message(message: dict[str, Any], allow: Allowed, result: Enforced) -> None:
    content = message.get("content")
    if content is None:
        return
    kept = enforce_items(content, "content", _Judge(allow), result, _stand_in, allow)
    if kept is None:
        return
    message["content"] = kept
    if message.get("stop_reason") == "tool_use" and not any(b.get("type") == "tool_use" for b in kept):
        message["stop_reason"] = "end_turn"


class MessagesStreamFilter:
    """Drops the content_block_start/_delta/_stop events of a removed block (or, under `explain`,
    sends a whole stand-in text block in its place), renumbers later `index` values, and turns
    the final `stop_reason` `tool_use` into `end_turn` when no `tool_use` block reached the client.
    Events are re-serialised from what was parsed, with `event:` set to the data's own `type`. The
    stream ends at `message_stop` (or `error`); one that ends before is incomplete."""

    def __init__(self, offered: Allowed | Offered) -> None:
        self.allow = allowed(offered)
        self.result = Enforced()
        self._judge = _Judge(self.allow)
        self._positions = Positions()
        self._removed: set[int] = set()  # upstream indexes whose own events never reach the client
        self._open: set[int] = set()
        self._tool_uses_kept = 0
        self._arguments: dict[int, tuple[int, list[str]]] = {}  # index -> (position in calls, input parts)
        self._ended = False

    def feed(self, event: Event) -> list[Event]:
        if self._ended or event.data.strip() == "[DONE]":
            return []  # [DONE] is not a Messages event: the stream ends at message_stop
        doc = read_object(event, "Messages")
        kind = doc["type"]
        docs = [doc]
        if kind.startswith("content_block_"):
            docs = self._route(kind, doc)
        elif kind == "message_start":
            message = doc.get("message")
            if not isinstance(message, dict):
                raise AnswerInvalid("a message_start event has no 'message' object")
            scratch = Enforced()  # blocks arrive as content_block events; this only cleans the snapshot
            _enforce_message(message, self.allow, scratch)
        elif kind == "message_delta":
            delta = doc.get("delta")
            if not isinstance(delta, dict):
                raise AnswerInvalid("a message_delta event has no 'delta' object")
            if delta.get("stop_reason") == "tool_use" and self.result.removed and not self._tool_uses_kept:
                delta["stop_reason"] = "end_turn"
        elif "index" in doc or "content_block" in doc:
            raise AnswerInvalid(f"a {kind!r} event carries a content block index it should not")
        self._ended = kind in _TERMINAL
        return [Event(data=orjson.dumps(d).decode(), event=d["type"], id=event.id, retry=event.retry) for d in docs]

    def _route(self, kind: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
        index = doc.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise AnswerInvalid(f"a {kind!r} event has an invalid index {index!r}")
        if kind == "content_block_start":
            return self._start(index, doc)
        if kind not in ("content_block_delta", "content_block_stop"):
            raise AnswerInvalid(f"unknown content block event {kind!r}")
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
        if index in self._removed:
            return []
        doc["index"] = self._positions[index]
        return [doc]

    def _start(self, index: int, doc: dict[str, Any]) -> list[dict[str, Any]]:
        if index in self._positions:
            raise AnswerInvalid(f"content block {index} was started twice")
        block = doc.get("content_block")
        if not isinstance(block, dict):
            raise AnswerInvalid("a content_block_start event has no 'content_block' object")
        self._open.add(index)
        verdict = self._judge(block)
        if verdict is not True and verdict is not False:
            self._arguments[index] = (len(self.result.calls), [])
        if verdict is True or (verdict is not False and record(self.result, verdict[0])):
            self._tool_uses_kept += block.get("type") == "tool_use"
            doc["index"] = self._positions.place(index, True)
            return [doc]
        self._removed.add(index)
        text = None if verdict is False else explanation(self.allow, verdict[0].name, verdict[1])
        position = self._positions.place(index, text is not None)
        if text is None or position is None:
            return []
        return [
            {"type": "content_block_start", "index": position, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": position, "delta": {"type": "text_delta", "text": text}},
            {"type": "content_block_stop", "index": position},
        ]

    def finish(self) -> list[Event]:
        if not self._ended:
            raise AnswerIncomplete("upstream stream ended before message_stop")
        return []

    def error(self, message: str, kind: str, code: str | None) -> Event:
        """The event that ends this stream in error."""
        return CODEC.stream_error(message, kind, code)


CODEC = MessagesCodec()
