"""The OpenAI Responses API codec (`POST /v1/responses`).

How this protocol carries tools, and what gatekeeper calls each one (the name `tools.required_tier`
rules match):
  * `function` / `custom` tools: their `name`; inside a `namespace` tool: `namespace.name`;
  * `mcp` tools: the server's `server_label` gates the whole server; each entry of its
    `allowed_tools` is gated as `server_label.tool` (a server without `allowed_tools` is gated
    as a whole: name its tools there to gate them one by one). The label is the one its
    `server_url` / `connector_id` / `tunnel_id` is bound to when it is (gatekeeper.mcp_identity);
  * every other (built-in) tool: its `name` when it has one, else its `type` (`web_search`,
    `file_search`, `code_interpreter`, `computer_use_preview`, `image_generation`, `local_shell`...).

Answers carry calls as `output` items (`function_call`, `custom_tool_call`, `mcp_call`,
`web_search_call`, ...). An item that calls a tool the gated request did not offer is removed;
so is an item of a type this codec does not know (it cannot tell whether it is a call). Streams
are read event by event (each event names its `output_index`); the events of a removed item are
dropped and later indexes renumbered, so the client's accumulation stays consistent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gatekeeper import logs
from gatekeeper.errors import AnswerIncomplete, AnswerInvalid, RequestInvalid, ToolChoiceBlocked
from gatekeeper.gating import Gated, RequestGate, ToolId, ToolPolicy, group_name, require_boolean, required_name
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
from gatekeeper.redact import clip
from gatekeeper.tiers import Tier

_log = logs.get_logger("gatekeeper")

# Output item types of the Responses API (openai/types/responses/response_output_item.py) that
# call nothing: a message, reasoning, the tools a tool search loaded (gated when sent back).
_NOT_CALLS = frozenset({"message", "reasoning", "compaction", "additional_tools", "tool_search_output"})
# The outputs of calls, by the field naming their call: removed with the call they answer.
_OUTPUTS = {
    "function_call_output": "call_id",
    "computer_call_output": "call_id",
    "local_shell_call_output": "call_id",
    "shell_call_output": "call_id",
    "apply_patch_call_output": "call_id",
    "custom_tool_call_output": "call_id",
    "program_output": "call_id",
    "mcp_approval_response": "approval_request_id",
}
# Built-in call item type -> the exact tool types whose offer lets it through (the first one
# stands for the family in an explanation). Never a prefix: a function named `computer_notes` is
# not the `computer` built-in. Every type here is in gating.BUILTIN_FAMILIES (a test checks).
_BUILTIN_CALLS: dict[str, tuple[str, ...]] = {
    "web_search_call": ("web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"),
    "file_search_call": ("file_search",),
    "code_interpreter_call": ("code_interpreter",),
    "computer_call": ("computer_use_preview", "computer"),
    "image_generation_call": ("image_generation",),
    "local_shell_call": ("local_shell",),
    "shell_call": ("shell",),
    "apply_patch_call": ("apply_patch",),
    "tool_search_call": ("tool_search",),
    "program": ("programmatic_tool_calling",),
}
_MCP_CALLS = frozenset({"mcp_call", "mcp_approval_request"})
# Events that end a Responses stream: nothing after one reaches the client.
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})
# Events about the whole response: their `response.output` is enforced like a plain answer.
_RESPONSE_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"} | _TERMINAL - {"error"})
# Events about one output item: each names its `output_index`
# (openai/types/responses/response_stream_event.py; a test compares with the installed SDK).
_ITEM_EVENTS = frozenset(
    {
        "response.code_interpreter_call.completed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.compaction.compacting",
        "response.content_part.added",
        "response.content_part.done",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.file_search_call.completed",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.image_generation_call.completed",
        "response.image_generation_call.generating",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.partial_image",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.mcp_list_tools.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.output_text.annotation.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.refusal.delta",
        "response.refusal.done",
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
        "response.web_search_call.completed",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
    }
)
# Events about neither: audio output. Any other event type is not one this codec knows: dropped.
_AUDIO_EVENTS = frozenset(
    {"response.audio.delta", "response.audio.done", "response.audio.transcript.delta", "response.audio.transcript.done"}
)
_KNOWN_EVENTS = _TERMINAL | _RESPONSE_EVENTS | _ITEM_EVENTS | _AUDIO_EVENTS


class ResponsesCodec:
    name = "responses"
    upstream_path = "/responses"
    # Every call item type spells one of these (`function_call`, `web_search_call`, `mcp_call`,
    # `mcp_list_tools`, `program`, ...): an answer with none of them is relayed unparsed.
    markers: tuple[bytes, ...] = (b"_call", b"mcp", b"program", b"tool")
    # Items that call nothing, their content parts, annotations and text formats
    # (openai/types/responses/response_output_message.py, ...): any other type is parsed.
    plain_types: frozenset[bytes] | None = frozenset(
        t.encode()
        for t in _NOT_CALLS
        | {"output_text", "refusal", "summary_text", "reasoning_text", "text", "json_schema", "json_object"}
        | {"url_citation", "file_citation", "container_file_citation", "file_path"}
    )

    # -- requests ---------------------------------------------------------------------------

    def parse(self, body: dict[str, Any]) -> RequestInfo:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestInvalid("'model' is required and must be a non-empty string")
        if "input" in body and not isinstance(body["input"], (str, list)):
            raise RequestInvalid("'input' must be a string or an array")
        stream = body.get("stream", False)
        if not isinstance(stream, bool) and stream is not None:
            raise RequestInvalid("'stream' must be a boolean")
        return RequestInfo(model=model, effort=effort_of(body), stream=bool(stream))

    def gate(self, body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
        one_effort(body)
        return gate_request(body, tier, policy)

    def offered(self, body: dict[str, Any]) -> Offered:
        tools: list[tuple[ToolId, dict[str, Any] | None]] = []
        for tool in _offered_tools(body):
            kind = tool["type"]  # a gated body: every tool has a string type
            if kind in ("function", "custom"):
                make = ToolId.function if kind == "function" else ToolId.custom
                tools.append((make(tool["name"]), _schema(tool) if kind == "function" else None))
            elif kind == "namespace":
                for inner in tool.get("tools") or []:
                    tools.append((ToolId.namespaced(tool["name"], inner["name"]), _schema(inner)))
            elif kind == "mcp":
                names = _mcp_allowed_names(tool)
                for name in ["*"] if names is None else names:  # `*`: the server offered whole
                    tools.append((ToolId.mcp(tool["server_label"], name), None))
            else:
                tools.append((ToolId.builtin(kind), None))  # by its type, whatever `name` it carries
        return Offered(tools)

    # -- answers ----------------------------------------------------------------------------

    def enforce(self, doc: Any, offered: Allowed | Offered) -> Enforced:
        if not isinstance(doc, dict):
            raise AnswerInvalid(f"a Responses answer must be a JSON object, got {type(doc).__name__}")
        result = Enforced()
        _enforce_response(doc, allowed(offered), result)
        return result

    def stream_filter(self, offered: Allowed | Offered) -> ResponsesStreamFilter:
        return ResponsesStreamFilter(offered)

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def stream_error(self, message: str, kind: str, code: str | None, sequence_number: int = 0) -> Event:
        # The Responses `error` event (openai/types/responses/response_error_event.py), plus an
        # `error` object: openai-python raises APIError on a streamed event whose data has one.
        doc = {
            "type": "error",
            "code": code,
            "message": message,
            "param": None,
            "sequence_number": sequence_number,
            "error": {"type": kind, "code": code, "message": message},
        }
        return Event(data=orjson.dumps(doc).decode(), event="error")


def _schema(tool: dict[str, Any]) -> dict[str, Any] | None:
    schema = tool.get("parameters")
    return schema if isinstance(schema, dict) else None


def _offered_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools a gated body offers: `tools`, and those of `additional_tools` and
    `tool_search_output` input items (a tool search loads its results into the request)."""
    tools = list(body.get("tools") or [])
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type") in ("additional_tools", "tool_search_output"):
            tools += item.get("tools") or []
    return tools


