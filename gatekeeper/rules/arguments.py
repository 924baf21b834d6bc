"""Argument rules (`tools.arguments`): the tier one call of a tool needs, read from its arguments.
Pure: no I/O.

    tools:
      arguments:
        execute_command:                     # a tool name or a shell-style pattern of names
          - match: {command: "ls *"}         # argument path -> what its value must be
            tier: small
          - match: {command: {regex: "git (status|log)( [a-z-]+)*"}}
            tier: small
        write_file:
          - match: {path: "/etc/*"}
            tier: large

A call needs the highest tier of the entries whose every listed argument matches, and the tool's
own requirement (`tools.required_tier`, else `tools.default_tier`) when none matches. A tool is
offered at the lowest tier some call of it needs.

What "matches" means is asymmetric, because a wrong answer costs differently each way:
  * an entry *below* the tool's own requirement (it lowers) matches only when the value is
    plainly what it says: every reading of the value matches (the value as sent; folded: NFKC,
    format characters removed, case folded; and, for a path, with `.`, `..` and `//` resolved),
    a shell-style wildcard never spans a shell control character (`;`, `&`, `|`, `` ` ``, `$`,
    `<`, `>`, `(`, `)`, line breaks, other control characters: a compound command is not the
    simple command a pattern names, unless the pattern writes the character itself), and no
    other key of the same object reads like the argument's key (`Command` beside `command`);
  * any other entry (it raises or keeps) matches when *some* reading does, including each simple
    command of a compound one (`ls && rm -rf /` is also read as `rm -rf /`) and any key that
    reads like the argument's key.
Arguments that are not one JSON object (invalid JSON, duplicate keys, NaN, a lone surrogate,
more than MAX_ARGUMENT_CHARS) need the highest tier of the tool's own and all its entries. A
value of another type where an entry expects a string (a pattern, a regex, `equals` a string)
matches a raising entry and never a lowering one; an argument the call does not have matches
nothing.
"""

from __future__ import annotations

import json
import posixpath
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gatekeeper.rules.tiers import Tier

# Arguments longer than this are not read (a regex over megabytes is a cost an upstream chooses):
# the call needs the strictest tier its rules name. Real calls are far shorter.
MAX_ARGUMENT_CHARS = 256 * 1024

JsonType = Literal["string", "integer", "number", "boolean", "null", "array", "object"]


