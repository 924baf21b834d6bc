"""The check types of the suite DSL: pure functions from (check, answer) to pass/fail."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from gatekeeper.suite.jsonrepair import extract_json, loads
from gatekeeper.suite.loader import REGEX_FLAGS, Check, parse_path
from gatekeeper.types import Answer, ToolCall

__all__ = ["CHECKS", "Answer", "ToolCall", "lenient_equal", "run_check"]


def run_check(check: Check, answer: Answer) -> bool:
    """True when `answer` passes `check`."""
    return CHECKS[check.type](check, answer)


# --- values -------------------------------------------------------------------------------

_MISSING = object()


def lenient_equal(actual: Any, expected: Any, *, strip: bool = True) -> bool:
    """Equality as the suite means it.

    An expected number needs an actual number (not a bool, not a numeric string) and
    compares numerically, so `1 == 1.0` but `"8080" != 8080`. Anything else compares
    string forms (see `text_form`), case-sensitive, so `"true"` matches `true`. With
    `strip=False` (tool arguments) strings compare exactly as sent.
    """
    if _is_number(expected):
        return _is_number(actual) and actual == expected
    return text_form(actual, strip=strip) == text_form(expected, strip=strip)


def text_form(value: Any, *, strip: bool = True) -> str:
    """A value as text: strings as they are (stripped unless `strip=False`), everything else as
    compact JSON (`true`, `null`)."""
    if isinstance(value, str):
        return value.strip() if strip else value
    # sort_keys: two objects with the same members are the same value whatever their order.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def json_type(value: Any) -> set[str]:
    """The DSL type names `value` satisfies (an int is both `integer` and `number`)."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    if isinstance(value, dict):
        return {"object"}
    return set()


def value_at(document: Any, path: str) -> Any:
    """The value at a json path in `document`, or `_MISSING`."""
    current = document
    for part in parse_path(path):
        # Keys and indexes are interchangeable like in JavaScript (`a.0`, `obj[0]` -> key "0"),
        # so a suite written for the seed's system reads the same here.
        if isinstance(current, list) and isinstance(part, str) and part.isdigit():
            part = int(part)
        if isinstance(current, list) and isinstance(part, int) and part < len(current):
            current = current[part]
        elif isinstance(current, dict) and str(part) in current:
            current = current[str(part)]
        else:
            return _MISSING
    return current


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _flags(flags: str | None) -> int:
    result = 0
    for flag in flags or "":
        result |= REGEX_FLAGS[flag]
    return result


# --- text ---------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    """Whitespace-separated tokens holding at least one letter or digit ("—" is not a word)."""
    return [token for token in text.split() if any(char.isalnum() for char in token)]


def _strip_edges(word: str) -> str:
    """Drop non-alphanumeric characters at both ends: quotes, `*`, `.`, `!` ..."""
    start, end = 0, len(word)
    while start < end and not word[start].isalnum():
        start += 1
    while end > start and not word[end - 1].isalnum():
        end -= 1
    return word[start:end]


def _word_at(check: Check, answer: Answer, index: int) -> bool:
    words = _words(answer.content)
    return bool(words) and _strip_edges(words[index]) == str(check.value).strip()


def _case_insensitive(check: Check) -> bool:
    return check.flags is None or "i" in check.flags


def _contains(check: Check, answer: Answer) -> bool:
    needle, haystack = str(check.value), answer.content
    if _case_insensitive(check):
        needle, haystack = needle.casefold(), haystack.casefold()
    return needle in haystack


def _regex(check: Check, answer: Answer) -> bool:
    return re.search(str(check.value), answer.content, _flags(check.flags)) is not None


# --- json ---------------------------------------------------------------------------------


def _json_value_at(check: Check, answer: Answer) -> Any:
    try:
        document = extract_json(answer.content)
    except ValueError:
        return _MISSING
    return value_at(document, check.path or "")


def _json_valid(check: Check, answer: Answer) -> bool:
    try:
        extract_json(answer.content)
    except ValueError:
        return False
    return True


def _json_path_equals(check: Check, answer: Answer) -> bool:
    value = _json_value_at(check, answer)
    return value is not _MISSING and lenient_equal(value, check.value)


def _json_path_type(check: Check, answer: Answer) -> bool:
    value = _json_value_at(check, answer)
    return value is not _MISSING and check.value in json_type(value)


def _json_path_length(check: Check, answer: Answer) -> bool:
    # The seed's "array length": an object or a string at the path fails, whatever its size.
    value = _json_value_at(check, answer)
    return isinstance(value, list) and len(value) == check.value


# --- tool calls ---------------------------------------------------------------------------


def _first_call_arg(check: Check, answer: Answer) -> Any:
    """Argument `check.arg` of the first tool call, or `_MISSING` (no call, bad JSON, no such arg)."""
    if not answer.tool_calls:
        return _MISSING
    try:
        arguments = loads(answer.tool_calls[0].arguments)  # NaN / Infinity are not JSON here either
    except ValueError:
        return _MISSING
    if not isinstance(arguments, dict):
        return _MISSING
    return arguments.get(check.arg, _MISSING)


def _tool_not_called(check: Check, answer: Answer) -> bool:
    if check.value is None:
        return not answer.tool_calls
    return all(call.name != check.value for call in answer.tool_calls)


def _tool_arg_equals(check: Check, answer: Answer) -> bool:
    value = _first_call_arg(check, answer)
    # As sent: "server.log\n" is another file than "server.log", so no stripping here.
    return value is not _MISSING and lenient_equal(value, check.value, strip=False)


def _tool_arg_regex(check: Check, answer: Answer) -> bool:
    value = _first_call_arg(check, answer)
    # Unlike `regex`, argument matching ignores case unless the check says otherwise.
    flags = _flags("i" if check.flags is None else check.flags)
    return value is not _MISSING and re.search(str(check.value), text_form(value, strip=False), flags) is not None


# Every check type of the DSL -> the function that decides it.
CHECKS: dict[str, Callable[[Check, Answer], bool]] = {
    "word_count": lambda c, a: len(_words(a.content)) == c.value,
    "line_count": lambda c, a: sum(1 for line in a.content.splitlines() if line.strip()) == c.value,
    "first_word": lambda c, a: _word_at(c, a, 0),
    "last_word": lambda c, a: _word_at(c, a, -1),
    "contains": _contains,
    "not_contains": lambda c, a: not _contains(c, a),
    "regex": _regex,
    "not_regex": lambda c, a: not _regex(c, a),
    "not_empty": lambda c, a: bool(a.content.strip()),
    "json_valid": _json_valid,
    "json_path_equals": _json_path_equals,
    "json_path_type": _json_path_type,
    "json_path_length": _json_path_length,
    "tool_called": lambda c, a: bool(a.tool_calls) and a.tool_calls[0].name == c.value,
    "tool_not_called": _tool_not_called,
    "tool_arg_equals": _tool_arg_equals,
    "tool_arg_regex": _tool_arg_regex,
}
