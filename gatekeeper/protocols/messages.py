"""The Anthropic Messages API codec (`POST /v1/messages`, `/v1/messages/count_tokens`).

How this protocol carries tools, and what gatekeeper calls each one:
  * `tools[]`: every tool has a `name` (client tools, and typed tools such as `bash_20250124`
    named `bash`, `text_editor_...` named `str_replace_based_edit_tool`, `web_search_...` named
    `web_search`); it is gated by that name. An `mcp_toolset` tool is gated by `mcp_server_name`.
  * `mcp_servers[]` (MCP connector): gated per server `name` (or the label its `url` is bound to,
    gatekeeper.mcp_identity); the entries of `tool_configuration.allowed_tools` are gated as
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

import dataclasses
from typing import Any

import orjson

from gatekeeper.errors import AnswerIncomplete, AnswerInvalid, RequestInvalid, ToolChoiceBlocked
from gatekeeper.gating import BUILTIN_FAMILIES, Gated, RequestGate, ToolId, ToolPolicy, group_name, required_name
from gatekeeper.protocols import fields as F
from gatekeeper.protocols.base import Allowed, Call, Enforced, Event, Offered, RequestInfo
from gatekeeper.protocols.enforce import (
    ItemJudge,
    Positions,
    admitted_request_listing,
    allowed,
    enforce_items,
    settle,
)
from gatekeeper.protocols.stream import read_object
from gatekeeper.tiers import Tier

# Content block types of the Messages API (anthropic/types/beta/beta_content_block.py) that call
# nothing.
_NOT_CALLS = frozenset({"text", "thinking", "redacted_thinking", "container_upload", "compaction", "fallback"})
_CITATIONS = frozenset(
    {"char_location", "page_location", "content_block_location", "web_search_result_location", "search_result_location"}
)
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
# Stream events and content block delta types the Messages API defines
# (anthropic/types/beta/beta_raw_message_stream_event.py, beta_raw_content_block_delta.py); any
# other event, or a delta of another type, is not one this codec knows: dropped.
_EVENTS = frozenset(
    {"message_start", "message_delta", "message_stop", "content_block_start", "content_block_delta"}
    | {"content_block_stop", "ping", "error"}
)
_DELTAS = frozenset(
    {"text_delta", "input_json_delta", "citations_delta", "thinking_delta", "signature_delta", "compaction_delta"}
)
# What a message_delta / message_stop event may say (anthropic/types/beta/beta_raw_message_delta_event.py,
# beta_raw_message_stop_event.py): the content arrives in content_block events only, so anything
# else in these (a `content` list with a tool_use, a whole `message`) is removed, never relayed.
_MESSAGE_DELTA = frozenset({"type", "delta", "usage", "context_management"})
_DELTA_FIELDS = frozenset({"stop_reason", "stop_sequence", "stop_details", "container"})

# Thinking budget -> effort (see the module docstring).
_BUDGET_EFFORT = ((16384, "high"), (4096, "medium"), (0, "low"))
_MIN_BUDGET = 1024  # the API's smallest budget

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
    """The one effort a Messages request runs at (None: the `default` level). Two members set it:
    `output_config.effort`, and `thinking` (a manual budget reads as an effort, disabled thinking
    as no reasoning; adaptive thinking sets none: the effort steers it). When both speak they must
    say the same effort, else the request is refused: the tier of one with the run of the other
    is the tier of an effort the model does not run at."""
    config = body.get("output_config")
    stated: str | None = None
    if config is not None:
        if not isinstance(config, dict):
            raise RequestInvalid(f"'output_config' must be an object, got {type(config).__name__}")
        stated = config.get("effort")
        if stated is not None and (not isinstance(stated, str) or not stated):
            raise RequestInvalid("'output_config.effort' must be a non-empty string")
    implied, member = _thinking_effort(body.get("thinking"))
    if member is None or stated is None:
        return stated if member is None else implied
    if stated != implied:
        raise RequestInvalid(
            f"'output_config.effort' {stated[:32]!r} contradicts {member}: send one effort "
            "(a budget of the same effort, adaptive thinking, or no 'thinking')"
        )
    return stated


def thinking_at(body: dict[str, Any], effort: str) -> dict[str, Any] | None:
    """`body`'s manual thinking with a budget that reads as `effort` (for routing, which must move
    every member that sets the effort): unchanged when it already does, None when no budget below
    `max_tokens` does (the API wants budget_tokens < max_tokens)."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return thinking
    if _thinking_effort(thinking)[0] == effort:
        return thinking
    floors = [max(floor, _MIN_BUDGET) for floor, level in _BUDGET_EFFORT if level == effort]
    limit = body.get("max_tokens")
    if not floors or not isinstance(limit, int) or floors[0] >= limit:
        return None
    return thinking | {"budget_tokens": floors[0]}


