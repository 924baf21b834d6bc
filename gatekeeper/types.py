"""Plain data shared by the transport layer (backends) and the scoring layer (checks).

Kept apart so that a backend never imports the check DSL and a check never imports HTTP.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model made it; `arguments` is the raw JSON string it sent."""

    id: str
    name: str
    arguments: str


# finish_reason values of an answer cut short: the backend's token limit (`length`), the call's
# time bound (`timeout`, measuring/backends.py), the server's context (`context_exceeded`).
CUT_SHORT = frozenset({"length", "timeout", "context_exceeded"})


@dataclass(frozen=True)
class Answer:
    """What the model said at one step: its text (reasoning removed) and its tool calls, in order.

    `finish_reason` is the backend's (`stop`, `length`, `tool_calls` ...) when it gave one: an
    empty answer cut by `length` is a model that ran out of tokens, not a model that said nothing.
    """

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None

    @property
    def cut(self) -> bool:
        """The answer ran past what its call could spend (tokens, seconds, or the model's
        context): unfinished, so a failed answer whatever text it holds."""
        return self.finish_reason in CUT_SHORT

    @property
    def empty_by_length(self) -> bool:
        """Nothing usable came back because the token budget ran out (typically spent thinking)."""
        return self.finish_reason == "length" and not self.content.strip() and not self.tool_calls


# Closed reasoning blocks anywhere in the text (`<think>`, and `<thinking>` used by some templates).
_THINK_BLOCK = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(?:think|thinking)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking)>", re.IGNORECASE)


def strip_reasoning(content: str) -> str:
    """The answer without the model's reasoning, as the seed system scores it.

    Removes every `<think>...</think>` block; an opening tag never closed (the budget ran out
    while thinking) drops everything after it; a closing tag with no opening one (templates that
    put `<think>` in the prompt, so the model's output starts inside the block) drops everything
    before it. The result is stripped of surrounding whitespace only when something was removed,
    so an answer without reasoning is scored exactly as sent.
    """
    if "<" not in content:
        return content
    text = _THINK_BLOCK.sub("", content)
    opening = _THINK_OPEN.search(text)
    if opening is not None:
        text = text[: opening.start()]
    closings = list(_THINK_CLOSE.finditer(text))
    if closings:
        text = text[closings[-1].end() :]
    return text.strip() if text != content else content
