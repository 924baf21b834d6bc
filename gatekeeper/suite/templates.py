"""Randomised tests: a suite file's `vars`, drawn per measurement and rendered into the test.

A file may declare variables at the top level and use them as `{{name}}` or as simple integer
arithmetic (`{{n + 3}}`, `{{a * b - 1}}`) in any string of the test: prompts, tool results,
tool schemas, check values and expected arguments. Kinds of variable:

    {"choice": ["A-1", "A-2"]}     one of the values
    {"int": [2, 99]}               an integer in the range, both ends included
    {"id": "CUS-#####"}            each `#` a random digit, each `?` a random capital letter
    {"word": [4, 7]}               a pronounceable made-up lowercase word of that many letters

Choices, ids and words of one file never repeat an earlier variable's value, so two ids in a
chain are always two different ids. A string that is exactly one placeholder takes the value's
own type (`"value": "{{n}}"` is the number n), so number checks stay number checks; inside a
longer string a value is written as text. Rendering is a pure function of (file, seed): the
same seed gives the same instance on any machine (`random.Random` seeded with a string).
"""

from __future__ import annotations

import ast
import random
import re
import string
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

_PLACEHOLDER = re.compile(r"\{\{([^{}]*)\}\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Keys whose values identify a test and so are never rendered.
_FIXED_KEYS = frozenset({"name", "category", "weight"})
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_DISTINCT_TRIES = 200


class TemplateError(ValueError):
    """A `vars` declaration or a placeholder is wrong; the message names the variable and where."""


class VarSpec(BaseModel):
    """One variable of a suite file: exactly one of the four kinds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    choice: list[str | int | float] | None = Field(default=None, min_length=1)
    int_range: tuple[int, int] | None = Field(default=None, alias="int")
    id: str | None = None
    word: tuple[int, int] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> VarSpec:
        kinds = [k for k in ("choice", "int_range", "id", "word") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of 'choice', 'int', 'id', 'word'")
        if self.int_range is not None and self.int_range[0] > self.int_range[1]:
            raise ValueError(f"'int' range is empty: {list(self.int_range)}")
        if self.word is not None and not 1 <= self.word[0] <= self.word[1]:
            raise ValueError(f"'word' needs [min, max] lengths with 1 <= min <= max, got {list(self.word)}")
        if self.id is not None and "#" not in self.id and "?" not in self.id:
            raise ValueError(f"'id' pattern {self.id!r} has no '#' (digit) or '?' (letter) to draw")
        return self

    @property
    def is_int(self) -> bool:
        return self.int_range is not None or (
            self.choice is not None and all(isinstance(v, int) and not isinstance(v, bool) for v in self.choice)
        )

    def draw(self, rng: random.Random, taken: set[str]) -> Any:
        """One value; a string value avoids `taken` (values of earlier variables of the file)."""
        if self.int_range is not None:
            return rng.randint(*self.int_range)
        if self.choice is not None:
            free = [v for v in self.choice if not isinstance(v, str) or v not in taken]
            return rng.choice(free or self.choice)
        make: Callable[[random.Random], str] = self._id if self.id is not None else self._word
        value = ""
        for _ in range(_DISTINCT_TRIES):
            value = make(rng)
            if value not in taken:
                return value
        return value

    def _id(self, rng: random.Random) -> str:
        assert self.id is not None
        return "".join(
            rng.choice(string.digits) if c == "#" else rng.choice(string.ascii_uppercase) if c == "?" else c
            for c in self.id
        )

    def _word(self, rng: random.Random) -> str:
        assert self.word is not None
        length = rng.randint(*self.word)
        start = rng.randrange(2)
        return "".join(rng.choice(_CONSONANTS if (i + start) % 2 == 0 else _VOWELS) for i in range(length))


@dataclass(frozen=True)
class Template:
    """A test file with `vars`: the raw test (without `vars`) and its variables, in file order."""

    raw: dict[str, Any]
    vars: dict[str, VarSpec]

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Template:
        """Split `vars` off a file's content and check every placeholder; raise TemplateError."""
        declared = data.get("vars")
        if not isinstance(declared, dict) or not declared:
            raise TemplateError("vars: expected a non-empty object of variables")
        specs: dict[str, VarSpec] = {}
        for name, spec in declared.items():
            if not _NAME.match(name):
                raise TemplateError(f"vars.{name}: a variable name is letters, digits and '_'")
            if not isinstance(spec, dict):
                raise TemplateError(f'vars.{name}: expected an object such as {{"int": [1, 9]}}')
            try:
                specs[name] = VarSpec.model_validate(spec)
            except ValidationError as exc:
                reason = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
                raise TemplateError(f"vars.{name}: {reason}") from None
        template = cls({k: v for k, v in data.items() if k != "vars"}, specs)
        used = template._check_placeholders()
        unused = [name for name in specs if name not in used]
        if unused:
            raise TemplateError(f"vars.{unused[0]}: declared but never used in the test")
        return template

    def draw(self, seed: str) -> dict[str, Any]:
        """The variables' values for one instance."""
        rng = random.Random(seed)
        values: dict[str, Any] = {}
        for name, spec in self.vars.items():
            values[name] = spec.draw(rng, {v for v in values.values() if isinstance(v, str)})
        return values

    def render(self, values: dict[str, Any]) -> dict[str, Any]:
        """The test's content with every placeholder replaced (a plain suite-file dict)."""
        rendered: dict[str, Any] = _render(self.raw, values, "")
        return rendered

    def _check_placeholders(self) -> set[str]:
        used: set[str] = set()
        for where, text in _strings(self.raw, ""):
            if "{{" in text and text.count("{{") != len(_PLACEHOLDER.findall(text)):
                raise TemplateError(f"{where}: '{{{{' without a matching '}}}}'")
            for expression in _PLACEHOLDER.findall(text):
                used |= _names(expression, self.vars, where)
        return used


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every (path, string) of a JSON value that rendering touches."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if not (where == "" and key in _FIXED_KEYS):
                yield from _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}[{i}]")


