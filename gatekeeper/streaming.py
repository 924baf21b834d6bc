"""Response-side enforcement for server-sent-event streams.

Events with no tool call in them are relayed as the upstream's own bytes. Tool-call deltas are
tracked per (choice, tool-call index): the first delta of an index carries the function name
(as OpenAI and llama.cpp send it); a call to a tool that was not offered is dropped with all its
later deltas, and the surviving calls are renumbered so clients see contiguous indexes.
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

import httpx
import orjson

from gatekeeper import metrics


class StreamEnforcer:
    def __init__(self, allowed: set[str], line: dict, log: Any) -> None:
        self.allowed = allowed
        self.line = line
        self.log = log
        self.started = time.perf_counter()
        self._index: dict[tuple[int, int], int | None] = {}  # (choice, upstream index) -> client index
        self._kept: dict[int, int] = {}  # choice -> calls kept so far
        self.blocked: list[str] = []

    async def relay(self, response: httpx.Response) -> AsyncIterator[bytes]:
        buffer = b""
        done = False
        error: str | None = None
        try:
            async for data in response.aiter_bytes():
                buffer += data
                while True:
                    end = buffer.find(b"\n\n")
                    if end < 0:
                        break
                    event, buffer = buffer[: end + 2], buffer[end + 2:]
                    if event.startswith(b"data: [DONE]"):
                        done = True
                    out = self.filter_event(event)
                    if out:
                        yield out
            if buffer.strip():
                yield self.filter_event(buffer) or b""
        except httpx.HTTPError as exc:
            error = f"upstream stream broke off: {type(exc).__name__}: {exc}"
        finally:
            await response.aclose()
        if not done and error is None:
            error = "upstream stream ended before [DONE]"
        if error:
            metrics.UPSTREAM_ERRORS.labels("stream_incomplete").inc()
            self.line.update(stream_error=error)
            yield b"data: " + orjson.dumps({"error": {"message": error, "type": "upstream_error",
                                                      "code": "upstream_incomplete"}}) + b"\n\n"
        if self.blocked:
            metrics.TOOL_CALLS_BLOCKED.inc(len(self.blocked))
            self.line.update(blocked_calls=self.blocked)
        self.log.info("request", **self.line, stream=True,
                      latency_ms=round((time.perf_counter() - self.started) * 1000, 2))

    def filter_event(self, event: bytes) -> bytes | None:
        if b"tool_calls" not in event and b"function_call" not in event:
            return event
        body = event.strip()
        if not body.startswith(b"data:"):
            return event
        try:
            doc = orjson.loads(body[5:])
        except orjson.JSONDecodeError:
            return event
        if not isinstance(doc, dict) or not self._enforce(doc):
            return event
        if not doc.get("choices") and "usage" not in doc:
            return None
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    def _admit(self, key: tuple[int, int], name: str) -> int | None:
        """Decide a call on its first delta: its index for the client, or None when blocked."""
        if key not in self._index:
            choice = key[0]
            if name in self.allowed:
                self._index[key] = self._kept.get(choice, 0)
                self._kept[choice] = self._index[key] + 1
            else:
                self._index[key] = None
                self.blocked.append(name)
                self.log.warning("tool_call_blocked", request_id=self.line.get("request_id"),
                                 model=self.line.get("model"), tool=name)
        return self._index[key]

    def _enforce(self, doc: dict) -> bool:
        """Filter one chunk in place; True when it changed."""
        changed = False
        choices = []
        for choice in doc.get("choices") or []:
            ci = choice.get("index", 0)
            delta = choice.get("delta") or {}
            calls = delta.get("tool_calls")
            if calls:
                kept = []
                for call in calls:
                    name = (call.get("function") or {}).get("name") or ""
                    new_index = self._admit((ci, call.get("index", 0)), name)
                    if new_index is not None:
                        kept.append(call | {"index": new_index})
                changed = changed or kept != calls
                if kept:
                    delta["tool_calls"] = kept
                else:
                    del delta["tool_calls"]
            legacy = delta.get("function_call")
            if isinstance(legacy, dict) and self._admit((ci, -1), legacy.get("name") or "") is None:
                del delta["function_call"]  # the legacy form: a name first, then argument deltas
                changed = True
            seen = any(k[0] == ci for k in self._index)
            if seen and choice.get("finish_reason") in ("tool_calls", "function_call") and not self._kept.get(ci):
                choice["finish_reason"] = "stop"
                changed = True
            if delta or choice.get("finish_reason") or choice.get("logprobs"):
                choices.append(choice)
            else:
                changed = True
        if changed:
            doc["choices"] = choices
        return changed