def _thinking_effort(thinking: Any) -> tuple[str | None, str | None]:
    """The effort `thinking` implies, and how to name it in a refusal (None: it sets none)."""
    if thinking is None:
        return None, None
    if not isinstance(thinking, dict):
        raise RequestInvalid(f"'thinking' must be an object, got {type(thinking).__name__}")
    if thinking.get("type") == "disabled":
        return None, "'thinking.type' disabled (no reasoning)"
    if thinking.get("type") != "enabled":
        return None, None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise RequestInvalid("'thinking.budget_tokens' must be a non-negative integer")
    effort = next(effort for floor, effort in _BUDGET_EFFORT if budget >= floor)
    return effort, f"'thinking.budget_tokens' {budget} (effort {effort!r})"


class MessagesCodec:
    name = "messages"
    upstream_path = "/messages"
    markers: tuple[bytes, ...] = (b"tool_use",)  # `tool_use`, `server_tool_use`, `mcp_tool_use`, `..._tool_use`
    # The message, blocks that call nothing and text citations (anthropic/types/text_citation.py):
    # an answer with any other block type (an MCP listing, a type this codec does not know) is parsed.
    plain_types: frozenset[bytes] | None = frozenset(t.encode() for t in _NOT_CALLS | _CITATIONS | {"message"})

    def __init__(self, fields: F.Fields = F.MESSAGES_REQUEST) -> None:
        self.fields = fields  # the endpoint's allowlist: MESSAGES_REQUEST or MESSAGES_COUNT_TOKENS

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
        tools: list[tuple[ToolId, dict[str, Any] | None]] = []
        for tool in _offered_tools(body):
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
        for server, names in _mcp_offered(body).items():
            for name in ["*"] if names is None else names:  # `*`: the server offered whole
                tools.append((ToolId.mcp(server, name), None))
        return Offered(tools)

    def enforce(self, doc: Any, offered: Allowed | Offered) -> Enforced:
        if not isinstance(doc, dict):
            raise AnswerInvalid(f"a Messages answer must be a JSON object, got {type(doc).__name__}")
        result = Enforced()
        _enforce_message(doc, _answer_side(offered), result)
        return result

    def stream_filter(self, offered: Allowed | Offered) -> MessagesStreamFilter:
        return MessagesStreamFilter(_answer_side(offered))

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        kind = kind if kind in _ERROR_TYPES.values() or kind == "api_error" else _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def stream_error(self, message: str, kind: str, code: str | None) -> Event:
        # anthropic-python raises its APIStatusError on an `event: error` in a stream.
        body = self.error_body(500, message, kind, code)
        return Event(data=orjson.dumps(body).decode(), event="error")


# -- request gating ------------------------------------------------------------------------
#
# Every field is checked against protocols/fields.py (MESSAGES_REQUEST, or MESSAGES_COUNT_TOKENS
# for count_tokens). Identities (gating.ToolId): a client tool -> FUNCTION by its name; a typed
# tool -> BUILTIN by its type (its `name` must be the one the API fixes for that type); an MCP
# server's tools (`mcp_servers`, `mcp_toolset`) -> MCP `server.tool`. Content blocks that add
# tools (`tool_addition`, `compaction.tool_changes`, `mcp_tool_listing`) are gated like `tools`.


