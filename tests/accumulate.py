"""How clients read what the proxy sends: both ways SDKs accumulate streamed tool calls.

openai-python (`openai/lib/streaming/_deltas.py`) concatenates string fragments of a call,
name included, and takes a name only when none was set yet; openai-node
(`ChatCompletionStream#accumulateChatCompletion`) overwrites a call's name with every non-empty
name fragment, so it keeps the last one. A proxy is safe only if no hidden name survives either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from openai._streaming import SSEDecoder


def client_events(raw: bytes) -> list[str]:
    """Event data as openai-python's own SSE decoder reads the bytes, up to [DONE] or an error."""
    out = []
    try:
        for sse in SSEDecoder().iter_bytes(iter([raw])):
            if sse.data.startswith("[DONE]"):
                break
            out.append(sse.data)
    except UnicodeDecodeError:
        pass  # the SDK raises here: what it read so far is all it can accumulate
    return out


def naive_events(raw: bytes) -> list[str]:
    """A careless client: splits on blank LF lines and reads `data: ` lines only."""
    out = []
    for block in raw.split(b"\n\n"):
        lines = [
            line[6:] if line.startswith(b"data: ") else line[5:]
            for line in block.split(b"\n")
            if line.startswith(b"data:")
        ]
        if lines:
            out.append(b"\n".join(lines).decode("utf-8", "replace"))
    return out


def chunks_of(datas: Iterable[str]) -> list[dict[str, Any]]:
    """Parsed chunks as a lenient client reads them (Python's json accepts NaN); a chunk with an
    `error` member or one that does not parse ends the stream (the SDK raises there)."""
    out = []
    for data in datas:
        try:
            doc = json.loads(data)
        except ValueError:
            break
        if isinstance(doc, dict) and doc.get("error"):
            break
        if isinstance(doc, dict):
            out.append(doc)
    return out


def _deltas(chunk: dict[str, Any]) -> Iterable[tuple[Any, dict[str, Any]]]:
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict):
            yield choice.get("index"), delta


def _calls(delta: dict[str, Any]) -> Iterable[tuple[Any, dict[str, Any]]]:
    calls = delta.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            fn = call.get("function") if isinstance(call.get("function"), dict) else call.get("custom")
            yield call.get("index"), fn if isinstance(fn, dict) else {}
    legacy = delta.get("function_call")
    if isinstance(legacy, dict):
        yield "legacy", legacy


def python_names(chunks: list[dict[str, Any]]) -> set[str]:
    names: dict[tuple[Any, Any], Any] = {}
    for chunk in chunks:
        for ci, delta in _deltas(chunk):
            for index, fn in _calls(delta):
                if "name" not in fn:
                    continue
                key = (ci, index)
                if names.get(key) is None:
                    names[key] = fn["name"]
                elif isinstance(names[key], str) and isinstance(fn["name"], str):
                    names[key] += fn["name"]
    return {n for n in names.values() if isinstance(n, str) and n}


def node_names(chunks: list[dict[str, Any]]) -> set[str]:
    names: dict[tuple[Any, Any], str] = {}
    for chunk in chunks:
        for ci, delta in _deltas(chunk):
            for index, fn in _calls(delta):
                key = (ci, str(index))  # JS object keys: index undefined becomes "undefined"
                if fn.get("name"):
                    names[key] = fn["name"]
    return {n for n in names.values() if isinstance(n, str) and n}


def plain_names(body: bytes) -> set[str]:
    """Call names in a plain answer as a lenient client reads it."""
    try:
        doc = json.loads(body)
    except ValueError:
        return set()
    names = set()
    choices = doc.get("choices") if isinstance(doc, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            for key in ("function", "custom"):
                inner = call.get(key) if isinstance(call, dict) else None
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    names.add(inner["name"])
        legacy = message.get("function_call")
        if isinstance(legacy, dict) and isinstance(legacy.get("name"), str):
            names.add(legacy["name"])
    return names


def stream_names(raw: bytes) -> set[str]:
    """Every name a client could end up with, whichever decoder and accumulation it uses."""
    found = set()
    for events in (client_events(raw), naive_events(raw)):
        chunks = chunks_of(events)
        found |= python_names(chunks) | node_names(chunks)
    return found
