"""The protocols gatekeeper serves: one registry entry each, and every part of gatekeeper that
needs to know a protocol reads it here (the proxy's routes and error shapes, the in-process
transport's endpoints, capability routing's effort field, the config's `upstream.protocols`, the
SDK wrappers and the LiteLLM hook).

A protocol is its codec (protocols/base.py `Codec`: parse, gate, enforce, errors), and, when a
chat-only upstream can serve it, its translator; plus what the entry says: where its requests
are sent, where they carry the model, the stream flag and the effort, and which top-level
fields offer tools. Adding a protocol: its codec (one module or folder) and one
`register_protocol` line below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.protocols.base import Codec, Translator
from gatekeeper.protocols.chat import codec as chat_codec
from gatekeeper.protocols.chat import fields as chat_fields
from gatekeeper.protocols.messages import codec as messages_codec
from gatekeeper.protocols.messages import fields as messages_fields
from gatekeeper.protocols.messages.translate import MessagesTranslator
from gatekeeper.protocols.responses import codec as responses_codec
from gatekeeper.protocols.responses import fields as responses_fields
from gatekeeper.protocols.responses.translate import ResponsesTranslator

# The efforts OpenAI's field can carry that routing may set (openai-python
# types/shared/reasoning_effort.py); routing orders them itself (gatekeeper.core.route_choice.RANKED_EFFORTS).
_OPENAI_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


@dataclass(frozen=True)
class ClientProtocol:
    """One client protocol.

    `paths`: the proxy's paths whose POSTs are its model calls; `count_tokens`: the path of its
    token count and that endpoint's codec (its own field allowlist), if it has one. The codec
    (`Codec.parse`) reads the model, the stream flag and the effort from the body; capability
    routing rewrites them where the entry says: `model_field`, and `effort` (the object holding
    it, or None for the top level; its key), with `effort_targets` the levels it may set (none:
    never rerouted). `tool_fields`: top-level fields that offer tools (refused on a tool-free
    path); `stored_tools`: fields that may bring tools from server-side state (a stored prompt).
    `request_fields` (the top-level allowlist) and `carriers(body)` (the fields of a body that
    offer or could offer tools): from the codec's field tables. `litellm_calls`: the LiteLLM
    call types that speak it. `credential_headers`: the headers its upstreams read a client's
    credential from, when a request is sent to them natively (drift's client identity).
    """

    name: str
    codec: Codec
    paths: tuple[str, ...]
    request_fields: Mapping[str, Any]
    carriers: Callable[[dict[str, Any]], list[str]]
    translator: Translator | None = None
    count_tokens: tuple[str, Codec] | None = None
    model_field: str = "model"
    effort: tuple[str | None, str] | None = None
    effort_targets: tuple[str, ...] = ()
    tool_fields: tuple[str, ...] = ("tools", "tool_choice")
    stored_tools: tuple[str, ...] = ()
    litellm_calls: tuple[str, ...] = ()
    credential_headers: tuple[str, ...] = ("authorization",)


PROTOCOLS: dict[str, ClientProtocol] = {}


def register_protocol(protocol: ClientProtocol) -> ClientProtocol:
    """Serve `protocol` (by its name; registering a name again replaces it)."""
    PROTOCOLS[protocol.name] = protocol
    return protocol


register_protocol(
    ClientProtocol(
        "chat",
        chat_codec.CODEC,
        ("/v1/chat/completions",),
        chat_fields.CHAT_REQUEST,
        chat_fields.carriers,
        effort=(None, "reasoning_effort"),
        effort_targets=_OPENAI_EFFORTS,
        tool_fields=("tools", "tool_choice", "functions", "function_call"),
        litellm_calls=("completion", "acompletion"),
    )
)
register_protocol(
    ClientProtocol(
        "responses",
        responses_codec.CODEC,
        ("/v1/responses",),
        responses_fields.RESPONSES_REQUEST,
        responses_fields.carriers,
        ResponsesTranslator(),
        effort=("reasoning", "effort"),
        effort_targets=_OPENAI_EFFORTS,
        stored_tools=("prompt",),
        litellm_calls=("responses", "aresponses"),
    )
)
register_protocol(
    ClientProtocol(
        "messages",
        messages_codec.CODEC,
        ("/v1/messages",),
        messages_fields.MESSAGES_REQUEST,
        messages_fields.carriers,
        MessagesTranslator(),
        count_tokens=("/v1/messages/count_tokens", messages_codec.COUNT_TOKENS_CODEC),
        # `output_config.effort`, read before a thinking budget. Anthropic's effort
        # (anthropic-sdk-python types/output_config_param.py) also has max, which cannot be placed
        # against OpenAI's levels: never a routing target.
        effort=("output_config", "effort"),
        effort_targets=("low", "medium", "high", "xhigh"),
        tool_fields=("tools", "tool_choice", "mcp_servers"),
        litellm_calls=("anthropic_messages", "aanthropic_messages"),
        # An API key in x-api-key, an auth token in Authorization.
        credential_headers=("x-api-key", "authorization"),
    )
)


def protocol(name: str) -> ClientProtocol | None:
    return PROTOCOLS.get(name)


def codec(name: str, endpoint: str | None = None) -> Codec | None:
    """The codec for a protocol (and endpoint: "count_tokens"), or None when not served."""
    found = PROTOCOLS.get(name)
    if found is None:
        return None
    if endpoint is None:
        return found.codec
    return found.count_tokens[1] if endpoint == "count_tokens" and found.count_tokens is not None else None


def translator(name: str) -> Translator | None:
    """How a protocol is bridged to a chat-only upstream (None: chat itself needs none)."""
    found = PROTOCOLS.get(name)
    return found.translator if found is not None else None


def served() -> list[str]:
    return sorted(PROTOCOLS)


def for_path(path: str) -> ClientProtocol | None:
    """The protocol a proxy path belongs to (a model call's path, one of its endpoints, or a path
    below one: `/v1/responses/{id}`), by the longest matching path."""
    best: tuple[int, ClientProtocol] | None = None
    for entry in PROTOCOLS.values():
        for own in (*entry.paths, *(entry.count_tokens[:1] if entry.count_tokens else ())):
            if (path == own or path.startswith(own + "/")) and (best is None or len(own) > best[0]):
                best = (len(own), entry)
    return best[1] if best is not None else None


def tool_fields() -> tuple[str, ...]:
    """Every protocol's top-level fields that offer tools, each once, in registry order."""
    return tuple(dict.fromkeys(name for entry in PROTOCOLS.values() for name in entry.tool_fields))