# -- request gating ------------------------------------------------------------------------
#
# Every field is checked against protocols/fields.py. Identities (gating.ToolId): `function` ->
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
    F.check(body, F.RESPONSES_REQUEST, "", g.unknown)
    require_boolean(body, "parallel_tool_calls")
    _identify_servers(body, g)
    _gate_input(body, g)
    tools = body.get("tools")
    kept: list[Any] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestInvalid(f"'tools' must be an array, got {type(tools).__name__}")
        kept = _gate_tools(tools, "tools", g)
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


def _gate_tools(tools: list[Any], where: str, g: RequestGate) -> list[Any]:
    kept = []
    for i, tool in enumerate(tools):
        narrowed = _gate_tool(tool, f"{where}[{i}]", g)
        if narrowed is not None:
            kept.append(narrowed)
    return kept


def _gate_tool(tool: Any, where: str, g: RequestGate) -> Any:
    """The tool as the model may see it (narrowed), or None when it is hidden."""
    kind = F.check_typed(tool, F.RESPONSES_TOOL, where, g.unknown)
    if kind == "mcp":
        return _gate_mcp(tool, where, g)
    if kind == "namespace":
        namespace = group_name(tool.get("name"), f"{where}.name")
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise RequestInvalid(f"{where}.tools must be an array")
        kept = []
        for i, item in enumerate(inner):
            F.check_typed(item, F.RESPONSES_NAMESPACE_TOOL, f"{where}.tools[{i}]", g.unknown)
            if g.admits(ToolId.namespaced(namespace, required_name(item.get("name"), f"{where}.tools[{i}].name"))):
                kept.append(item)
        if not kept:
            return None
        return tool if len(kept) == len(inner) else tool | {"tools": kept}
    if kind == "function":
        tool_id = ToolId.function(required_name(tool.get("name"), f"{where}.name"))
    elif kind == "custom":
        tool_id = ToolId.custom(required_name(tool.get("name"), f"{where}.name"))
    else:
        tool_id = ToolId.builtin(kind)
    return tool if g.admits(tool_id) else None


