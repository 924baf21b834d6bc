"""The OpenAI Responses request side: the one effort a request runs at, and its gating."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.errors import RequestInvalid, ToolChoiceBlocked
from gatekeeper.observe import logs
from gatekeeper.observe.redact import clip
from gatekeeper.protocols import schema as S
from gatekeeper.protocols.enforce import (
    admitted_request_listing,
)
from gatekeeper.protocols.gate import Gated, RequestGate, group_name, require_boolean, required_name
from gatekeeper.protocols.memo import JsonChecked
from gatekeeper.protocols.responses import fields as F
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy

_log = logs.get_logger(__name__)


# -- request gating ------------------------------------------------------------------------
#
# Every field is checked against protocols/responses/fields.py. Identities (rules.tools.ToolId): `function` ->
# FUNCTION, `custom` -> CUSTOM, a `namespace`'s tools -> NAMESPACED `namespace.name`, an `mcp`
# server's tools -> MCP `server_label.tool`, any other type -> BUILTIN by its type (built-ins
# carry no name; one would be an unknown field). Tools offered by `input` items
# (`additional_tools`, `tool_search_output`, `mcp_list_tools`) are gated like `tools`.

_KEEP, _DROP = object(), object()
# What `tool_choice.allowed_tools.tools` may list: a designation as tool_choice spells one.
_ALLOWED_ENTRY = {kind: table for kind, table in F.RESPONSES_TOOL_CHOICE.items() if kind != "allowed_tools"}


def effort_of(body: dict[str, Any]) -> str | None:
    """The one effort a Responses request runs at (None: the `default` level): that of the last
    `configuration_update` input item setting one, else `reasoning.effort`. An update sets "the
    reasoning effort to use for subsequent responses until another configuration update replaces
    it" (openai-python `types/responses/response_configuration_update_item_param_param.py`): the
    request-level effort is the baseline before the first update, so the last update is what this
    response runs at.
    An update is refused in a request the upstream keeps (`store` not false, or a `conversation`):
    a later request chained to it would run at the stored update's effort, which gatekeeper cannot
    see there."""
    effort = _effort(body.get("reasoning"), "reasoning")
    items = body.get("input")
    for i, item in enumerate(items if isinstance(items, list) else ()):
        if isinstance(item, dict) and item.get("type") == "configuration_update" and "reasoning" in item:
            if body.get("store") is not False or body.get("conversation") is not None:
                raise RequestInvalid(
                    f"'input[{i}]' (a configuration_update setting the effort) needs 'store': false and no "
                    "'conversation': a stored update would set the effort of later requests unseen"
                )
            effort = _effort(item["reasoning"], f"input[{i}].reasoning", required=True)
    return effort


def one_effort(body: dict[str, Any]) -> None:
    """Make `reasoning.effort` say the effort `effort_of` reads, in place, so that an upstream that
    honours update items and one that ignores them (or a translation) run at the same effort, the
    one the tier was decided for. Refusing the disagreement instead would refuse the documented way
    to change effort mid-conversation (a stable request-level baseline keeps the prompt cache)."""
    effort = effort_of(body)
    reasoning = body.get("reasoning")
    stated = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort is None or effort == stated:
        return
    _log.info("effort_set_from_configuration_update", stated=None if stated is None else clip(stated), effort=effort)
    body["reasoning"] = (reasoning or {}) | {"effort": effort}  # a copy: a routed body shares the original


def _effort(reasoning: Any, where: str, required: bool = False) -> str | None:
    if reasoning is None and not required:
        return None
    if not isinstance(reasoning, dict):
        raise RequestInvalid(f"'{where}' must be an object, got {type(reasoning).__name__}")
    effort = reasoning.get("effort")
    if effort is None and not required:
        return None
    if not isinstance(effort, str) or not effort or "@" in effort:
        # An update without an effort could mean "back to the baseline" or "unchanged": unread.
        raise RequestInvalid(f"'{where}.effort' must be a non-empty string without '@'")
    return effort


def gate_request(body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
    """Check every field and remove (in place) every tool above `tier` (see `RequestGate`)."""
    g = RequestGate(tier, policy, policy.unknown_fields)
    S.check(body, F.RESPONSES_REQUEST, "", g.unknown)
    require_boolean(body, "parallel_tool_calls")
    _identify_servers(body, g)
    _gate_input(body, g)
    tools = body.get("tools")
    kept: list[Any] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestInvalid(f"'tools' must be an array, got {type(tools).__name__}")
        key = _TOOLS_CHECKED.key(tools, g.unknown)
        checked = _TOOLS_CHECKED.passed(key, tools)
        kept = _gate_tools(tools, "tools", g, checked)
        if not checked:
            _TOOLS_CHECKED.remember(key, tools, g.unknown)
    new_choice = _gate_choice(body.get("tool_choice"), g, bool(kept))
    if kept:
        body["tools"] = kept
    else:
        body.pop("tools", None)
        body.pop("parallel_tool_calls", None)  # OpenAI answers 400 to it without tools
    if new_choice is _DROP:
        body.pop("tool_choice", None)
    elif new_choice is not _KEEP:
        body["tool_choice"] = new_choice
    return g.gated


# A conversation sends the same tools with every request: each tool's own fields are checked once
# per exact JSON of the list (and `unknown_fields`); everything else is gated every time.
_TOOLS_CHECKED = JsonChecked()


def _gate_tools(tools: list[Any], where: str, g: RequestGate, checked: bool = False) -> list[Any]:
    """`checked`: every tool's own fields passed `check_typed` before (this list's exact JSON)."""
    kept = []
    for i, tool in enumerate(tools):
        narrowed = _gate_tool(tool, f"{where}[{i}]", g, checked)
        if narrowed is not None:
            kept.append(narrowed)
    return kept


def _gate_tool(tool: Any, where: str, g: RequestGate, checked: bool = False) -> Any:
    """The tool as the model may see it (narrowed), or None when it is hidden."""
    kind = tool.get("type") if checked and type(tool) is dict else None
    if type(kind) is not str:  # not checked before (or not as the plain JSON it was checked as)
        kind = S.check_typed(tool, F.RESPONSES_TOOL, where, g.unknown)
    if kind == "mcp":
        return _gate_mcp(tool, where, g)
    if kind == "namespace":
        namespace = group_name(tool.get("name"), f"{where}.name")
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise RequestInvalid(f"{where}.tools must be an array")
        kept = []
        for i, item in enumerate(inner):
            S.check_typed(item, F.RESPONSES_NAMESPACE_TOOL, f"{where}.tools[{i}]", g.unknown)
            member = ToolId.namespaced(namespace, required_name(item.get("name"), f"{where}.tools[{i}].name"))
            if g.admits(member):
                kept.append(g.narrowed(item, "parameters", member))
        if not kept:
            return None
        return tool if kept == inner else tool | {"tools": kept}
    if kind == "function":
        tool_id = ToolId.function(required_name(tool.get("name"), f"{where}.name"))
    elif kind == "custom":
        tool_id = ToolId.custom(required_name(tool.get("name"), f"{where}.name"))
    else:
        tool_id = ToolId.builtin(kind)
    if not g.admits(tool_id):
        return None
    return g.narrowed(tool, "parameters", tool_id) if kind == "function" else tool


# What identifies an `mcp` tool's server (gatekeeper.rules.mcp_identity): field -> tools.mcp_servers list.
_SERVER_IDENTITY = (("server_url", "urls"), ("connector_id", "connectors"), ("tunnel_id", "tunnels"))


def _identify_servers(body: dict[str, Any], g: RequestGate) -> None:
    """Which server each `mcp` tool is (in `tools` and in tool-carrying input items), before any
    of its tools, listings or choices is gated: a label is not the client's to choose."""
    if not g.policy.servers.labels:
        return  # nothing bound: every server is the label it is offered as
    places: list[tuple[str, Any]] = [("tools", body.get("tools"))]
    items = body.get("input")
    for i, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("type") in ("additional_tools", "tool_search_output"):
            places.append((f"input[{i}].tools", item.get("tools")))
    for where, tools in places:
        for i, tool in enumerate(tools if isinstance(tools, list) else []):
            if isinstance(tool, dict) and tool.get("type") == "mcp":
                at = f"{where}[{i}]"
                label = group_name(tool.get("server_label"), f"{at}.server_label")
                g.identify(label, [(kind, f"{at}.{f}", tool.get(f)) for f, kind in _SERVER_IDENTITY], at)


