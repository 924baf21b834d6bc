"""Recognise a randomised test's instance from the conversation a backend receives.

A scripted upstream sees only rendered prompts and tool results; to answer a randomised test
it matches each message against its template (a `{{name}}` placeholder captures the value, a
repeated one must repeat it, an arithmetic one matches anything) and re-renders the test with
the values it recovered. A value the conversation has not shown yet is filled by a fixed draw:
no answer can depend on it, as no model could know it either.
"""

from __future__ import annotations

import re
from typing import Any

from gatekeeper.suite.loader import BenchTest, Suite, render_test
from gatekeeper.suite.templates import Template

_PLACEHOLDER = re.compile(r"\{\{([^{}]*)\}\}")
_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*$")


def _pattern(template: str, bound: dict[str, Any]) -> re.Pattern[str]:
    parts, seen, pos = [], set(), 0
    for match in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[pos : match.start()]))
        name = _NAME.match(match.group(1))
        if name is None:
            parts.append(".+?")
        elif name.group(1) in bound:
            parts.append(re.escape(str(bound[name.group(1)])))
        elif name.group(1) in seen:
            parts.append(f"(?P={name.group(1)})")
        else:
            parts.append(f"(?P<{name.group(1)}>.+?)")
            seen.add(name.group(1))
        pos = match.end()
    parts.append(re.escape(template[pos:]))
    return re.compile("".join(parts), re.DOTALL)


def _inputs(messages: list[dict]) -> list[str]:
    """The conversation's inputs in order: user prompts and tool results."""
    return [m.get("content") or "" for m in messages if m.get("role") in ("user", "tool")]


def _typed(spec: Any, text: str) -> Any:
    """The drawn value a captured text stands for: a choice's own value (a float stays a float),
    an int range's integer, else the text."""
    if spec.choice is not None:
        return next((v for v in spec.choice if str(v) == text), text)
    if spec.is_int and text.lstrip("-").isdigit():
        return int(text)
    return text


def recover(template: Template, where: str, messages: list[dict]) -> BenchTest | None:
    """The instance of `template` this conversation is playing, or None if it is another test."""
    raw = template.raw
    steps = raw.get("steps") or [{"prompt": raw.get("prompt")}]
    expected = [text for step in steps for text in (step.get("toolResult"), step.get("prompt")) if text is not None]
    seen = _inputs(messages)
    if not seen or len(seen) > len(expected):
        return None
    bound: dict[str, Any] = {}
    for pattern_text, text in zip(expected, seen, strict=False):
        found = _pattern(pattern_text, bound).fullmatch(text)
        if found is None:
            return None
        for name, value in found.groupdict().items():
            bound[name] = _typed(template.vars[name], value)
    return render_test(template, where, template.draw("recovered") | bound)


def locate_instance(suite: Suite, messages: list[dict]) -> BenchTest | None:
    for name, template in suite.templates.items():
        test = recover(template, name, messages)
        if test is not None:
            return test
    return None
