"""The Anthropic Messages API codec (`POST /v1/messages`, `/v1/messages/count_tokens`).

How this protocol carries tools, and what gatekeeper calls each one:
  * `tools[]`: every tool has a `name` (client tools, and typed tools such as `bash_20250124`
    named `bash`, `text_editor_...` named `str_replace_based_edit_tool`, `web_search_...` named
    `web_search`); it is gated by that name. An `mcp_toolset` tool is gated by `mcp_server_name`.
  * `mcp_servers[]` (MCP connector): gated per server `name` (or the label its `url` is bound to,
    gatekeeper.rules.mcp_identity); the entries of `tool_configuration.allowed_tools` are gated as
    `server.tool`.
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
One effort per request: `output_config.effort` beside a budget of another effort, or beside
disabled thinking, is refused (400 naming both), never gated at either (`effort_of`).

Answers carry calls as `content` blocks (`tool_use`, `server_tool_use`, `mcp_tool_use`). A block
calling a tool the gated request did not offer is removed, as is a block of an unknown type; when
no `tool_use` remains, `stop_reason` `tool_use` becomes `end_turn`. Streams: the events of a
removed block are dropped and later `index` values renumbered.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.errors import RequestInvalid
from gatekeeper.protocols import schema as S
from gatekeeper.protocols.base import Allowed, Enforced, Event, Offered, RequestInfo
from gatekeeper.protocols.enforce import enforce_answer, json_format
from gatekeeper.protocols.gate import Gated, nonempty
from gatekeeper.protocols.memo import JsonMemo
from gatekeeper.protocols.messages import fields as F
from gatekeeper.protocols.messages.answer import (
    CITATIONS,
    NOT_CALLS,
    MessagesStreamFilter,
    answer_side,
    enforce_message,
    error_body,
    stream_error,
)
from gatekeeper.protocols.messages.gate import effort_of, gate_request, mcp_offered, offered_tools
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy


class MessagesCodec:
    name = "messages"
    markers: tuple[bytes, ...] = (b"tool_use",)  # `tool_use`, `server_tool_use`, `mcp_tool_use`, `..._tool_use`
    # The message, blocks that call nothing and text citations (anthropic/types/text_citation.py):
    # an answer with any other block type (an MCP listing, a type this codec does not know) is parsed.
    plain_types: frozenset[bytes] | None = frozenset(t.encode() for t in NOT_CALLS | CITATIONS | {"message"})

    def __init__(self, fields: S.Fields = F.MESSAGES_REQUEST, upstream_path: str = "/messages") -> None:
        self.fields = fields  # the endpoint's allowlist: MESSAGES_REQUEST or MESSAGES_COUNT_TOKENS
        self.upstream_path = upstream_path

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
        return gate_request(body, tier, policy, self.fields)

    def offered(self, body: dict[str, Any]) -> Offered:
        top = body.get("tools")
        added = offered_tools(body)[len(top or []) :]  # by `tool_addition` blocks
        return _OFFERED((top, added, body.get("mcp_servers")))

    def enforce(self, doc: Any, offered: Allowed | Offered) -> Enforced:
        return enforce_answer(doc, "Messages", enforce_message, answer_side(offered))

    def stream_filter(self, offered: Allowed | Offered) -> MessagesStreamFilter:
        return MessagesStreamFilter(answer_side(offered))

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        return error_body(status, message, kind, code)

    def listed_tool(self, tool: dict[str, Any], where: str) -> ToolId | None:
        # A client tool: untyped (or `custom`), named at its top level.
        if tool.get("type") not in (None, "custom"):
            return None
        name = nonempty(tool.get("name"))
        if name is None:
            raise RequestInvalid(f"{where}.name must be a non-empty string")
        return ToolId.function(name)

    def asks_structured(self, body: dict[str, Any]) -> bool:
        config = body.get("output_config")  # or the beta's `output_format`
        return json_format((config.get("format") if isinstance(config, dict) else None) or body.get("output_format"))

    def stream_error(self, message: str, kind: str, code: str | None) -> Event:
        return stream_error(message, kind, code)


def _offered(carriers: Any) -> Offered:
    """The offered tools of a gated body's `tools`, the tools its `tool_addition` blocks add
    (`offered_tools`) and its `mcp_servers`: all it reads."""
    top, added, servers = carriers
    tools: list[tuple[ToolId, dict[str, Any] | None]] = []
    for tool in [*(top or []), *added]:
        kind = tool.get("type")
        if kind == "mcp_toolset":
            continue  # below, with its server
        if kind in (None, "custom"):
            schema = tool.get("input_schema")
            tools.append((ToolId.function(tool["name"]), schema if isinstance(schema, dict) else None))
        else:
            tools.append((ToolId.builtin(kind), None))  # by its type, whatever `name` it carries
            configs = tool.get("configs") or {}
            for member in sorted(F.MESSAGES_TOOLSET_MEMBERS.get(kind, ())):  # called by their own names
                if (configs.get(member) or {}).get("enabled") is not False:
                    tools.append((ToolId.function(member), None))
    for server, names in mcp_offered({"mcp_servers": servers, "tools": top}).items():
        for name in ["*"] if names is None else names:  # `*`: the server offered whole
            tools.append((ToolId.mcp(server, name), None))
    return Offered(tools)


_OFFERED = JsonMemo(_offered)  # a conversation sends the same tools with every request


CODEC = MessagesCodec()
COUNT_TOKENS_CODEC = MessagesCodec(F.MESSAGES_COUNT_TOKENS, "/messages/count_tokens")