# What identifies an `mcp` tool's server (gatekeeper.mcp_identity): field -> tools.mcp_servers list.
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


def _mcp_allowed_names(tool: dict[str, Any]) -> list[str] | None:
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
    server = g.server(label)  # the label its rules are looked up by (gatekeeper.mcp_identity)
    if not g.admits(server, record_kept=False):
        return None
    allowed = tool.get("allowed_tools")
    names: list[Any] | None
    if allowed is None or isinstance(allowed, list):
        names = allowed
    elif isinstance(allowed, dict):
        F.check(allowed, F.RESPONSES_MCP_FILTER, f"{where}.allowed_tools", g.unknown)
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
        kind = F.check_typed(item, F.RESPONSES_INPUT_ITEM, where, g.unknown, default="message")
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
                    f"input[{i}] approves a call to {F.shown(str(tool))!r}, which needs tier "
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


def _choice_target(choice: Any, where: str, tables: Mapping[str, F.Fields], g: RequestGate) -> ToolId | str:
    """What a tool_choice (or an allowed_tools entry) designates: a tool, or (a bare `mcp`
    choice) a whole server by its label."""
    kind = F.check_typed(choice, tables, where, g.unknown)
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
        F.check(choice, F.RESPONSES_TOOL_CHOICE["allowed_tools"], "tool_choice", g.unknown)
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


# -- answer enforcement --------------------------------------------------------------------


class _Judge(ItemJudge):
    """What each output item of an answer calls (see enforce.ItemJudge)."""

    noun = "an output item"
    not_calls = _NOT_CALLS
    answers = _OUTPUTS
    listing, listing_server = "mcp_list_tools", "server_label"
    call_ids = ("id", "call_id")
    __slots__ = ()

    def _call(self, kind: str, item: dict[str, Any]) -> tuple[Call, ToolId | None]:
        arguments = _arguments(item)
        if kind in ("function_call", "custom_tool_call"):
            name = item.get("name")
            if not isinstance(name, str):
                raise AnswerInvalid(f"a {kind} item has no string 'name'")
            namespace = item.get("namespace")
            if namespace is not None and not isinstance(namespace, str):
                raise AnswerInvalid(f"a {kind} item's 'namespace' is not a string")
            if namespace is not None:
                tool = ToolId.namespaced(namespace, name)
            else:
                tool = ToolId.function(name) if kind == "function_call" else ToolId.custom(name)
            if kind == "custom_tool_call":
                arguments = None  # free-form input, not JSON: nothing for the drift tracker to validate
            return Call(str(tool), arguments, self.allow.admits(tool)), tool
        if kind in _MCP_CALLS:
            label, name = item.get("server_label"), item.get("name")
            if not isinstance(label, str) or not isinstance(name, str):
                raise AnswerInvalid(f"an {kind} item has no string 'server_label' / 'name'")
            tool = ToolId.mcp(label, name)
            return Call(str(tool), arguments, self.allow.admits(tool)), tool
        types = _BUILTIN_CALLS.get(kind)
        if types is None:  # a type this codec does not know: it may be a call, so it goes
            return Call(kind, arguments, False), None
        offered = next((t for t in types if ToolId.builtin(t) in self.allow.offered.tools), None)
        return Call(offered or kind, arguments, offered is not None), ToolId.builtin(offered or types[0])


