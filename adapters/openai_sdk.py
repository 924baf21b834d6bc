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
The SDK's "not given" markers (`openai.NOT_GIVEN`, `openai.omit`), which agent frameworks pass for every
field they leave unset, are removed from every field first, as the SDK itself would not send them.
"""

from __future__ import annotations

from typing import Any

import openai

from gatekeeper import Gatekeeper
from gatekeeper.adapters._sdk import GatedClient, agate_kwargs, gate_kwargs

_ROUTES = {("chat", "completions"): "chat", ("responses",): "responses"}


def gate_client(client: openai.OpenAI | openai.AsyncOpenAI, gk: Gatekeeper) -> Any:
    """Return `client` with its chat completions and responses gated by `gk`; the original is unchanged."""
    return GatedClient(client, gk, _ROUTES, gate_kwargs, agate_kwargs, isinstance(client, openai.AsyncOpenAI))