@dataclasses.dataclass
class _Gate(RequestGate):
    explicit: set[str] = dataclasses.field(default_factory=set)  # servers whose tools were listed one by one
    toolsets: set[str] = dataclasses.field(default_factory=set)  # servers an mcp_toolset configured
    # server -> the admitted tools its mcp_toolset lists or enables one by one (explicit ones)
    toolset_names: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def gate_request(body: dict[str, Any], tier: Tier, policy: ToolPolicy, table: F.Fields) -> Gated:
    g = _Gate(tier, policy, policy.unknown_fields)
    F.check(body, table, "", g.unknown)
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise RequestInvalid("system must be a string or an array of text blocks")
    for i, block in enumerate(system if isinstance(system, list) else []):  # text blocks only
        F.check_typed(block, _SYSTEM_BLOCKS, f"system[{i}]", g.unknown)
    _identify_servers(body, g)
    _gate_messages(body, g)
    servers = _gate_servers(body, g)
    tools = body.get("tools")
    kept: list[Any] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestInvalid(f"'tools' must be an array, got {type(tools).__name__}")
        for i, tool in enumerate(tools):
            narrowed = _gate_tool(tool, f"tools[{i}]", g, servers)
            if narrowed is not None:
                kept.append(narrowed)
    _narrow_whole_servers(body, servers, kept, g)
    any_kept = bool(kept) or bool(servers)
    _gate_choice(body.get("tool_choice"), g, any_kept)
    if kept:
        body["tools"] = kept
    else:
        body.pop("tools", None)
        if not servers:
            body.pop("tool_choice", None)  # a choice with no tool to choose from is refused by the API
    return g.gated


def _identify_servers(body: dict[str, Any], g: _Gate) -> None:
    """Which server each `mcp_servers` entry is (by its `url`, gatekeeper.mcp_identity), before
    any of its tools, toolsets or listings is gated: a server's name is not the client's to choose."""
    if not g.policy.servers.labels:
        return  # nothing bound: every server is the name it is offered as
    servers = body.get("mcp_servers")
    for i, server in enumerate(servers if isinstance(servers, list) else []):
        if isinstance(server, dict):
            where = f"mcp_servers[{i}]"
            label = group_name(server.get("name"), f"{where}.name")
            g.identify(label, [("urls", f"{where}.url", server.get("url"))], where)


def _tool_id(tool: dict[str, Any], kind: str, where: str) -> ToolId:
    if kind == "custom":
        return ToolId.function(required_name(tool.get("name"), f"{where}.name"))
    fixed = F.MESSAGES_BUILTIN_NAMES.get(kind)
    if fixed is not None and tool.get("name") != fixed:
        raise RequestInvalid(f"{where}.name must be {fixed!r} for a {kind!r} tool (the API fixes its name)")
    return ToolId.builtin(kind)


def _tool_ids(tool: dict[str, Any], kind: str, where: str) -> list[ToolId]:
    """Every identity a tool is judged by: a client tool's name; a typed tool's type (with its
    family) and the name the model calls it by, which the API fixes (a rule for
    `str_replace_based_edit_tool` hides the text editor that carries that name)."""
    fixed = F.MESSAGES_BUILTIN_NAMES.get(kind)
    identity = _tool_id(tool, kind, where)
    return [identity] if fixed is None else [identity, ToolId.function(fixed)]


def _admits(g: _Gate, ids: list[ToolId]) -> bool:
    """Whether the tier admits a tool under every identity in `ids`; recorded (kept or hidden)
    under the first identity that hides it, else under its own."""
    hidden = next((t for t in ids if not g.policy.allows(g.tier, t)), None)
    return g.admits(ids[0] if hidden is None else hidden)


def _gate_tool(tool: Any, where: str, g: _Gate, servers: dict[str, dict[str, Any]]) -> Any:
    kind = F.check_typed(tool, F.MESSAGES_TOOL, where, g.unknown, default="custom")
    if kind == "mcp_toolset":
        return _gate_toolset(tool, where, g, servers)
    if not _admits(g, _tool_ids(tool, kind, where)):
        return None
    members = F.MESSAGES_TOOLSET_MEMBERS.get(kind)
    return tool if members is None else _gate_members(tool, kind, members, where, g)