def _render(value: Any, values: dict[str, Any], where: str) -> Any:
    if isinstance(value, str):
        whole = _PLACEHOLDER.fullmatch(value)
        if whole is not None:
            return _evaluate(whole.group(1), values)
        return _PLACEHOLDER.sub(lambda m: _text(_evaluate(m.group(1), values)), value)
    if isinstance(value, dict):
        return {
            k: v if (where == "" and k in _FIXED_KEYS) else _render(v, values, f"{where}.{k}") for k, v in value.items()
        }
    if isinstance(value, list):
        return [_render(item, values, where) for item in value]
    return value


def _text(value: Any) -> str:
    return str(value)


# --- expressions: a variable, or integer arithmetic over variables and integer literals ------

_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


# CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state: two threads
# parsing at once can raise "SystemError: AST constructor recursion depth mismatch" (python/cpython
# gh-106905, pytest-dev/pytest#10763; seen here when a suite loaded in a proxy's thread while
# another loaded in the test's), so this module's parses take turns.
_AST_LOCK = threading.Lock()


def _parse(expression: str, where: str) -> ast.expr:
    try:
        with _AST_LOCK:
            tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        raise TemplateError(f"{where}: cannot read template '{{{{{expression}}}}}'") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Load)) or type(node) in _OPS:
            continue
        if isinstance(node, (ast.USub, ast.UAdd)):
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            continue
        raise TemplateError(f"{where}: template '{{{{{expression}}}}}' may only use variables, integers and + - * // %")
    return tree


def _names(expression: str, specs: dict[str, VarSpec], where: str) -> set[str]:
    tree = _parse(expression, where)
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    for name in sorted(names):
        if name not in specs:
            raise TemplateError(f"{where}: template '{{{{{expression}}}}}' uses unknown variable {name!r}")
    if not isinstance(tree, ast.Name):
        for name in sorted(names):
            if not specs[name].is_int:
                raise TemplateError(
                    f"{where}: template '{{{{{expression}}}}}' does arithmetic on variable "
                    f"{name!r}, which is not an integer"
                )
    return names


def _evaluate(expression: str, values: dict[str, Any]) -> Any:
    try:
        return _eval(_parse(expression, "?"), values)
    except ZeroDivisionError:
        raise TemplateError(f"template '{{{{{expression}}}}}' divides by zero") from None


def _eval(node: ast.expr, values: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        return _OPS[type(node.op)](_eval(node.left, values), _eval(node.right, values))
    raise TemplateError(f"unexpected {type(node).__name__} in a template")
