"""Lenient JSON extraction: find the first JSON value in a model's answer and repair it.

Small models wrap JSON in markdown fences, add prose around it, leave trailing
commas, put raw newlines inside strings or stop before the closing brackets. The
json checks measure whether the model produced the right *data*, so these slips
are repaired here instead of failing every check of the test.
"""

from __future__ import annotations

import json
import re
from typing import Any

# An opening fence with an optional language tag, up to the closing fence or the
# end of the text (a truncated answer may never close its fence).
_FENCE = re.compile(r"```[\w+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_CLOSER = {"{": "}", "[": "]"}
_CONTROL_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_SPACES = re.compile(r"\s*")
# What may follow an opening bracket in JSON (after whitespace). Checking it first skips
# prose such as "[see above]" without scanning to its end, which keeps long answers cheap.
_VALUE_START = {"{": '"}', "[": '"{[]-0123456789tfn'}


def loads(text: str) -> Any:
    """`json.loads` without the extensions Python allows: `NaN`, `Infinity` and `-Infinity` are
    not JSON (no other parser of the answer would accept them), so they raise ValueError."""
    return json.loads(text, parse_constant=_not_json)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def extract_json(text: str) -> Any:
    """Return the first JSON object or array in `text`, repaired; raise ValueError if there is none.

    A bare scalar (`42`, `"ok"`, `true`) is accepted only when it is the whole text
    (or the whole content of a fenced block). Fenced blocks are searched before the
    surrounding prose; within a region every `{` / `[` is tried in order, so prose
    such as "see [above]" before the JSON does not hide it. A bracketed value that is not
    JSON (single quotes, `True`, comments, unquoted keys) is not rescued by a valid fragment
    inside it: the search resumes after its end, so `{'tags': []}` holds no JSON at all.
    A list of numbers followed by more prose is a citation or a number in brackets (`Note [1]:
    {"total": 56}`, `See [2].`) and is read past, as the seed never takes it for the answer; one
    that ends the answer (`The ids: [3, 5]`) is the answer, as in the seed.
    """
    if not text or not text.strip():
        raise ValueError("empty answer")
    regions = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    first_error: str | None = None
    for region in regions:
        try:
            return loads(region.strip())
        except ValueError:
            pass
        resume = 0  # brackets before this index lie inside a value that failed
        for start, char in enumerate(region):
            if start < resume or char not in _CLOSER:
                continue
            if not _plausible_start(region, start):
                resume = _balanced_end(region, start)
                continue
            candidate, end = _repair(region, start)
            try:
                value = loads(candidate)
            except ValueError as exc:
                first_error = first_error or f"no valid JSON at offset {start}: {exc}"
                resume = end
                continue
            if _citation(value) and region[end:].strip().strip("}]"):  # a stray closer is no prose
                resume = end  # "Note [1]: {...}", "steps [2, 3] show": prose, read past it
                continue
            return value
    raise ValueError(first_error or "no JSON object or array in the answer")


def _citation(value: Any) -> bool:
    """A bracketed list of numbers (`[1]`, `[2, 3]`, `[]`): in running prose a citation, a range or
    a footnote, not the data asked for."""
    return isinstance(value, list) and all(
        isinstance(item, (int, float)) and not isinstance(item, bool) for item in value
    )


def _balanced_end(text: str, start: int) -> int:
    """Where the bracketed span opening at `start` closes (double-quoted strings are opaque),
    or `start + 1` when it never closes: an unbalanced bracket in prose hides nothing."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        char = text[i]
        if in_string:
            in_string, escaped = _string_step(char, escaped)
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return start + 1


def _string_step(char: str, escaped: bool) -> tuple[bool, bool]:
    """One character inside a double-quoted string: (still inside it, the next one escaped)."""
    if escaped:
        return True, False
    return char != '"', char == "\\"


def _plausible_start(text: str, start: int) -> bool:
    """True when the bracket at `start` is followed by something JSON allows there.

    A bracket that ends the text is not a start: repairing a lone `{` into `{}` would
    credit an answer that holds no data.
    """
    spaces = _SPACES.match(text, start + 1)  # zero or more: always a match
    after = spaces.end() if spaces else start + 1
    return after < len(text) and text[after] in _VALUE_START[text[start]]


def repair(text: str, start: int) -> str:
    """The JSON value opening at `text[start]`, cut where it balances and repaired.

    Repairs: raw control characters inside strings are escaped, trailing commas are
    dropped, and a value cut short is closed (open string, then open brackets).
    """
    return _repair(text, start)[0]


def _repair(text: str, start: int) -> tuple[str, int]:
    """`repair`, and the index in `text` just past the span it used."""
    out: list[str] = []
    stack: list[str] = []
    in_string = escaped = False
    end = len(text)
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            raw = char < " " and not escaped  # escaped: a backslash then a raw control stays as written
            in_string, escaped = _string_step(char, escaped)
            out.append(_CONTROL_ESCAPES.get(char, f"\\u{ord(char):04x}") if raw else char)
        elif char == '"':
            in_string = True
            out.append(char)
        elif char in _CLOSER:
            stack.append(_CLOSER[char])
            out.append(char)
        elif char in "}]":
            if char != stack[-1]:
                end = index
                break  # mismatched closer: cut here, the end repair closes what is open
            _close(out, stack.pop())
            if not stack:
                end = index + 1
                break
        else:
            out.append(char)
    if in_string:
        if escaped:
            out.pop()  # a dangling backslash would escape the quote we add
        out.append('"')
    while stack:
        _close(out, stack.pop())
    return "".join(out), end


def _close(out: list[str], closer: str) -> None:
    """Append `closer`, first dropping a trailing comma (outside strings) before it."""
    i = len(out) - 1
    while i >= 0 and out[i].isspace():
        i -= 1
    if i >= 0 and out[i] == ",":
        del out[i]
    out.append(closer)