def _gate_members(tool: dict[str, Any], kind: str, members: frozenset[str], where: str, g: _Gate) -> Any:
    """A computer or browser toolset offers its members, each called by its own name: each is
    judged as `family.member` (a rule for the family, for `browser.javascript_exec` or for
    `javascript_exec` hides it), and a hidden one is turned off in `configs` (`enabled: false`),
    whatever its default. A key that names no member is refused: gatekeeper cannot tell what it
    would turn on."""
    configs = tool.get("configs")
    if configs is not None and not isinstance(configs, dict):
        raise RequestInvalid(f"{where}.configs must be an object of member name -> config")
    for name, config in (configs or {}).items():
        here = f"{where}.configs.{F.shown(str(name))}"
        if name not in members:
            raise RequestInvalid(f"{here} is not a member of {kind!r}, so it is refused (one of {sorted(members)})")
        if config is not None:  # null: the member's defaults
            if not isinstance(config, dict):
                raise RequestInvalid(f"{here} must be an object")
            F.check(config, F.MESSAGES_MEMBER_CONFIG, here, g.unknown)
            _boolean(config, here)
    family = BUILTIN_FAMILIES[kind]
    hidden = [m for m in sorted(members) if not g.policy.allows(g.tier, ToolId.namespaced(family, m))]
    for member in hidden:
        g.admits(ToolId.namespaced(family, member))  # recorded as hidden
    if len(hidden) == len(members):
        return None
    if not hidden:
        return tool
    turned_off = {m: (configs or {}).get(m) or {} for m in hidden}
    return tool | {"configs": (configs or {}) | {m: c | {"enabled": False} for m, c in turned_off.items()}}


def _gate_toolset(tool: dict[str, Any], where: str, g: _Gate, servers: dict[str, dict[str, Any]]) -> Any:
    """An `mcp_toolset`: its tools are its pinned `tools` listing when it has one, else the
    `configs` it enables when `default_config` disables the rest; else every tool of the server.
    Every `configs` key is a tool name, judged wherever it appears: a hidden one not already
    disabled is turned off (`enabled: false`), whatever the rest of the toolset says."""
    server = group_name(tool.get("mcp_server_name"), f"{where}.mcp_server_name")
    if server in g.toolsets:  # a second, whole one would re-open what the first narrowed
        raise RequestInvalid(f"{where}: a second mcp_toolset for MCP server '{F.shown(server)}' (one per server)")
    g.toolsets.add(server)
    if not g.admits(g.server(server), record_kept=False):
        return None
    if server not in servers:  # no server the gate saw, nothing that narrows it: every tool of whatever it is
        raise RequestInvalid(
            f"{where}: an mcp_toolset for MCP server '{F.shown(server)}', which 'mcp_servers' does not define"
        )
    configs = tool.get("configs")
    hidden: list[str] = []  # config keys turned off here
    if configs is not None:
        if not isinstance(configs, dict):
            raise RequestInvalid(f"{where}.configs must be an object of tool name -> config")
        for name, config in configs.items():
            if not isinstance(config, dict):
                raise RequestInvalid(f"{where}.configs.{F.shown(name)} must be an object")
            F.check(config, F.MESSAGES_MCP_TOOL_CONFIG, f"{where}.configs.{F.shown(name)}", g.unknown)
            _boolean(config, f"{where}.configs.{F.shown(name)}")
        hidden = [
            n
            for n, c in configs.items()
            if c.get("enabled") is not False
            and not g.admits(g.mcp(server, required_name(n, f"{where}.configs")), record_kept=False)
        ]
        if hidden:
            configs = configs | {n: configs[n] | {"enabled": False} for n in hidden}
            tool = tool | {"configs": configs}
    default = tool.get("default_config")
    if default is not None:
        if not isinstance(default, dict):
            raise RequestInvalid(f"{where}.default_config must be an object")
        F.check(default, F.MESSAGES_MCP_TOOL_CONFIG, f"{where}.default_config", g.unknown)
        _boolean(default, f"{where}.default_config")
    listing = tool.get("tools")
    if listing is not None:
        if not isinstance(listing, list):
            raise RequestInvalid(f"{where}.tools must be an array")
        kept = []
        for i, entry in enumerate(listing):
            if not isinstance(entry, dict):
                raise RequestInvalid(f"{where}.tools[{i}] must be an object")
            F.check(entry, F.MESSAGES_LISTED_MCP_TOOL, f"{where}.tools[{i}]", g.unknown)
            if g.admits(g.mcp(server, required_name(entry.get("name"), f"{where}.tools[{i}].name"))):
                kept.append(entry)
        g.explicit.add(server)
        g.toolset_names[server] = [e["name"] for e in kept]
        if not kept:
            return None
        return tool if len(kept) == len(listing) else tool | {"tools": kept}
    if isinstance(default, dict) and default.get("enabled") is False:
        enabled = [n for n, c in (configs or {}).items() if c.get("enabled") is True]
        kept_names = [n for n in enabled if g.admits(g.mcp(server, required_name(n, f"{where}.configs")))]
        g.explicit.add(server)
        g.toolset_names[server] = kept_names
        if not kept_names:
            return None
        if len(kept_names) == len(enabled) and not hidden:
            return tool
        return tool | {"configs": {n: c for n, c in (configs or {}).items() if n in kept_names}}
    return tool  # the whole server: judged with the server (_narrow_whole_servers)


