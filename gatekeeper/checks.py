"""The check types of the suite DSL: pure functions from (check, answer) to pass/fail."""

from __future__ import annotations

from dataclasses import dataclass

from gatekeeper.suite import Check


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model made it; `arguments` is the raw JSON string it sent."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    """What the model said at one step: its text and its tool calls, in order."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()


def run_check(check: Check, answer: Answer) -> bool:
    """True when `answer` passes `check`."""
    raise NotImplementedError