def mcp_allowed_names(tool: dict[str, Any]) -> list[str] | None:
    allowed = tool.get("allowed_tools")
    if isinstance(allowed, dict):
        allowed = allowed.get("tool_names")
    return allowed if isinstance(allowed, list) else None


def _gate_mcp(tool: dict[str, Any], where: str, g: RequestGate) -> Any:
    """An MCP server: hidden by its label's rule; its tools gated one by one as `label.tool`.
    Offered without a list of its tools, it stays whole only when no rule above the tier names
    one of them; otherwise it is narrowed to the listed tools the tier admits (when an
    `mcp_list_tools` input item lists them), or refused."""
    label = group_name(tool.get("server_label"), f"{where}.server_label")
    server = g.server(label)  # the label its rules are looked up by (gatekeeper.rules.mcp_identity)
    if not g.admits(server, record_kept=False):
        return None
    allowed = tool.get("allowed_tools")
    names: list[Any] | None
    if allowed is None or isinstance(allowed, list):
        names = allowed
    elif isinstance(allowed, dict):
        S.check(allowed, F.RESPONSES_MCP_FILTER, f"{where}.allowed_tools", g.unknown)
        names = allowed.get("tool_names")
        if names is not None and not isinstance(names, list):
            raise RequestInvalid(f"{where}.allowed_tools.tool_names must be an array of names")
        if allowed.get("read_only") is not None and not isinstance(allowed["read_only"], bool):
            raise RequestInvalid(f"{where}.allowed_tools.read_only must be a boolean")
    else:
        raise RequestInvalid(f"{where}.allowed_tools must be an array of names or {{'tool_names': [...]}}")
    narrowing = names is None
    if names is None:
        rule = g.policy.rule_hiding_part_of(server, g.tier)
        if rule is None:
            g.gated.kept.append(f"{label}.*")
            return tool  # every tool of the server is admitted whenever the server is
        names = g.listings.get(label)
        if names is None:
            raise RequestInvalid(
                f"{where}: MCP server {label!r} is offered without a list of its tools, but the rule "
                f"{rule!r} hides some of its tools at tier {g.tier.value!r}{g.any_server(label)}; name the "
                "tools the model may use in 'allowed_tools'"
            )
    kept = [n for i, n in enumerate(names) if g.admits(g.mcp(label, required_name(n, f"{where}.allowed_tools[{i}]")))]
    if not kept:
        return None  # an empty allowed_tools list would mean "every tool" to some servers
    if isinstance(allowed, dict) and allowed.get("read_only") is not None:
        _refuse_read_only(where, label, g.policy.rule_hiding_part_of(server, g.tier), g)
    if len(kept) == len(names) and not narrowing:
        return tool
    return tool | {"allowed_tools": allowed | {"tool_names": kept} if isinstance(allowed, dict) else kept}


