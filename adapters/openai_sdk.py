"""Gate an `openai.OpenAI` / `openai.AsyncOpenAI` client in-process, without the proxy.

    client = gate_client(openai.OpenAI(base_url=...), gk)
    client.chat.completions.create(model="m", messages=[...], tools=TOOLS, reasoning_effort="low")
    client.responses.create(model="m", input="...", tools=TOOLS, reasoning={"effort": "low"})

`chat.completions` and `responses`, also reached through `beta` (`create`, `parse`, `stream`; also
through `with_raw_response`, `with_streaming_response` and `with_options`) get the proxy's request and answer semantics: the tools above
the model's tier are removed, tool fields are dropped when none remain, and a `tool_choice`
forcing a hidden tool raises `gatekeeper.errors.ToolChoiceBlocked`. A call without tool fields is
passed on untouched (and starts no measurement); tool fields smuggled through `extra_body` are
refused. Calls on stored objects (`retrieve`, `list`, `delete`, `input_items`, ...) pass; any other
method of those resources (`responses.compact`, `responses.connect`) raises `RequestInvalid`.
Everything else is the client's own.
The SDK's "not given" markers (`openai.NOT_GIVEN`, `openai.omit`), which agent frameworks pass for every
field they leave unset, are removed from every field first, as the SDK itself would not send them.
"""

from __future__ import annotations

from typing import Any

import openai

from gatekeeper import Gatekeeper
from gatekeeper.adapters._sdk import GatedClient, agate_kwargs, gate_kwargs, gated_sdk_client

_ROUTES = {
    ("chat", "completions"): "chat",
    ("responses",): "responses",
    ("beta", "chat", "completions"): "chat",  # the same resources, reached through `beta`
    ("beta", "responses"): "responses",
}
# What else a gated resource lets through: calls on stored objects, which send no tools to a model
# (`responses.input_tokens` counts them; nothing runs). Not `compact` nor `connect` (a Responses
# websocket): refused, as the proxy does not serve them either.
_CHAT_STORED = frozenset({"retrieve", "update", "list", "delete", "messages"})
_RESPONSES_STORED = frozenset({"retrieve", "delete", "cancel", "input_items", "input_tokens"})
# The client's other resources that run no model with tools (the rest raise RequestInvalid when
# called: `batches` and `evals` run chat requests with tools, `beta.assistants` / `.threads` and
# `realtime` carry tools of their own, and so may whatever the SDK adds next).
_OPEN = frozenset(
    (name,)
    for name in (
        "admin", "audio", "completions", "containers", "content_provenance_checks", "conversations",
        "embeddings", "files", "fine_tuning", "images", "models", "moderations", "skills", "uploads",
        "vector_stores", "videos", "webhooks",
    )
)  # fmt: skip
_PASSED = {
    ("chat", "completions"): _CHAT_STORED,
    ("beta", "chat", "completions"): _CHAT_STORED,
    ("responses",): _RESPONSES_STORED,
    ("beta", "responses"): _RESPONSES_STORED,
}


def gate_client(client: openai.OpenAI | openai.AsyncOpenAI, gk: Gatekeeper) -> Any:
    """Return `client` with its chat completions and responses gated by `gk`; the original is unchanged."""
    is_async = isinstance(client, openai.AsyncOpenAI)
    target, http = gated_sdk_client(client, gk, is_async)
    return GatedClient(
        target, gk, _ROUTES, gate_kwargs, agate_kwargs, is_async, passed=_PASSED, http=http, open_resources=_OPEN
    )