def _boolean(config: dict[str, Any], where: str) -> None:
    """A tool config's `enabled` is true or false: the gate reads only those, and a server that
    takes "true" or 1 for true would enable what the gate took for disabled."""
    if config.get("enabled") is not None and not isinstance(config["enabled"], bool):
        raise RequestInvalid(f"{where}.enabled must be true or false, got {type(config['enabled']).__name__}")


def _gate_servers(body: dict[str, Any], g: _Gate) -> dict[str, dict[str, Any]]:
    """Gate `mcp_servers` (kept in place); returns the kept servers by name."""
    servers = body.get("mcp_servers")
    if servers is None:
        return {}
    if not isinstance(servers, list):
        raise RequestInvalid(f"'mcp_servers' must be an array, got {type(servers).__name__}")
    kept: dict[str, dict[str, Any]] = {}
    named: set[str] = set()
    for i, server in enumerate(servers):
        where = f"mcp_servers[{i}]"
        if not isinstance(server, dict):
            raise RequestInvalid(f"{where} must be an object")
        F.check(server, F.MESSAGES_MCP_SERVER, where, g.unknown)
        label = group_name(server.get("name"), f"{where}.name")
        if label in named:  # a second, whole one would replace the first's narrowed tool list
            raise RequestInvalid(f"{where}: a second MCP server named '{F.shown(label)}' (one per name)")
        named.add(label)
        if not g.admits(g.server(label), record_kept=False):
            continue
        config = server.get("tool_configuration")
        if config is None:
            kept[label] = server  # whole (recorded by _narrow_whole_servers)
            continue
        if not isinstance(config, dict):
            raise RequestInvalid(f"{where}.tool_configuration must be an object")
        F.check(config, F.MESSAGES_MCP_TOOL_CONFIGURATION, f"{where}.tool_configuration", g.unknown)
        _boolean(config, f"{where}.tool_configuration")
        allowed = config.get("allowed_tools")
        if allowed is None:
            kept[label] = server  # whole (recorded by _narrow_whole_servers)
            continue
        if not isinstance(allowed, list) or not all(isinstance(n, str) and n for n in allowed):
            raise RequestInvalid(f"{where}.tool_configuration.allowed_tools must be an array of names")
        names = [n for n in allowed if g.admits(g.mcp(label, n))]
        g.explicit.add(label)
        if names:
            kept[label] = (
                server
                if len(names) == len(allowed)
                else server | {"tool_configuration": config | {"allowed_tools": names}}
            )
    if kept:
        body["mcp_servers"] = list(kept.values())
    else:
        body.pop("mcp_servers")
    return kept