def _refuse_read_only(where: str, label: str, rule: str | None, g: RequestGate) -> None:
    """`read_only` beside a tool list: the API does not say whether the two filters meet or add
    up, and read as "add up" the server would offer every read-only tool, hidden ones too. While a
    rule hides some of the server's tools it is refused (never dropped: it is the client's own
    restriction, and without it the list alone offers more than the client asked for)."""
    if rule is not None:
        raise RequestInvalid(
            f"{where}.allowed_tools.read_only: MCP server {label!r} has tools hidden at tier "
            f"{g.tier.value!r} (rule {rule!r}), and whether read_only narrows the tool list or adds "
            "to it is not defined; name the tools in 'allowed_tools' without read_only"
        )


def _gate_input(body: dict[str, Any], g: RequestGate) -> None:
    """Check every input item; gate the tools that items offer (`additional_tools`,
    `tool_search_output`, `mcp_list_tools`)."""
    items = body.get("input")
    if not isinstance(items, list):
        return
    for item in items:  # an MCP server's listed tools, to narrow a server offered without a list
        if isinstance(item, dict) and item.get("type") == "mcp_list_tools" and isinstance(item.get("tools"), list):
            label = item.get("server_label")
            listed = [t.get("name") for t in item["tools"] if isinstance(t, dict)]
            if isinstance(label, str):
                g.listings.setdefault(label, []).extend(n for n in listed if isinstance(n, str) and n)
    out: list[Any] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = S.check_typed(item, F.RESPONSES_INPUT_ITEM, where, g.unknown, default="message")
        if kind in ("additional_tools", "tool_search_output"):
            tools = item.get("tools")
            if not isinstance(tools, list):
                raise RequestInvalid(f"{where}.tools must be an array")
            kept = _gate_tools(tools, f"{where}.tools", g)
            if not kept and kind == "additional_tools":
                continue  # it offered only hidden tools: it offers nothing
            if len(kept) != len(tools) or any(a is not b for a, b in zip(kept, tools, strict=True)):
                item = item | {"tools": kept}  # a tool_search_output stays: it answers its call
        elif kind == "mcp_list_tools":
            label = group_name(item.get("server_label"), f"{where}.server_label")
            tools = item.get("tools")
            kept = admitted_request_listing(tools, label, F.RESPONSES_LISTED_MCP_TOOL, where, g)
            if len(kept) != len(tools):
                item = item | {"tools": kept}
        out.append(item)
    _gate_approvals(items, g)
    if len(out) != len(items) or any(a is not b for a, b in zip(out, items, strict=True)):
        body["input"] = out


