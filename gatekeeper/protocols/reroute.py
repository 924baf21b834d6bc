"""Capability routing's rewrite of a request for another `model@effort`, in the fields its
protocol's registry entry names (protocols/table.py: `model_field`, `effort`). Pure.

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
from gatekeeper.protocols import table
from gatekeeper.protocols.base import Codec
from gatekeeper.protocols.messages.gate import thinking_at
from gatekeeper.store.profile import DEFAULT_EFFORT


def effort_targets(protocol: str) -> tuple[str, ...]:
    """The efforts routing may set in a request of `protocol` (none: it is never rerouted)."""
    entry = table.protocol(protocol)
    return entry.effort_targets if entry is not None and entry.effort is not None else ()


def rerouted(codec: Codec, body: dict[str, Any], model: str, effort: str) -> dict[str, Any] | None:
    """A copy of `body` sent to `model` at `effort` ("default": without an effort field), or None
    when the protocol cannot express that pair. Only the top level and the effort's own object
    are copied: the rest (messages, tools) is shared with `body`."""
    entry = table.protocol(codec.name)
    if entry is None or entry.effort is None:
        return None
    holder, key = entry.effort
    out = dict(body)
    out[entry.model_field] = model
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