class RegexMatch(BaseModel):
    """`{regex: R}`: the whole value matches the Python regular expression R."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    regex: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


class EqualsMatch(BaseModel):
    """`{equals: V}`: the value is V, as JSON (`1` is not `true`, `"1"` is not `1`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    equals: Any

    @field_validator("equals")
    @classmethod
    def _json(cls, value: Any) -> Any:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError("expected a JSON value (no NaN or infinity)") from None
        return value


class TypeMatch(BaseModel):
    """`{type: T}`: the value is of JSON type T (`integer`: written without a fraction or exponent;
    an integer is a `number` too; a boolean is neither)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: JsonType


_PATH_SEGMENT = re.compile(r"[^.\s]+")


class ArgumentRule(BaseModel):
    """One entry of `tools.arguments.<tool>`: when every listed argument matches, a call needs `tier`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    match: dict[str, str | RegexMatch | EqualsMatch | TypeMatch] = Field(min_length=1)
    tier: Tier

    @field_validator("match")
    @classmethod
    def _paths(cls, value: dict[str, Any]) -> dict[str, Any]:
        for path in value:
            if not all(_PATH_SEGMENT.fullmatch(part) for part in path.split(".")):
                raise ValueError(
                    f"{path!r}: an argument path is keys (or array positions) joined by '.', such as 'options.mode'"
                )
        return value


# -- reading values ---------------------------------------------------------------------------

# What a lowering entry's wildcard never spans: what makes one command several, or feeds it
# another's output (`;`, `&`, `|`, backticks, `$(...)` and `${...}`, redirections, subshells).
_SHELL_CONTROL = ";&|`$<>()"
# Control characters (C0 with \n and \r, DEL, C1 with NEL) and the Unicode line and paragraph separators.
_CONTROL_CLASS = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
_WILD = "[^" + re.escape(_SHELL_CONTROL) + _CONTROL_CLASS + "]"
# The operators a compound command is split on when a raising entry reads each part.
_COMMAND_SPLIT = re.compile(r"&&|\|\||[;&|`\n\r\x0b\x0c\x85\u2028\u2029]|\$\(|\)|<\(|>\(")


def strict_glob(pattern: str) -> re.Pattern[str]:
    """A shell-style pattern as a regex whose wildcards (`*`, `?`, `[!...]`) never match a shell
    control character or a line break; what the pattern writes literally matches itself."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(_WILD + "*")
        elif c == "?":
            out.append(_WILD)
        elif c == "[":
            j = i
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))  # an unclosed '[' is a literal, as in fnmatch
                continue
            body = pattern[i:j]
            i = j + 1
            if body[:1] in ("!", "^"):
                out.append("[^" + _class_body(body[1:]) + re.escape(_SHELL_CONTROL) + _CONTROL_CLASS + "]")
            else:
                out.append("[" + _class_body(body) + "]")
        else:
            out.append(re.escape(c))
    return re.compile("".join(out), re.DOTALL)


def _class_body(body: str) -> str:
    """A bracket expression's members for a regex class (ranges kept, everything else escaped)."""
    parts = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            parts.append(re.escape(body[k]) + "-" + re.escape(body[k + 2]))
            k += 3
        else:
            parts.append(re.escape(body[k]))
            k += 1
    return "".join(parts)


def fold(text: str) -> str:
    """A value as a lookalike test reads it: compatibility forms folded (NFKC: fullwidth
    letters, `；` becomes `;`), format characters removed (zero-width spaces and joiners, bidi
    marks, the BOM), every space separator a plain space, case folded. Control characters and
    line breaks stay: they are what makes a command compound."""
    folded = unicodedata.normalize("NFKC", text)
    kept = []
    for c in folded:
        category = unicodedata.category(c)
        if category == "Cf":
            continue
        kept.append(" " if category == "Zs" else c)
    return "".join(kept).casefold()


_SLASHES = re.compile(r"/{2,}")


def _path_reading(text: str) -> str:
    """The value with `.`, `..` and repeated slashes resolved, as a file system would read a
    path in it (`/tmp/../etc/passwd` is `/etc/passwd`); unchanged when it has no slash."""
    if "/" not in text:
        return text
    resolved = posixpath.normpath(_SLASHES.sub("/", text))  # normpath keeps a leading `//`
    # A value naming a directory (`/etc/`, `//etc/.`) keeps its last slash: `/etc/*` reaches it.
    return resolved + "/" if text.endswith(("/", "/.", "/..")) and not resolved.endswith("/") else resolved


def readings(text: str) -> tuple[str, str, str]:
    """The value as sent, folded, and path-resolved (of the folded form)."""
    folded = fold(text)
    return text, folded, _path_reading(folded) if folded != text else _path_reading(text)


def commands(text: str) -> list[str]:
    """The simple commands of a (possibly compound) shell command, stripped, empty ones left out."""
    return [part.strip() for part in _COMMAND_SPLIT.split(text) if part.strip()]


# -- matching one value -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Matcher:
    """One `match` value, compiled for both ways of matching."""

    kind: Literal["glob", "regex", "equals", "type"]
    source: Any
    strict: re.Pattern[str] | None = None  # glob: wildcards stop at shell control; regex: as written
    folded: re.Pattern[str] | None = None  # regex: case-insensitive, for the folded reading

    @classmethod
    def of(cls, spec: str | RegexMatch | EqualsMatch | TypeMatch) -> _Matcher:
        if isinstance(spec, str):
            return cls("glob", spec, strict_glob(spec), strict_glob(fold(spec)))
        if isinstance(spec, RegexMatch):
            return cls("regex", spec.regex, re.compile(spec.regex), re.compile(spec.regex, re.IGNORECASE))
        if isinstance(spec, EqualsMatch):
            return cls("equals", spec.equals)
        return cls("type", spec.type)

    def expects_string(self) -> bool:
        return self.kind in ("glob", "regex") or (self.kind == "equals" and isinstance(self.source, str))

    def strictly(self, value: Any) -> bool:
        """Does `value` plainly match (every reading, wildcards stopping at shell control)?"""
        if self.kind == "type":
            return is_type(value, self.source)
        if self.kind == "equals":
            return same_json(value, self.source)
        if not isinstance(value, str):
            return False
        assert self.strict is not None and self.folded is not None
        raw, folded, resolved = readings(value)
        return all(
            p.fullmatch(r) is not None for p, r in ((self.strict, raw), (self.folded, folded), (self.folded, resolved))
        )

    def loosely(self, value: Any) -> bool:
        """Could `value` be read as matching (some reading, or some simple command of it)?"""
        if self.kind == "type":
            return is_type(value, self.source)
        if not isinstance(value, str):
            return self.expects_string() or same_json(value, self.source)
        if self.kind == "equals":
            if not isinstance(self.source, str):
                return False
            wanted = readings(self.source)
            return value == self.source or any(r in wanted for r in readings(value)[1:])
        candidates = {*readings(value)}
        for command in commands(value):
            candidates.update(readings(command))
        if self.kind == "glob":
            pattern, folded_pattern = self.source, fold(self.source)
            return any(fnmatchcase(c, pattern) or fnmatchcase(c, folded_pattern) for c in candidates)
        assert self.strict is not None and self.folded is not None
        return any(self.strict.fullmatch(c) or self.folded.fullmatch(c) for c in candidates)


def is_type(value: Any, wanted: str) -> bool:
    """Is `value` of the JSON type `wanted` (an integer is a number too)?"""
    found = json_type(value)
    return found == wanted or (wanted == "number" and found == "integer")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: types compared too (Python's `True == 1` is not JSON's)."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _values(arguments: Any, path: tuple[str, ...], loose: bool) -> list[Any] | None:
    """The values at `path` in the arguments: one, exactly keyed (None when a lookalike key sits
    beside it: `Command` beside `command` is a doubt a lowering entry does not take); loosely,
    every value whose keys read alike (`Path`, `pa\u200bth`)."""
    found = [arguments]
    for part in path:
        deeper: list[Any] = []
        for node in found:
            if isinstance(node, dict):
                alike = [k for k in node if k == part or fold(k).strip() == fold(part)]
                if not loose and alike != [part] and part in node:
                    return None
                deeper += [node[k] for k in alike] if loose else ([node[part]] if part in node else [])
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                deeper.append(node[int(part)])
        found = deeper
    return found


# -- judging one call -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One compiled `{match, tier}` entry; `rule` is the `tools.arguments` key it came from."""

    rule: str
    match: tuple[tuple[tuple[str, ...], _Matcher], ...]
    tier: Tier

    def matches(self, arguments: dict[str, Any], lowering: bool) -> bool:
        for path, matcher in self.match:
            values = _values(arguments, path, loose=not lowering)
            if not values:
                return False
            if lowering and not all(matcher.strictly(v) for v in values):
                return False
            if not lowering and not any(matcher.loosely(v) for v in values):
                return False
        return True


class Invalid(ValueError):
    """Arguments that cannot be judged as one JSON object."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise Invalid("duplicate key")
    return found


def _no_constant(name: str) -> Any:
    raise Invalid(f"{name} is not JSON")


def parse_arguments(arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """A call's arguments as one JSON object; raises Invalid for anything a client's reader
    could take another way (duplicate keys, NaN, lone surrogates) or that is not an object."""
    if arguments is None:
        raise Invalid("no arguments")
    try:
        text = json.dumps(arguments, allow_nan=False) if isinstance(arguments, Mapping) else arguments
    except (TypeError, ValueError):
        raise Invalid("not JSON") from None
    if len(text) > MAX_ARGUMENT_CHARS:
        raise Invalid("too long")
    try:
        text.encode("utf-8")  # a lone surrogate: decoded one way here, another way elsewhere
        parsed = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")  # an escaped lone surrogate (`\\ud800`)
    except (ValueError, UnicodeError) as exc:
        raise Invalid(str(exc)) from None
    if not isinstance(parsed, dict):
        raise Invalid("not an object")
    return parsed


def call_tier(entries: Sequence[Entry], own: Tier, arguments: str | Mapping[str, Any] | None) -> Tier:
    """The tier one call needs: the highest of the entries that match its arguments, `own` when
    none does, the strictest there is when the arguments cannot be judged."""
    try:
        parsed = parse_arguments(arguments)
    except Invalid:
        return strictest(entries, own)
    matched = [e.tier for e in entries if e.matches(parsed, lowering=e.tier.rank < own.rank)]
    return max(matched, key=lambda t: t.rank) if matched else own


def strictest(entries: Sequence[Entry], own: Tier) -> Tier:
    return max([own, *(e.tier for e in entries)], key=lambda t: t.rank)


def lowest(entries: Sequence[Entry], own: Tier) -> Tier:
    """The lowest tier some call may need: where the tool is offered."""
    return min([own, *(e.tier for e in entries)], key=lambda t: t.rank)


class ArgumentRules:
    """`tools.arguments`, compiled: which entries apply to a tool, by every name that covers it
    (exact keys and shell-style patterns alike; the entries of every key that matches apply).

    A name that only *reads* like a key (`EXECUTE_COMMAND`, `execute_command\u200b`) is a doubt:
    `doubt(names)` gives the strictest tier of those keys' entries, which such a call needs
    whatever its arguments (a lowering entry is never reached through a lookalike)."""

    def __init__(self, rules: Mapping[str, Sequence[ArgumentRule]] | None = None) -> None:
        self._rules = [
            (
                key,
                fold(key),
                tuple(
                    Entry(
                        key,
                        tuple((tuple(path.split(".")), _Matcher.of(spec)) for path, spec in rule.match.items()),
                        rule.tier,
                    )
                    for rule in rules_of_key
                ),
            )
            for key, rules_of_key in (rules or {}).items()
        ]

    def __bool__(self) -> bool:
        return bool(self._rules)

    def keys(self) -> list[str]:
        return [key for key, _, _ in self._rules]

    def entries(self, names: Sequence[str], any_group: bool = False) -> tuple[tuple[Entry, ...], Tier | None]:
        """(the entries of every key some name matches, the strictest tier of the keys some name
        only reads like, or None). `any_group`: `names` are an MCP tool's (group, `group.tool`,
        bare name) whose server may be any: a `server.tool` key whose tool part matches the bare
        name is a doubt too."""
        found: list[Entry] = []
        doubt: Tier | None = None
        bare = names[-1]
        for key, folded_key, entries in self._rules:
            if any(fnmatchcase(name, key) for name in names):
                found.extend(entries)
            elif any(fnmatchcase(fold(name), folded_key) for name in names) or (
                any_group and "." in key and fnmatchcase(fold(bare), folded_key.partition(".")[2])
            ):
                top = max((e.tier for e in entries), key=lambda t: t.rank)
                doubt = top if doubt is None or top.rank > doubt.rank else doubt
        return tuple(found), doubt


# -- the schema offered to the model ----------------------------------------------------------

# Characters a JSON Schema `pattern` (ECMA-262) reads as syntax, escaped in a pattern made from a
# shell-style one; the wildcard as a class that stops where a lowering entry's wildcard stops.
_ECMA_SPECIAL = frozenset("\\^$.|?*+()[]{}/")
_ECMA_WILD = "[^;&|`$<>()\\x00-\\x1f\\x7f]"


def _ecma_literal(text: str) -> str:
    return "".join("\\" + c if c in _ECMA_SPECIAL else c for c in text)


def _ecma(matcher: _Matcher) -> str | None:
    """A matcher as an ECMA-262 regex body (None when it has none): what the model is told."""
    if matcher.kind == "regex":
        return str(matcher.source)
    if matcher.kind == "equals":
        return _ecma_literal(matcher.source) if isinstance(matcher.source, str) else None
    if matcher.kind != "glob" or "[" in matcher.source:
        return None  # a bracket expression is not worth a second translation: not narrowed
    return "".join(
        _ECMA_WILD + "*" if c == "*" else _ECMA_WILD if c == "?" else _ecma_literal(c) for c in matcher.source
    )


def narrowed_schema(schema: Mapping[str, Any], admitting: Sequence[Entry]) -> dict[str, Any] | None:
    """The tool's argument schema narrowed to what `admitting` (the entries that admit a call at
    the model's tier, when the tool's own requirement does not) lets through, or None when that
    cannot be said in the schema: every entry names one top-level argument, the same one, by
    `equals` (an `enum`, a `const`) or by patterns and strings (a `pattern`). Only a hint to the
    model: every call is still judged on its arguments."""
    if not admitting or any(len(e.match) != 1 for e in admitting):
        return None
    paths = {e.match[0][0] for e in admitting}
    properties = schema.get("properties")
    if len(paths) != 1 or schema.get("type", "object") != "object" or not isinstance(properties, dict):
        return None
    (path,) = paths
    if len(path) != 1:
        return None
    matchers = [e.match[0][1] for e in admitting]
    constraint: dict[str, Any]
    if all(m.kind == "equals" for m in matchers):
        values = [m.source for m in matchers]
        constraint = {"const": values[0]} if len(values) == 1 else {"enum": values}
    else:
        bodies = [_ecma(m) for m in matchers]
        if any(b is None for b in bodies):
            return None
        constraint = {"type": "string", "pattern": "^(?:" + "|".join(f"(?:{b})" for b in bodies if b) + ")$"}
    name = path[0]
    own = properties.get(name)
    required = list(schema.get("required") or [])
    return {
        **schema,
        "properties": {**properties, name: {**(own if isinstance(own, dict) else {}), **constraint}},
        "required": required if name in required else [*required, name],
    }