def _narrow_whole_servers(body: dict[str, Any], servers: dict[str, dict[str, Any]], tools: list[Any], g: _Gate) -> None:
    """A server offered with every tool (no allowed_tools) while a rule above the tier names some
    of its tools: narrowed to the admitted tools its mcp_toolset lists or enables, else to those
    of a listing the request carries (an `mcp_tool_listing` block), else refused. Each server
    entry is narrowed on its own, whatever its toolset says."""
    for label in list(servers):
        listed = _server_allowed(servers[label])
        if listed is not None:  # the server lists its tools: a toolset enabling all of them lists the same
            _narrow_toolsets(tools, label, listed)
            continue
        rule = g.policy.rule_hiding_part_of(g.server(label), g.tier)
        if rule is None:
            if label not in g.explicit:
                g.gated.kept.append(f"{label}.*")
            continue
        if label in g.explicit:
            # Whole here, narrowed by its toolset: which of the two the upstream obeys depends on
            # the API version, so the server entry is narrowed too (or goes, when nothing is left).
            names = g.toolset_names.get(label, [])
        else:
            listing = g.listings.get(label)
            if listing is None:
                raise RequestInvalid(
                    f"MCP server {label!r} is offered without a list of its tools, but the rule {rule!r} "
                    f"hides some of its tools at tier {g.tier.value!r}{g.any_server(label)}; name the tools the "
                    "model may use in "
                    "'mcp_servers[].tool_configuration.allowed_tools'"
                )
            names = [n for n in listing if g.admits(g.mcp(label, n))]
        if not names:
            del servers[label]
            body["mcp_servers"] = list(servers.values())
            if not servers:
                body.pop("mcp_servers")
            tools[:] = [t for t in tools if not (t.get("type") == "mcp_toolset" and t.get("mcp_server_name") == label)]
            continue
        server = servers[label]
        config = server.get("tool_configuration") or {}
        servers[label] = server | {"tool_configuration": config | {"allowed_tools": names}}
        body["mcp_servers"] = list(servers.values())
        _narrow_toolsets(tools, label, names)


def _narrow_toolsets(tools: list[Any], label: str, names: list[str]) -> None:
    """The `mcp_toolset` of `label` that enables every tool, narrowed (in `tools`) to `names`.
    A server's tools may be said in two places, its `tool_configuration` and its toolset, and
    the API version decides which one counts: both must offer only the admitted tools."""
    for i, tool in enumerate(tools):
        if tool.get("type") != "mcp_toolset" or tool.get("mcp_server_name") != label or tool.get("tools") is not None:
            continue
        default = tool.get("default_config") or {}
        if default.get("enabled") is False:
            continue  # it enables only its configs, which were gated one by one
        configs = tool.get("configs") or {}
        tools[i] = tool | {
            "default_config": default | {"enabled": False},
            "configs": {n: (configs.get(n) or {}) | {"enabled": True} for n in names},
        }


