"""Reading answers strictly, plain and streamed, shared by every codec and both translations.

* `loads`: strict JSON (orjson: no NaN/Infinity, valid UTF-8 only), AnswerInvalid otherwise;
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
    doc = loads(event.data, f"a {protocol} stream event")
    if not isinstance(doc, dict):
        raise AnswerInvalid(f"a {protocol} stream event must be a JSON object, got {type(doc).__name__}")
    if not isinstance(doc.get("type"), str):
        raise AnswerInvalid(f"a {protocol} stream event has no string 'type'")
    return doc


def loads(raw: bytes | str, what: str) -> Any:
    """Strict JSON (orjson: no NaN/Infinity, valid UTF-8 only)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise AnswerInvalid(f"{what} is not valid JSON: {exc}") from None
