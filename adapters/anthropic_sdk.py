"""Gate an `anthropic.Anthropic` / `anthropic.AsyncAnthropic` client in-process, without the proxy.

    client = gate_client(anthropic.Anthropic(), gk)
    client.messages.create(model="m", max_tokens=1024, messages=[...], tools=TOOLS)

`messages` and `beta.messages` (`create`, `stream`, `parse`, `count_tokens`; also through
`with_raw_response`, `with_streaming_response` and `with_options`) get the proxy's request and answer
semantics for the Messages API (gatekeeper/protocols/messages/): tools and MCP servers above
the model's tier are removed, `tool_choice` forcing a hidden tool (or `any` with every tool
hidden) raises `gatekeeper.errors.ToolChoiceBlocked`, effort is `output_config.effort` or the
thinking budget's mapping. A call without tool fields is passed on untouched. Nothing else of `messages` passes
(`batches`, `beta.messages.tool_runner`, `.thread`: RequestInvalid when called).
The SDK's "not given" markers (`anthropic.NOT_GIVEN`, `anthropic.omit`), which agent frameworks pass for every
field they leave unset, are removed from every field first, as the SDK itself would not send them.
"""

from __future__ import annotations

from typing import Any

import anthropic

from gatekeeper import Gatekeeper
from gatekeeper.adapters._sdk import GatedClient, agate_kwargs, gate_kwargs, gated_sdk_client

_ROUTES = {("messages",): "messages", ("beta", "messages"): "messages"}
# Nothing else of `messages` passes: `batches` (each request of a batch carries its own tools),
# `beta.messages.tool_runner` and `.thread` (they send requests the gate never sees) raise
# RequestInvalid through a gated client.
_PASSED: dict[tuple[str, ...], frozenset[str]] = {}
# The client's other resources that run no model with tools (the rest raise RequestInvalid when
# called: `beta.agents`, `.sessions`, `.deployments`, ... run managed agents with tools of their own).
_SAFE = ("files", "models", "organization", "skills", "user_profiles")
_OPEN = frozenset(
    [(name,) for name in _SAFE]
    + [("beta", name) for name in (*_SAFE, "compliance", "memory_stores", "tunnels", "vaults", "webhooks")]
)


def gate_client(client: anthropic.Anthropic | anthropic.AsyncAnthropic, gk: Gatekeeper) -> Any:
    """Return `client` with its messages gated by `gk`; the original client is unchanged."""
    is_async = isinstance(client, anthropic.AsyncAnthropic)
    target, http = gated_sdk_client(client, gk, is_async)
    return GatedClient(
        target, gk, _ROUTES, gate_kwargs, agate_kwargs, is_async, passed=_PASSED, http=http, open_resources=_OPEN
    )
