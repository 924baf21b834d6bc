"""The check types of the suite DSL: pure functions from (check, answer) to pass/fail.

They follow the seed's scoring code rule by rule: the answer is trimmed (JavaScript's whitespace)
before any check, words are split on that whitespace, expected values are compared as
JavaScript's `String()` writes them (`1.0` is "1", `true` is "true"). Where gatekeeper differs
on purpose, the README's table of differences says where and why.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
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
_INVALID = object()  # tool arguments that are no JSON object: every argument check fails


def lenient_equal(actual: Any, expected: Any) -> bool:
    """Equality as the suite means it.

    An expected number needs an actual number (not a bool, not a numeric string) and
    compares numerically, so `1 == 1.0` but `"8080" != 8080`. Other scalars compare as
    JavaScript's `String()` writes them, exactly (no stripping, case-sensitive), as the seed
    does: `"true"` matches `true`, `"3"` matches `3.0`. Arrays and objects compare as compact
    JSON with sorted keys (the seed's `String()` makes every object "[object Object]").
    """
    if _is_number(expected):
        return _is_number(actual) and actual == expected
    return text_form(actual) == text_form(expected)


def text_form(value: Any) -> str:
    """A value as text: a scalar as JavaScript's `String()` writes it, an array or an object as
    compact JSON (sorted keys: two objects with the same members are one value)."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return js_string(value)


def js_string(value: Any) -> str:
    """JavaScript's `String(value)` for a JSON scalar: `null`, `true`, `3` for 3.0, `1e+21`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _js_number(value)
    return str(value)


def _js_number(x: float) -> str:
    """Number::toString (ECMA-262): the shortest digits, positional from 1e-7 to 1e21."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"
    _, digits, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text, k = "".join(map(str, digits)), len(digits)
    n = k + exponent  # x = 0.<digits> * 10^n
    if k <= n <= 21:
        out = text + "0" * (n - k)
    elif 0 < n <= 21:
        out = text[:n] + "." + text[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * -n + text
    else:
        mantissa = text[0] + ("." + text[1:] if k > 1 else "")
        out = f"{mantissa}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
    return ("-" if x < 0 else "") + out


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


# JavaScript's WhiteSpace and LineTerminator characters: what the seed's trim() and \s see.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_SPLIT = re.compile(f"[{_JS_SPACE}]+")


def _text(answer: Answer) -> str:
    """The answer as every check reads it: trimmed, as the seed trims it."""
    return answer.content.strip(_JS_SPACE)


def _words(text: str) -> list[str]:
    """Whitespace-separated tokens holding at least one letter or digit ("—" is not a word)."""
    return [token for token in _JS_SPLIT.split(text) if any(char.isalnum() for char in token)]


def _strip_edges(word: str) -> str:
    """Drop non-alphanumeric characters at both ends: quotes, `*`, `.`, `!` ..."""
    start, end = 0, len(word)
    while start < end and not word[start].isalnum():
        start += 1
    while end > start and not word[end - 1].isalnum():
        end -= 1
    return word[start:end]


def _word_at(check: Check, answer: Answer, index: int) -> bool:
    words = _words(_text(answer))
    return bool(words) and _strip_edges(words[index]) == js_string(check.value)


def _contains(check: Check, answer: Answer) -> bool:
    # The seed builds a regex of the escaped value with the check's flags ("i" by default).
    flags = _flags("i" if check.flags is None else check.flags)
    return re.search(re.escape(js_string(check.value)), _text(answer), flags) is not None


def _regex(check: Check, answer: Answer) -> bool:
    return re.search(str(check.value), _text(answer), _flags(check.flags)) is not None


def _lines(answer: Answer) -> int:
    """Non-empty lines: split on "\n" only and trimmed, as the seed counts them."""
    return sum(1 for line in _text(answer).split("\n") if line.strip(_JS_SPACE))


# --- json ---------------------------------------------------------------------------------


def _json_value_at(check: Check, answer: Answer) -> Any:
    try:
        document = extract_json(_text(answer))
    except ValueError:
        return _MISSING
    return value_at(document, check.path or "")


def _json_valid(check: Check, answer: Answer) -> bool:
    try:
        extract_json(_text(answer))
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


def _arguments(call: ToolCall) -> dict[str, Any] | None:
    """A call's arguments as a JSON object; None when they are no JSON object."""
    try:
        arguments = loads(call.arguments)  # NaN / Infinity are not JSON here either
    except ValueError:
        return None
    return arguments if isinstance(arguments, dict) else None


def _first_call_arg(check: Check, answer: Answer) -> Any:
    """Argument `check.arg` of the first tool call; `_MISSING` when the arguments are a JSON object
    without it, `_INVALID` when there is no call or its arguments are no JSON object."""
    arguments = _arguments(answer.tool_calls[0]) if answer.tool_calls else None
    if arguments is None:
        return _INVALID
    return arguments.get(check.arg or "", _MISSING)  # `arg` is required at load


def _tool_not_called(check: Check, answer: Answer) -> bool:
    if check.value is None:
        return not answer.tool_calls
    return all(call.name != check.value for call in answer.tool_calls)


def _tool_arg_equals(check: Check, answer: Answer) -> bool:
    value = _first_call_arg(check, answer)
    # As sent: "server.log\n" is another file than "server.log" (no stripping, as in the seed).
    return value is not _MISSING and value is not _INVALID and lenient_equal(value, check.value)


def _tool_arg_regex(check: Check, answer: Answer) -> bool:
    value = _first_call_arg(check, answer)
    if value is _INVALID:
        return False
    # Unlike `regex`, argument matching ignores case unless the check says otherwise; a missing
    # or `null` argument is matched as "" (the seed's `String(args[arg] ?? '')`: `??` reads null
    # as absent, and a model sending `null` sent no value).
    flags = _flags("i" if check.flags is None else check.flags)
    absent = value is _MISSING or value is None
    return re.search(str(check.value), "" if absent else text_form(value), flags) is not None


def _tool_calls_include(check: Check, answer: Answer) -> bool:
    # Any call of the answer, not only the first: the check of parallel calls, which come in
    # either order. Each expected argument compares as `tool_arg_equals` does (as sent); the call
    # may send more arguments than the check lists.
    name, expected = check.value["name"], check.value.get("arguments", {})
    for call in answer.tool_calls:
        arguments = _arguments(call) if call.name == name else None
        if arguments is not None and all(
            key in arguments and lenient_equal(arguments[key], value) for key, value in expected.items()
        ):
            return True
    return False


# Every check type of the DSL -> the function that decides it.
CHECKS: dict[str, Callable[[Check, Answer], bool]] = {
    "word_count": lambda c, a: len(_words(_text(a))) == c.value,
    "line_count": lambda c, a: _lines(a) == c.value,
    "first_word": lambda c, a: _word_at(c, a, 0),
    "last_word": lambda c, a: _word_at(c, a, -1),
    "contains": _contains,
    "not_contains": lambda c, a: not _contains(c, a),
    "regex": _regex,
    "not_regex": lambda c, a: not _regex(c, a),
    "not_empty": lambda c, a: bool(_text(a)),
    "json_valid": _json_valid,
    "json_path_equals": _json_path_equals,
    "json_path_type": _json_path_type,
    "json_path_length": _json_path_length,
    "tool_called": lambda c, a: bool(a.tool_calls) and a.tool_calls[0].name == c.value,
    "tool_not_called": _tool_not_called,
    "tool_arg_equals": _tool_arg_equals,
    "tool_arg_regex": _tool_arg_regex,
    "tool_call_count": lambda c, a: len(a.tool_calls) == c.value,
    "tool_calls_include": _tool_calls_include,
}