def _arguments(item: dict[str, Any]) -> str | None:
    for field in ("arguments", "input"):
        value = item.get(field)
        if isinstance(value, str):
            return value
    return None


def _stand_in_id(item: dict[str, Any], position: int) -> str:
    """The id of the message that stands in for a removed item: the same in a stream's events and
    in the response snapshots (the client matches them by id)."""
    own = item.get("id")
    return f"msg_gk_{own}" if isinstance(own, str) else f"msg_gk_{position}"


def _stand_in(item: dict[str, Any], position: int, text: str, refusal: bool = False) -> dict[str, Any]:
    """The assistant message that replaces a removed call under `blocked_calls: explain`. Its text
    is a `refusal` part when the answer is structured (`Allowed.structured`): `responses.parse`
    validates every `output_text` part as the format, and reads no refusal."""
    part = {"type": "refusal", "refusal": text} if refusal else {"type": "output_text", "text": text, "annotations": []}
    return {
        "type": "message",
        "id": _stand_in_id(item, position),
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }


def _structured_stand_in(item: dict[str, Any], position: int, text: str) -> dict[str, Any]:
    return _stand_in(item, position, text, refusal=True)


def _enforce_response(response: dict[str, Any], allow: Allowed, result: Enforced) -> None:
    output = response.get("output")
    if output is None:
        return
    replace = _structured_stand_in if allow.structured else _stand_in
    kept = enforce_items(output, "output", _Judge(allow), result, replace, allow)
    if kept is not None:
        response["output"] = kept
    for item in response["output"] if isinstance(response["output"], list) else ():
        _known_annotations(item)


# Output text annotations the API defines (openai/types/responses/response_output_text.py): a
# client reads each by its type, so one of another type (a call-shaped object) is removed.
_ANNOTATIONS = frozenset({"url_citation", "file_citation", "container_file_citation", "file_path"})


def _known_annotations(item: Any) -> None:
    """Remove the annotations of unknown types from a message item's content parts."""
    parts = item.get("content") if isinstance(item, dict) and item.get("type") == "message" else None
    for part in parts if isinstance(parts, list) else ():
        _known_part_annotations(part)


def _known_part_annotations(part: Any) -> None:
    annotations = part.get("annotations") if isinstance(part, dict) else None
    if isinstance(annotations, list):
        part["annotations"] = [a for a in annotations if isinstance(a, dict) and a.get("type") in _ANNOTATIONS]


