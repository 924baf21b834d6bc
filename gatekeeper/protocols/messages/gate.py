"""The Anthropic Messages request side: the one effort a request runs at, and its gating."""

from __future__ import annotations

import dataclasses
from typing import Any

from gatekeeper.errors import RequestInvalid, ToolChoiceBlocked
from gatekeeper.protocols import schema as S
from gatekeeper.protocols.enforce import (
    admitted_request_listing,
)
from gatekeeper.protocols.gate import Gated, RequestGate, group_name, required_name
from gatekeeper.protocols.memo import JsonChecked
from gatekeeper.protocols.messages import fields as F
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import BUILTIN_FAMILIES, ToolId, ToolPolicy

# Thinking budget -> effort (see the module docstring).
_BUDGET_EFFORT = ((16384, "high"), (4096, "medium"), (0, "low"))
_MIN_BUDGET = 1024  # the API's smallest budget


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


# -- request gating ------------------------------------------------------------------------
#
# Every field is checked against protocols/messages/fields.py (MESSAGES_REQUEST, or MESSAGES_COUNT_TOKENS
# for count_tokens). Identities (rules.tools.ToolId): a client tool -> FUNCTION by its name; a typed
# tool -> BUILTIN by its type (its `name` must be the one the API fixes for that type); an MCP
# server's tools (`mcp_servers`, `mcp_toolset`) -> MCP `server.tool`. Content blocks that add
# tools (`tool_addition`, `compaction.tool_changes`, `mcp_tool_listing`) are gated like `tools`.