def _gate_messages(body: dict[str, Any], g: _Gate) -> None:
    """Check every message and content block; gate the blocks that add tools."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for message in messages:  # tool listings first: they can narrow a server offered whole
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "mcp_tool_listing":
                label, tools = block.get("mcp_server_name"), block.get("tools")
                if isinstance(label, str) and isinstance(tools, list):
                    names = [t.get("name") for t in tools if isinstance(t, dict)]
                    g.listings.setdefault(label, []).extend(n for n in names if isinstance(n, str) and n)
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise RequestInvalid(f"{where} must be an object, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or role not in F.MESSAGES_MESSAGE:
            raise RequestInvalid(f"{where}.role must be one of {sorted(F.MESSAGES_MESSAGE)}")
        F.check(message, F.MESSAGES_MESSAGE[role], where, g.unknown)
        content = message.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):  # a tuple of blocks (in process) is an array on the wire
            raise RequestInvalid(f"{where}.content must be a string or an array of content blocks")
        out = []
        for j, block in enumerate(content):
            kept = _gate_block(block, f"{where}.content[{j}]", g)
            if kept is not None:
                out.append(kept)
        if len(out) != len(content) or any(a is not b for a, b in zip(out, content, strict=True)):
            messages[i] = message | {"content": out}


def _gate_block(block: Any, where: str, g: _Gate) -> Any:
    kind = F.check_typed(block, F.MESSAGES_CONTENT_BLOCK, where, g.unknown)
    if kind == "tool_addition":
        tool = block.get("tool")
        tool_kind = F.check_typed(tool, F.MESSAGES_TOOL, f"{where}.tool", g.unknown, default="custom")
        if tool_kind == "mcp_toolset":
            raise RequestInvalid(f"{where}.tool: an mcp_toolset cannot be added by a content block gatekeeper gates")
        kept = _gate_tool(tool, f"{where}.tool", g, {})
        return None if kept is None else block if kept is tool else block | {"tool": kept}
    if kind == "compaction":
        changes = block.get("tool_changes")
        if changes is not None and not isinstance(changes, list):
            raise RequestInvalid(f"{where}.tool_changes must be an array")
        for k, change in enumerate(changes or []):
            here = f"{where}.tool_changes[{k}]"
            change_kind = F.check_typed(change, _TOOL_CHANGES, here, g.unknown)
            if change_kind == "tool_addition":
                tool = change.get("tool")
                tool_kind = F.check_typed(tool, F.MESSAGES_TOOL, f"{here}.tool", g.unknown, default="custom")
                if tool_kind == "mcp_toolset" or _gate_tool(tool, f"{here}.tool", g, {}) is not tool:
                    # A compaction block is signed: it cannot be narrowed, only refused.
                    raise RequestInvalid(f"{here} adds a tool hidden at tier {g.tier.value!r}")
        return block
    if kind == "mcp_tool_listing":
        label = group_name(block.get("mcp_server_name"), f"{where}.mcp_server_name")
        tools = block.get("tools")
        kept = admitted_request_listing(tools, label, F.MESSAGES_LISTED_MCP_TOOL, where, g)
        return block if len(kept) == len(tools) else block | {"tools": kept}
    return block


_TOOL_CHANGES = {k: F.MESSAGES_CONTENT_BLOCK[k] for k in ("tool_addition", "tool_removal")}
_SYSTEM_BLOCKS = {"text": F.MESSAGES_CONTENT_BLOCK["text"]}


def _gate_choice(choice: Any, g: _Gate, any_kept: bool) -> None:
    if choice is None:
        return
    kind = F.check_typed(choice, F.MESSAGES_TOOL_CHOICE, "tool_choice", g.unknown)
    tier, policy = g.tier, g.policy
    if kind == "tool":
        forced = required_name(choice.get("name"), "'tool_choice.name'")
        # The name the model calls: a client tool's own, or the fixed name of a typed tool.
        targets = [ToolId.function(forced)] + [
            ToolId.builtin(t) for t, fixed in F.MESSAGES_BUILTIN_NAMES.items() if fixed == forced
        ]
        for target in targets:
            if not policy.allows(tier, target):
                raise ToolChoiceBlocked(forced, policy.required_tier(target), tier)
    elif kind == "any" and not any_kept and g.hidden:
        names = ",".join(str(t) for t in g.hidden)
        exc = ToolChoiceBlocked(names, max((policy.required_tier(t) for t in g.hidden), key=lambda t: t.rank), tier)
        exc.args = (
            f"tool_choice 'any' demands a tool call, but every offered tool is hidden at tier {tier.value!r}: {names}",
        )
        raise exc


def _offered_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools a gated body offers: `tools`, and those its `tool_addition` blocks add."""
    tools = list(body.get("tools") or [])
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_addition":
                tools.append(block["tool"])
    return tools


def _mcp_offered(body: dict[str, Any]) -> dict[str, list[str] | None]:
    """Server name -> the tools a gated body lets the model use (None: every tool). A server's
    `allowed_tools` and its toolsets' lists (pinned `tools`, or the `configs` enabled when
    `default_config` disables the rest) each narrow it: the model sees what all of them allow."""
    found: dict[str, list[str] | None] = {}

    def narrow(server: str, names: list[str] | None) -> None:
        if server not in found or found[server] is None:
            found[server] = names
        elif names is not None:
            found[server] = [n for n in found[server] or [] if n in names]

    for server in body.get("mcp_servers") or []:
        narrow(server["name"], _server_allowed(server))
    for tool in body.get("tools") or []:
        if tool.get("type") != "mcp_toolset":
            continue
        listing, default = tool.get("tools"), tool.get("default_config")
        if listing is not None:
            narrow(tool["mcp_server_name"], [t["name"] for t in listing])
        elif isinstance(default, dict) and default.get("enabled") is False:
            configs = tool.get("configs") or {}
            narrow(tool["mcp_server_name"], [n for n, c in configs.items() if c.get("enabled") is True])
        else:
            narrow(tool["mcp_server_name"], None)
    return found