def _gate_approvals(items: list[Any], g: RequestGate) -> None:
    """An `mcp_approval_response` that approves a request the same input carries is the client
    saying "run this call": refused when the call's tool is hidden at the tier (the server runs an
    approved call itself). One approving a request held in server state cannot be judged here."""
    # Every request of an id: two of one id (a hidden call and an admitted one) leave it to the
    # server which one the approval names, so each is judged.
    asked: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if isinstance(item, dict) and item.get("type") == "mcp_approval_request" and isinstance(item.get("id"), str):
            asked.setdefault(item["id"], []).append(item)
    for i, item in enumerate(items):
        if not (isinstance(item, dict) and item.get("type") == "mcp_approval_response" and item.get("approve")):
            continue
        approved = item.get("approval_request_id")
        for request in asked.get(approved, []) if isinstance(approved, str) else []:
            label, name = request.get("server_label"), request.get("name")
            if not isinstance(label, str) or not isinstance(name, str):
                raise RequestInvalid(f"the mcp_approval_request input[{i}] approves has no string server_label / name")
            tool = g.mcp(label, name)
            if not g.policy.allows(g.tier, tool):
                raise RequestInvalid(
                    f"input[{i}] approves a call to {S.shown(str(tool))!r}, which needs tier "
                    f"{g.policy.required_tier(tool).value!r}; this model's tier is {g.tier.value!r}"
                )


def _blocked(tool: ToolId | str, tier: Tier, policy: ToolPolicy) -> ToolChoiceBlocked:
    return ToolChoiceBlocked(str(tool), policy.required_tier(tool), tier)


def _all_hidden(g: RequestGate, what: str) -> ToolChoiceBlocked:
    names = ",".join(str(t) for t in g.hidden) or "(no tools offered)"
    required = max((g.policy.required_tier(t) for t in g.hidden), key=lambda t: t.rank, default=g.tier)
    exc = ToolChoiceBlocked(names, required, g.tier)
    exc.args = (
        f"tool_choice {what} demands a tool call, but every offered tool is hidden at tier {g.tier.value!r}: {names}",
    )
    return exc


def _choice_target(choice: Any, where: str, tables: Mapping[str, S.Fields], g: RequestGate) -> ToolId | str:
    """What a tool_choice (or an allowed_tools entry) designates: a tool, or (a bare `mcp`
    choice) a whole server by its label."""
    kind = S.check_typed(choice, tables, where, g.unknown)
    if kind == "mcp":
        label = group_name(choice.get("server_label"), f"{where}.server_label")
        name = choice.get("name")
        return g.mcp(label, required_name(name, f"{where}.name")) if name is not None else g.server(label)
    if kind in ("function", "custom"):
        name = required_name(choice.get("name"), f"{where}.name")
        namespace = choice.get("namespace")
        if namespace is not None:
            return ToolId.namespaced(group_name(namespace, f"{where}.namespace"), name)
        return ToolId.function(name) if kind == "function" else ToolId.custom(name)
    return ToolId.builtin(kind)


def _gate_choice(choice: Any, g: RequestGate, any_kept: bool) -> Any:
    """The tool_choice to send (_KEEP unchanged, _DROP removed, or a new value)."""
    tier, policy = g.tier, g.policy
    if choice is None:
        return _KEEP
    if isinstance(choice, str):
        if choice == "required" and not any_kept and g.hidden:
            raise _all_hidden(g, "'required'")
        if choice not in ("auto", "none", "required"):
            raise RequestInvalid(f"'tool_choice' must be 'auto', 'none', 'required' or an object, got {choice!r}")
        return _KEEP if any_kept else _DROP
    if not isinstance(choice, dict):
        raise RequestInvalid(f"'tool_choice' must be a string or an object, got {type(choice).__name__}")
    if choice.get("type") == "allowed_tools":
        S.check(choice, F.RESPONSES_TOOL_CHOICE["allowed_tools"], "tool_choice", g.unknown)
        entries = choice.get("tools")
        if not isinstance(entries, list):
            raise RequestInvalid("'tool_choice.tools' must be an array")
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise RequestInvalid(f"'tool_choice.mode' must be 'auto' or 'required', got {mode!r}")
        kept, hidden = [], []
        for i, entry in enumerate(entries):
            target = _choice_target(entry, f"tool_choice.tools[{i}]", _ALLOWED_ENTRY, g)
            if policy.allows(tier, target):
                kept.append(entry)
            else:
                hidden.append(target)
        if kept and any_kept:
            return _KEEP if not hidden else choice | {"tools": kept}
        if mode == "required":
            names = ",".join(str(t) for t in hidden) or "(none)"
            exc = ToolChoiceBlocked(
                names, max((policy.required_tier(t) for t in hidden), key=lambda t: t.rank, default=tier), tier
            )
            exc.args = (
                f"tool_choice allowed_tools (mode 'required') lists only tools hidden at tier {tier.value!r}: {names}",
            )
            raise exc
        # mode auto, nothing left to allow: the model may call none of them (not "any other tool").
        return "none" if any_kept else _DROP
    target = _choice_target(choice, "tool_choice", F.RESPONSES_TOOL_CHOICE, g)
    if not policy.allows(tier, target):
        raise _blocked(target, tier, policy)
    return _KEEP if any_kept else _DROP
