"""A tool call written as text: the failure that looks like success.

A model that was offered tools and answers with `<tool_call>{"name": ..., "arguments": ...}
</tool_call>` or a bare JSON object in its content (a chat template that lost its tool parser,
a backend swapped under the same name) returns 200 OK with no structured call: the agent reads
it as a final answer and stops, or loops. `text_call` finds such a call in an answer's text so
drift counts it (`Fault.TEXT_CALL`).

Conservative on purpose, since a false positive would count against a healthy model: the call
must name a tool the request offered, and carry arguments (an object, or a string of one);
outside a `<tool_call>` tag, the JSON must be the whole content, or the one fenced block that
is the whole content. Prose that mentions a tool, or shows JSON inside a sentence, is not one.

Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

MAX_CHARS = 64 * 1024  # an answer longer than this is prose or a document, not a call: not parsed

# Qwen, Hermes and many GGUF templates write calls in this tag; the closing tag may be missing
# when the answer was cut. Only its contents are read.
_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```\Z", re.DOTALL)
_ARGUMENT_KEYS = ("arguments", "parameters", "input", "args")  # OpenAI, Llama 3.x, Anthropic, others


@dataclass(frozen=True)
class TextCall:
    """The call found: the offered tool it names and its arguments as JSON text (for `shape`)."""

    name: str
    arguments: str


def text_call(text: str | None, offered: Collection[str]) -> TextCall | None:
    """The tool call `text` writes out instead of making it, or None. `offered`: the names of
    the tools the request offered (a call must name one of them)."""
    if not text or not offered or len(text) > MAX_CHARS:
        return None
    stripped = text.strip()
    candidates: list[str] = []
    if "<tool_call>" in stripped:
        candidates.extend(m.group(1) for m in _TAG.finditer(stripped))
    else:
        fenced = _FENCE.match(stripped)
        candidates.append(fenced.group(1).strip() if fenced else stripped)
    for candidate in candidates:
        if not candidate.startswith(("{", "[")):
            continue
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        for item in value if isinstance(value, list) else [value]:
            found = _call_of(item, offered)
            if found is not None:
                return found
    return None


def _call_of(item: Any, offered: Collection[str]) -> TextCall | None:
    if not isinstance(item, dict):
        return None
    function = item.get("function")
    if item.get("type") == "function" and isinstance(function, dict):  # the chat wire shape, as text
        item = function
    name = item.get("name")
    if not isinstance(name, str) or name not in offered:
        return None
    for key in _ARGUMENT_KEYS:
        if key not in item:
            continue
        arguments = item[key]
        if isinstance(arguments, dict):
            return TextCall(name, json.dumps(arguments))
        if isinstance(arguments, str) and arguments.strip().startswith("{"):
            return TextCall(name, arguments)
        return None
    return None
