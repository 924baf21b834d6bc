"""The OpenAI Responses API codec (`POST /v1/responses`).

How this protocol carries tools, and what gatekeeper calls each one (the name `tools.required_tier`
rules match):
  * `function` / `custom` tools: their `name`; inside a `namespace` tool: `namespace.name`;
  * `mcp` tools: the server's `server_label` gates the whole server; each entry of its
    `allowed_tools` is gated as `server_label.tool` (a server without `allowed_tools` is gated
    as a whole: name its tools there to gate them one by one). The label is the one its
    `server_url` / `connector_id` / `tunnel_id` is bound to when it is (gatekeeper.rules.mcp_identity);
  * every other (built-in) tool: its `name` when it has one, else its `type` (`web_search`,
    `file_search`, `code_interpreter`, `computer_use_preview`, `image_generation`, `local_shell`...).

Answers carry calls as `output` items (`function_call`, `custom_tool_call`, `mcp_call`,
`web_search_call`, ...). An item that calls a tool the gated request did not offer is removed;
so is an item of a type this codec does not know (it cannot tell whether it is a call). Streams
are read event by event (each event names its `output_index`); the events of a removed item are
dropped and later indexes renumbered, so the client's accumulation stays consistent.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.errors import RequestInvalid
from gatekeeper.observe import logs
from gatekeeper.protocols.base import Allowed, Enforced, Event, Offered, RequestInfo
from gatekeeper.protocols.enforce import as_allowed, enforce_answer, json_format
from gatekeeper.protocols.gate import Gated, nonempty
from gatekeeper.protocols.memo import JsonMemo
from gatekeeper.protocols.responses.answer import (
    NOT_CALLS,
    ResponsesStreamFilter,
    enforce_response,
    error_body,
    stream_error,
)
from gatekeeper.protocols.responses.gate import effort_of, gate_request, mcp_allowed_names, one_effort
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy

_log = logs.get_logger(__name__)


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
        for t in NOT_CALLS
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
        return _OFFERED(_offered_tools(body))

    # -- answers ----------------------------------------------------------------------------

    def enforce(self, doc: Any, offered: Allowed | Offered) -> Enforced:
        return enforce_answer(doc, "Responses", enforce_response, as_allowed(offered))

    def stream_filter(self, offered: Allowed | Offered) -> ResponsesStreamFilter:
        return ResponsesStreamFilter(offered)

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        return error_body(status, message, kind, code)

    def listed_tool(self, tool: dict[str, Any], where: str) -> ToolId | None:
        # A `function` / `custom` tool, named at its top level.
        kind = tool.get("type")
        if kind not in ("function", "custom"):
            return None
        name = nonempty(tool.get("name"))
        if name is None:
            raise RequestInvalid(f"{where}.name must be a non-empty string")
        return ToolId.custom(name) if kind == "custom" else ToolId.function(name)

    def asks_structured(self, body: dict[str, Any]) -> bool:
        text = body.get("text")
        return json_format(text.get("format") if isinstance(text, dict) else None)

    def stream_error(self, message: str, kind: str, code: str | None, sequence_number: int = 0) -> Event:
        return stream_error(message, kind, code, sequence_number)


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


def _offered(offered: list[dict[str, Any]]) -> Offered:
    """The offered tools of a gated body's tool objects (`_offered_tools`: all it reads)."""
    tools: list[tuple[ToolId, dict[str, Any] | None]] = []
    for tool in offered:
        kind = tool["type"]  # a gated body: every tool has a string type
        if kind in ("function", "custom"):
            make = ToolId.function if kind == "function" else ToolId.custom
            tools.append((make(tool["name"]), _schema(tool) if kind == "function" else None))
        elif kind == "namespace":
            for inner in tool.get("tools") or []:
                tools.append((ToolId.namespaced(tool["name"], inner["name"]), _schema(inner)))
        elif kind == "mcp":
            names = mcp_allowed_names(tool)
            for name in ["*"] if names is None else names:  # `*`: the server offered whole
                tools.append((ToolId.mcp(tool["server_label"], name), None))
        else:
            tools.append((ToolId.builtin(kind), None))  # by its type, whatever `name` it carries
    return Offered(tools)


_OFFERED = JsonMemo(_offered)  # a conversation sends the same tools with every request


CODEC = ResponsesCodec()
