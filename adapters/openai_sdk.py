"""Gate an `openai.OpenAI` / `openai.AsyncOpenAI` client in-process, without the proxy.

    client = gate_client(openai.OpenAI(base_url=...), gk)
    client.chat.completions.create(model="m", messages=[...], tools=TOOLS, reasoning_effort="low")
    client.responses.create(model="m", input="...", tools=TOOLS, reasoning={"effort": "low"})

`chat.completions` and `responses` (`create`, `parse`, `stream`; also through `with_raw_response`,
`with_streaming_response` and `with_options`) get the proxy's request semantics: the tools above
the model's tier are removed, tool fields are dropped when none remain, and a `tool_choice`
forcing a hidden tool raises `gatekeeper.errors.ToolChoiceBlocked`. A call without tool fields is
passed on untouched (and starts no measurement); tool fields smuggled through `extra_body` are
refused. Everything else is the client's own.
"""

from __future__ import annotations

from typing import Any

import openai

from gatekeeper.adapters._sdk import GatedClient
from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.errors import RequestInvalid
from gatekeeper.inprocess.wrap import agate_body, gate_body

# The request fields that carry tools (or could: a stored prompt), per protocol.
TOOL_FIELDS = {
    "chat": ("tools", "tool_choice", "functions", "function_call"),
    "responses": ("tools", "tool_choice", "prompt"),
    "messages": ("tools", "tool_choice", "mcp_servers"),
}
_ROUTES = {("chat", "completions"): "chat", ("responses",): "responses"}
# The SDKs' own keyword arguments (request options, and `parse`'s output type): not request fields.
SDK_ARGUMENTS = ("extra_headers", "extra_query", "extra_body", "timeout", "text_format", "betas")


def gate_client(client: openai.OpenAI | openai.AsyncOpenAI, gk: Gatekeeper) -> Any:
    """Return `client` with its chat completions and responses gated by `gk`; the original is unchanged."""
    return GatedClient(client, gk, _ROUTES, _gate, _agate, isinstance(client, openai.AsyncOpenAI))


def omitted(value: Any) -> bool:
    """None or an SDK's "not given" marker (openai's and anthropic's share the class names)."""
    return value is None or type(value).__name__ in ("NotGiven", "Omit")


def tool_body(protocol: str, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The call's keyword arguments with the SDK's omitted markers removed; None when it has no
    tool field (nothing to gate)."""
    fields = TOOL_FIELDS[protocol]
    extra = kwargs.get("extra_body")
    if isinstance(extra, dict) and any(k in extra for k in fields):
        raise RequestInvalid(
            f"tool fields in extra_body ({', '.join(k for k in fields if k in extra)}) "
            "cannot be gated: pass them as keyword arguments"
        )
    body = {k: v for k, v in kwargs.items() if not (k in (*fields, "parallel_tool_calls") and omitted(v))}
    if not any(k in body for k in fields) or not isinstance(body.get("model"), str):
        return None
    for field in ("tools", "functions", "mcp_servers", "messages"):
        if field in body and not isinstance(body[field], (list, str)):
            body[field] = list(body[field])  # the SDKs accept any iterable
    return body


def _gate(protocol: str, gk: Gatekeeper, kwargs: dict[str, Any]) -> dict[str, Any]:
    body = tool_body(protocol, kwargs)
    if body is not None:
        gate_body(gk, protocol, body, SDK_ARGUMENTS)
    return kwargs if body is None else body


async def _agate(protocol: str, gk: Gatekeeper, kwargs: dict[str, Any]) -> dict[str, Any]:
    body = tool_body(protocol, kwargs)
    if body is not None:
        await agate_body(gk, protocol, body, SDK_ARGUMENTS)
    return kwargs if body is None else body
