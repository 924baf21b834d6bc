"""Reading streamed answers, shared by every codec and both translations.

* `read_object`: one Responses / Messages event's data as a JSON object with a string `type`
  (strict: what a stream filter cannot read with certainty is AnswerInvalid, never a guess).
"""

from __future__ import annotations

from typing import Any

import orjson

from gatekeeper.errors import AnswerInvalid
from gatekeeper.protocols.base import Event


def read_object(event: Event, protocol: str) -> dict[str, Any]:
    """One event's data as a JSON object with a string `type` (orjson: no NaN, valid UTF-8);
    anything else raises AnswerInvalid naming the protocol."""
    try:
        doc = orjson.loads(event.data)
    except orjson.JSONDecodeError as exc:
        raise AnswerInvalid(f"a {protocol} stream event is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise AnswerInvalid(f"a {protocol} stream event must be a JSON object, got {type(doc).__name__}")
    if not isinstance(doc.get("type"), str):
        raise AnswerInvalid(f"a {protocol} stream event has no string 'type'")
    return doc
