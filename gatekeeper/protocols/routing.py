"""Where each client protocol carries the model and the reasoning effort, so that capability
routing (gatekeeper.routing) can send a request to another `model@effort`. Pure.

    chat        `model`, `reasoning_effort`
    responses   `model`, `reasoning.effort`
    messages    `model`, `output_config.effort`, and a manual thinking budget moved to one that
                reads as the same effort (gatekeeper.protocols.messages.thinking_at)

The effort `default` means no effort field. A rewritten request is parsed again by its codec and
must read as exactly the routed pair: if it does not (a Messages request whose thinking budget
still implies an effort once `output_config.effort` is gone, a Responses request whose last
`configuration_update` item sets another effort), it is not rerouted.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.errors import RequestInvalid
from gatekeeper.protocols.base import Codec
from gatekeeper.protocols.messages import thinking_at
from gatekeeper.store.profile import DEFAULT_EFFORT

# The efforts each protocol's field can carry that routing may set (it orders them itself:
# gatekeeper.routing.RANKED_EFFORTS). openai-python types/shared/reasoning_effort.py for chat and
# Responses; Anthropic's effort (anthropic-sdk-python types/output_config_param.py) has low,
# medium, high, xhigh and max, and max is not ranked (it cannot be placed against OpenAI's
# levels), so it is never a routing target.
_OPENAI = ("none", "minimal", "low", "medium", "high", "xhigh")
TARGETS: dict[str, tuple[str, ...]] = {
    "chat": _OPENAI,
    "responses": _OPENAI,
    "messages": ("low", "medium", "high", "xhigh"),
}

# protocol -> (the object holding the effort, or None for the top level; the effort's key)
_EFFORT_FIELD: dict[str, tuple[str | None, str]] = {
    "chat": (None, "reasoning_effort"),
    "responses": ("reasoning", "effort"),
    "messages": ("output_config", "effort"),
}


def rerouted(codec: Codec, body: dict[str, Any], model: str, effort: str) -> dict[str, Any] | None:
    """A copy of `body` sent to `model` at `effort` ("default": without an effort field), or None
    when the protocol cannot express that pair. Only the top level and the effort's own object
    are copied: the rest (messages, tools) is shared with `body`."""
    holder, key = _EFFORT_FIELD[codec.name]
    out = dict(body)
    out["model"] = model
    if holder is None:
        _set(out, key, effort)
    else:
        inner = out.get(holder)
        inner = dict(inner) if isinstance(inner, dict) else {}
        _set(inner, key, effort)
        if inner:
            out[holder] = inner
        else:
            out.pop(holder, None)
    if codec.name == "messages" and out.get("thinking") is not None and effort != DEFAULT_EFFORT:
        # A manual budget sets the effort too: it moves with `output_config.effort` (or no route).
        thinking = thinking_at(out, effort)
        if thinking is None:
            return None
        out["thinking"] = thinking
    try:
        info = codec.parse(out)
    except RequestInvalid:  # the new effort contradicts another effort knob (chat template kwargs)
        return None
    return out if (info.model, info.effort or DEFAULT_EFFORT) == (model, effort) else None


def _set(doc: dict[str, Any], key: str, effort: str) -> None:
    if effort == DEFAULT_EFFORT:
        doc.pop(key, None)
    else:
        doc[key] = effort