class ResponsesStreamFilter:
    """Drops every event of a removed output item (or, under `explain`, sends a whole stand-in
    message in its place) and renumbers `output_index` and `sequence_number`, so the client sees
    a consistent stream. Every event is re-serialised from what was parsed, with `event:` set to
    the data's own `type`. The stream ends at its first terminal event (`response.completed`,
    `.incomplete`, `.failed`, `error`); one that ends before any is incomplete."""

    def __init__(self, offered: Allowed | Offered) -> None:
        self.allow = allowed(offered)
        self.result = Enforced()
        self._judge = _Judge(self.allow)
        self._positions = Positions()
        self._items: dict[int, tuple[Any, Any]] = {}  # upstream output_index -> (type, name) seen at 'added'
        self._removed: set[int] = set()  # upstream indexes whose own events never reach the client
        self._sequence = 0
        self._ended = False

    def feed(self, event: Event) -> list[Event]:
        if self._ended or event.data.strip() == "[DONE]":
            return []  # [DONE] is not a Responses event: the stream ends at its terminal event
        doc = read_object(event, "Responses")
        kind = doc["type"]
        if kind not in _KNOWN_EVENTS:
            if "output_index" in doc or "item" in doc:
                raise AnswerInvalid(f"an event of unknown type {kind!r} carries an output item")
            return []  # a type this codec does not know: it may belong to a removed item, so it goes
        docs = [doc]
        if kind == "response.output_text.annotation.added":
            annotation = doc.get("annotation")
            if not (isinstance(annotation, dict) and annotation.get("type") in _ANNOTATIONS):
                return []  # an annotation of a type the API does not define: removed
        _known_annotations(doc.get("item"))
        _known_part_annotations(doc.get("part"))
        if kind in _ITEM_EVENTS:
            if "output_index" not in doc:
                raise AnswerInvalid(f"a {kind!r} event has no output_index")
            docs = self._route(kind, doc)
        elif "output_index" in doc or "item" in doc or "item_id" in doc:
            raise AnswerInvalid(f"a {kind!r} event names an output item it should not")
        if isinstance(doc.get("response"), dict):
            scratch = Enforced()  # the stream's own decisions are the record; this cleans the snapshot
            _enforce_response(doc["response"], self.allow, scratch)
        elif "response" in doc and doc["response"] is not None:
            raise AnswerInvalid(f"a {kind!r} event's 'response' is not an object")
        elif kind in _RESPONSE_EVENTS:
            raise AnswerInvalid(f"a {kind!r} event has no 'response' object")
        if kind == "error" and not isinstance(doc.get("error"), dict):
            # The upstream's own error event, given the object that makes the official client raise.
            doc["error"] = {"type": "upstream_error", "code": doc.get("code"), "message": doc.get("message")}
        self._ended = kind in _TERMINAL
        return [self._numbered(d, event) for d in docs]

    def _numbered(self, doc: dict[str, Any], event: Event) -> Event:
        doc["sequence_number"] = self._sequence
        self._sequence += 1
        return Event(data=orjson.dumps(doc).decode(), event=doc["type"], id=event.id, retry=event.retry)

    def _route(self, kind: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """The client's events for one item-level event (renumbered in place; none when it belongs
        to a removed item; a stand-in message when a removed item is explained)."""
        index = doc["output_index"]
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise AnswerInvalid(f"a {kind!r} event has an invalid output_index {index!r}")
        item = doc.get("item")
        if item is not None and not isinstance(item, dict):
            raise AnswerInvalid(f"a {kind!r} event's 'item' is not an object")
        if index in self._positions:
            if kind == "response.output_item.added":
                raise AnswerInvalid(f"output_index {index} was added twice")
            self._check_same(kind, index, doc, item)
            if index in self._removed:
                return []
            doc["output_index"] = self._positions[index]
            return [doc]
        if kind != "response.output_item.added" or item is None:
            raise AnswerInvalid(f"a {kind!r} event for output_index {index} came before its output_item.added")
        self._items[index] = (item["type"], item.get("name"))
        fate = settle(self._judge(item), self.result, self.allow)
        position = self._positions.place(index, fate is not False)
        if fate is True:
            doc["output_index"] = position
            return [doc]
        self._removed.add(index)
        if fate is False or position is None:
            return []
        return _stand_in_events(_stand_in(item, index, fate, self.allow.structured), position)

    def _check_same(self, kind: str, index: int, doc: dict[str, Any], item: dict[str, Any] | None) -> None:
        """A later event must not retype or rename its item: the client would see the new name."""
        decided_type, decided_name = self._items[index]
        if item is not None:
            if (item.get("type"), item.get("name")) != (decided_type, decided_name):
                raise AnswerInvalid(
                    f"output_index {index} changed from {decided_type}/{decided_name} to "
                    f"{item.get('type')}/{item.get('name')} mid-stream"
                )
            verdict = self._judge(item)  # the same name, but a changed server_label or namespace?
            shown = verdict is True or (verdict is not False and verdict[0].offered)
            if shown == (index in self._removed):
                raise AnswerInvalid(f"output_index {index} changed what it calls mid-stream")
        name = doc.get("name")
        if name is not None and name != decided_name:
            raise AnswerInvalid(f"a {kind!r} event names {name!r} for output_index {index} ({decided_name!r})")

    def finish(self) -> list[Event]:
        if not self._ended:
            raise AnswerIncomplete("upstream stream ended before response.completed")
        return []

    def error(self, message: str, kind: str, code: str | None) -> Event:
        """The event that ends this stream in error, numbered as its next event."""
        return CODEC.stream_error(message, kind, code, self._sequence)


def _stand_in_events(message: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """A whole stand-in message as the events a Responses stream spells it with."""
    item_id = message["id"]
    part = message["content"][0]
    at = {"item_id": item_id, "output_index": index, "content_index": 0}
    if part["type"] == "refusal":
        text = [
            {"type": "response.refusal.delta", **at, "delta": part["refusal"]},
            {"type": "response.refusal.done", **at, "refusal": part["refusal"]},
        ]
    else:
        text = [
            {"type": "response.output_text.delta", **at, "delta": part["text"], "logprobs": []},
            {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []},
        ]
    empty = part | ({"refusal": ""} if part["type"] == "refusal" else {"text": ""})
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": message | {"status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": empty},
        *text,
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": index, "item": message},
    ]


CODEC = ResponsesCodec()