@dataclasses.dataclass
class _Gate(RequestGate):
    explicit: set[str] = dataclasses.field(default_factory=set)  # servers whose tools were listed one by one
    toolsets: set[str] = dataclasses.field(default_factory=set)  # servers an mcp_toolset configured
    # server -> the admitted tools its mcp_toolset lists or enables one by one (explicit ones)
    toolset_names: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def gate_request(body: dict[str, Any], tier: Tier, policy: ToolPolicy, table: S.Fields) -> Gated:
    g = _Gate(tier, policy, policy.unknown_fields)
    S.check(body, table, "", g.unknown)
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise RequestInvalid("system must be a string or an array of text blocks")
    for i, block in enumerate(system if isinstance(system, list) else []):  # text blocks only
        S.check_typed(block, _SYSTEM_BLOCKS, f"system[{i}]", g.unknown)
    _identify_servers(body, g)
    _gate_messages(body, g)
    servers = _gate_servers(body, g)
    tools = body.get("tools")
    kept: list[Any] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestInvalid(f"'tools' must be an array, got {type(tools).__name__}")
        key = _TOOLS_CHECKED.key(tools, g.unknown)
        checked = _TOOLS_CHECKED.passed(key, tools)
        for i, tool in enumerate(tools):
            narrowed = _gate_tool(tool, f"tools[{i}]", g, servers, checked)
            if narrowed is not None:
                kept.append(narrowed)
        if not checked:
            _TOOLS_CHECKED.remember(key, tools, g.unknown)
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
    """Which server each `mcp_servers` entry is (by its `url`, gatekeeper.rules.mcp_identity), before
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
    return g.record(ids[0], True) if hidden is None else g.record(hidden, False)  # asked once: the policy's word


# A conversation sends the same tools with every request: each tool's own fields are checked once
# per exact JSON of the list (and `unknown_fields`); everything else is gated every time.
_TOOLS_CHECKED = JsonChecked()


def _gate_tool(tool: Any, where: str, g: _Gate, servers: dict[str, dict[str, Any]], checked: bool = False) -> Any:
    """`checked`: the tool's own fields passed `check_typed` before (its list's exact JSON)."""
    kind = tool.get("type", "custom") if checked and type(tool) is dict else None
    if type(kind) is not str:  # not checked before (or not as the plain JSON it was checked as)
        kind = S.check_typed(tool, F.MESSAGES_TOOL, where, g.unknown, default="custom")
    if kind == "mcp_toolset":
        return _gate_toolset(tool, where, g, servers)
    ids = _tool_ids(tool, kind, where)
    if not _admits(g, ids):
        return None
    if kind == "custom":
        return g.narrowed(tool, "input_schema", ids[0])
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
        here = f"{where}.configs.{S.shown(str(name))}"
        if name not in members:
            raise RequestInvalid(f"{here} is not a member of {kind!r}, so it is refused (one of {sorted(members)})")
        if config is not None:  # null: the member's defaults
            if not isinstance(config, dict):
                raise RequestInvalid(f"{here} must be an object")
            S.check(config, F.MESSAGES_MEMBER_CONFIG, here, g.unknown)
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
        raise RequestInvalid(f"{where}: a second mcp_toolset for MCP server '{S.shown(server)}' (one per server)")
    g.toolsets.add(server)
    if not g.admits(g.server(server), record_kept=False):
        return None
    if server not in servers:  # no server the gate saw, nothing that narrows it: every tool of whatever it is
        raise RequestInvalid(
            f"{where}: an mcp_toolset for MCP server '{S.shown(server)}', which 'mcp_servers' does not define"
        )
    configs = tool.get("configs")
    hidden: list[str] = []  # config keys turned off here
    if configs is not None:
        if not isinstance(configs, dict):
            raise RequestInvalid(f"{where}.configs must be an object of tool name -> config")
        for name, config in configs.items():
            if not isinstance(config, dict):
                raise RequestInvalid(f"{where}.configs.{S.shown(name)} must be an object")
            S.check(config, F.MESSAGES_MCP_TOOL_CONFIG, f"{where}.configs.{S.shown(name)}", g.unknown)
            _boolean(config, f"{where}.configs.{S.shown(name)}")
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
        S.check(default, F.MESSAGES_MCP_TOOL_CONFIG, f"{where}.default_config", g.unknown)
        _boolean(default, f"{where}.default_config")
    listing = tool.get("tools")
    if listing is not None:
        if not isinstance(listing, list):
            raise RequestInvalid(f"{where}.tools must be an array")
        kept = []
        for i, entry in enumerate(listing):
            if not isinstance(entry, dict):
                raise RequestInvalid(f"{where}.tools[{i}] must be an object")
            S.check(entry, F.MESSAGES_LISTED_MCP_TOOL, f"{where}.tools[{i}]", g.unknown)
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
        S.check(server, F.MESSAGES_MCP_SERVER, where, g.unknown)
        label = group_name(server.get("name"), f"{where}.name")
        if label in named:  # a second, whole one would replace the first's narrowed tool list
            raise RequestInvalid(f"{where}: a second MCP server named '{S.shown(label)}' (one per name)")
        named.add(label)
        if not g.admits(g.server(label), record_kept=False):
            continue
        config = server.get("tool_configuration")
        if config is None:
            kept[label] = server  # whole (recorded by _narrow_whole_servers)
            continue
        if not isinstance(config, dict):
            raise RequestInvalid(f"{where}.tool_configuration must be an object")
        S.check(config, F.MESSAGES_MCP_TOOL_CONFIGURATION, f"{where}.tool_configuration", g.unknown)
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
        S.check(message, F.MESSAGES_MESSAGE[role], where, g.unknown)
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


def _without_schema(tool: Any) -> Any:
    return {k: v for k, v in tool.items() if k != "input_schema"} if isinstance(tool, dict) else tool


def _gate_block(block: Any, where: str, g: _Gate) -> Any:
    kind = S.check_typed(block, F.MESSAGES_CONTENT_BLOCK, where, g.unknown)
    if kind == "tool_addition":
        tool = block.get("tool")
        tool_kind = S.check_typed(tool, F.MESSAGES_TOOL, f"{where}.tool", g.unknown, default="custom")
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
            change_kind = S.check_typed(change, _TOOL_CHANGES, here, g.unknown)
            if change_kind == "tool_addition":
                tool = change.get("tool")
                tool_kind = S.check_typed(tool, F.MESSAGES_TOOL, f"{here}.tool", g.unknown, default="custom")
                kept = None if tool_kind == "mcp_toolset" else _gate_tool(tool, f"{here}.tool", g, {})
                if kept is None or _without_schema(kept) != _without_schema(tool):
                    # A compaction block is signed: it cannot be narrowed, only refused. (A schema
                    # narrowed for argument rules is only a hint: every call is judged anyway.)
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
    kind = S.check_typed(choice, F.MESSAGES_TOOL_CHOICE, "tool_choice", g.unknown)
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


def offered_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools a gated body offers: `tools`, and those its `tool_addition` blocks add."""
    tools = list(body.get("tools") or [])
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_addition":
                tools.append(block["tool"])
    return tools


def mcp_offered(body: dict[str, Any]) -> dict[str, list[str] | None]:
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