def _server_allowed(server: dict[str, Any]) -> list[str] | None:
    config = server.get("tool_configuration")
    allowed = config.get("allowed_tools") if isinstance(config, dict) else None
    return allowed if isinstance(allowed, list) else None


# -- answer enforcement --------------------------------------------------------------------


class _Judge(ItemJudge):
    """What each content block of an answer calls (see enforce.ItemJudge)."""

    noun = "a content block"
    not_calls = _NOT_CALLS
    answers = dict.fromkeys(_RESULTS, "tool_use_id")
    listing, listing_server = "mcp_tool_listing", "mcp_server_name"
    __slots__ = ()

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


def _answer_side(offered: Allowed | Offered) -> Allowed:
    """A structured answer (`output_config.format`) gets no explanation: every text block is what
    the SDK's `parse` validates as the format, and Messages has no other place for text."""
    allow = allowed(offered)
    return dataclasses.replace(allow, explain=False) if allow.structured and allow.explain else allow


def _stand_in(block: dict[str, Any], position: int, text: str) -> dict[str, Any]:
    """The text block that replaces a removed call under `blocked_calls: explain`."""
    return {"type": "text", "text": text}


def _enforce_message(message: dict[str, Any], allow: Allowed, result: Enforced) -> None:
    content = message.get("content")
    if content is None:
        return
    kept = enforce_items(content, "content", _Judge(allow), result, _stand_in, allow)
    for block in content if kept is None and isinstance(content, list) else kept or ():
        _known_citations(block)
    if kept is None:
        return
    message["content"] = kept
    if message.get("stop_reason") == "tool_use" and not any(b.get("type") == "tool_use" for b in kept):
        message["stop_reason"] = "end_turn"


def _known_citations(block: Any) -> None:
    """Remove a text block's citations of types the API does not define (a client reads each by
    its type: a call-shaped object there is not one the codec judged)."""
    citations = block.get("citations") if isinstance(block, dict) else None
    if isinstance(citations, list):
        block["citations"] = [c for c in citations if isinstance(c, dict) and c.get("type") in _CITATIONS]


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
        if kind not in _EVENTS:
            if "index" in doc or "content_block" in doc:
                raise AnswerInvalid(f"an event of unknown type {kind!r} carries a content block")
            return []  # a type this codec does not know: it may carry a call, so it goes
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
            docs = [{k: v for k, v in doc.items() if k in _MESSAGE_DELTA}]
            docs[0]["delta"] = {k: v for k, v in delta.items() if k in _DELTA_FIELDS}
        elif kind == "message_stop":
            docs = [{"type": "message_stop"}]
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
        if kind == "content_block_delta" and not (isinstance(delta, dict) and delta.get("type") in _DELTAS):
            return []  # a delta of a type this codec does not know: dropped
        if isinstance(delta, dict) and delta.get("type") == "citations_delta":
            citation = delta.get("citation")
            if not (isinstance(citation, dict) and citation.get("type") in _CITATIONS):
                return []  # a citation of a type the API does not define: removed
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
        _known_citations(block)
        self._open.add(index)
        verdict = self._judge(block)
        if verdict is not True and verdict is not False:
            self._arguments[index] = (len(self.result.calls), [])  # its streamed input, for the record
        fate = settle(verdict, self.result, self.allow)
        position = self._positions.place(index, fate is not False)
        if fate is True:
            self._tool_uses_kept += block.get("type") == "tool_use"
            doc["index"] = position
            return [doc]
        self._removed.add(index)
        if fate is False or position is None:
            return []
        return [
            {"type": "content_block_start", "index": position, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": position, "delta": {"type": "text_delta", "text": fate}},
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
COUNT_TOKENS_CODEC = MessagesCodec(F.MESSAGES_COUNT_TOKENS)  # /v1/messages/count_tokens
