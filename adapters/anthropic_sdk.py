"""Gate an `anthropic.Anthropic` / `anthropic.AsyncAnthropic` client in-process, without the proxy.

    client = gate_client(anthropic.Anthropic(), gk)
    client.messages.create(model="m", max_tokens=1024, messages=[...], tools=TOOLS)

`messages` and `beta.messages` (`create`, `stream`, `parse`, `count_tokens`; also through
`with_raw_response`, `with_streaming_response` and `with_options`) get the proxy's request
semantics for the Messages API (gatekeeper/protocols/messages.py): tools and MCP servers above
the model's tier are removed, `tool_choice` forcing a hidden tool (or `any` with every tool
hidden) raises `gatekeeper.errors.ToolChoiceBlocked`, effort is `output_config.effort` or the
thinking budget's mapping. A call without tool fields is passed on untouched.
The SDK's "not given" markers (`anthropic.NOT_GIVEN`, `anthropic.omit`), which agent frameworks pass for every
field they leave unset, are removed from every field first, as the SDK itself would not send them.
"""

from __future__ import annotations

from typing import Any

import anthropic

from gatekeeper import Gatekeeper
from gatekeeper.adapters._sdk import GatedClient, agate_kwargs, gate_kwargs

_ROUTES = {("messages",): "messages", ("beta", "messages"): "messages"}


def gate_client(client: anthropic.Anthropic | anthropic.AsyncAnthropic, gk: Gatekeeper) -> Any:
    """Return `client` with its messages gated by `gk`; the original client is unchanged."""
    return GatedClient(client, gk, _ROUTES, gate_kwargs, agate_kwargs, isinstance(client, anthropic.AsyncAnthropic))
