"""The benchmark suite: one JSON file per test, validated on load, hashed as a whole."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from gatekeeper.errors import SuiteError
from gatekeeper.suite.templates import Template, TemplateError

# The project's own suite, shipped as package data (gatekeeper/benchmarks: in the repository a
# symlink to the top-level benchmarks/). A Path because the loader and the hash read files; the
# package is always installed as files (wheel, editable or checkout), never imported from a zip.
DEFAULT_SUITE_DIR = Path(str(resources.files("gatekeeper") / "benchmarks"))

# Bumped when the meaning of a score changes: every stored profile becomes invalid.
# 2: NaN/Infinity are not JSON, no rescue of a malformed value by an inner fragment,
#    json_path_length counts arrays only, tool arguments compare as sent, reasoning removed.
# 3: the tier is certified on lower bounds at bench.risk (valid at any stopping time); a list of
#    numbers in prose (a citation) is not JSON.
# 4: the bound treats a sample as one draw (tests within it may fail together): version 3's bound
#    counted them as independent evidence and could certify `large` for such a model too often.
BENCHMARK_VERSION = 4

Category = Literal["instruction", "json", "toolCalling"]
CATEGORIES: tuple[Category, ...] = ("instruction", "json", "toolCalling")

# The longest answer a step of a test needs, in completion tokens, when its file gives no
# `maxTokens`: an answer that runs past it is a failed answer (never an unfinished measurement).
# About four times the longest answer the default suite asks of its category (a 9-word sentence
# or six one-word lines; the nested JSON object, ~70 tokens; a call whose argument holds a short
# paragraph, ~50), so a model that answers as asked is never cut.
ANSWER_TOKENS: dict[str, int] = {"instruction": 128, "json": 320, "toolCalling": 256}

CheckType = Literal[
    "word_count",
    "line_count",
    "first_word",
    "last_word",
    "contains",
    "not_contains",
    "regex",
    "not_regex",
    "not_empty",
    "json_valid",
    "json_path_equals",
    "json_path_type",
    "json_path_length",
    "tool_called",
    "tool_not_called",
    "tool_arg_equals",
    "tool_arg_regex",
    "tool_call_count",
    "tool_calls_include",
]

# Every check type names what it expects (`value`) but these three, which judge the answer alone
# (tool_not_called without a value: no tool called at all).
_NEEDS_VALUE = set(get_args(CheckType)) - {"not_empty", "json_valid", "tool_not_called"}
_NEEDS_PATH = {"json_path_equals", "json_path_type", "json_path_length"}
_NEEDS_ARG = {"tool_arg_equals", "tool_arg_regex"}
_REGEX = {"regex", "not_regex", "tool_arg_regex"}
_COUNTS = {"word_count", "line_count", "json_path_length", "tool_call_count"}
# What a `tool_calls_include` value holds: the tool's name and, optionally, arguments it must send.
_CALL_KEYS = {"name", "arguments"}
REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "u": 0, "g": 0}
JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")
# One path segment: `[2]`, or a key (`.name`, or `name` at the very start).
_PATH_SEGMENT = re.compile(r"\[(\d+)\]|(\.?)([^.\[\]]+)")


def parse_path(path: str) -> list[str | int]:
    """Split a json path (`items[0].name`, `a.b[1][2]`, `[0].x`) into keys and indexes."""
    parts: list[str | int] = []
    pos = 0
    while pos < len(path):
        match = _PATH_SEGMENT.match(path, pos)
        # A key needs its dot, except as the first segment (where a dot is an error).
        if match is None or (match.group(3) is not None and bool(match.group(2)) == (pos == 0)):
            raise ValueError(f"bad path {path!r} at character {pos}")
        parts.append(int(match.group(1)) if match.group(1) is not None else match.group(3))
        pos = match.end()
    if not parts:
        raise ValueError("empty path")
    return parts


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Check(_Strict):
    type: CheckType
    value: Any = None
    arg: str | None = None
    path: str | None = None
    flags: str | None = None
    weight: float = Field(default=1, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _fields_match_type(self) -> Check:
        if self.type in _NEEDS_VALUE and self.value is None:
            raise ValueError(f"check {self.type!r} needs a 'value'")
        if self.type in _NEEDS_PATH:
            if not self.path:
                raise ValueError(f"check {self.type!r} needs a 'path'")
            parse_path(self.path)
        if self.type == "json_path_type" and self.value not in JSON_TYPES:
            raise ValueError(f"json_path_type value must be one of {', '.join(JSON_TYPES)}, got {self.value!r}")
        if self.type in _NEEDS_ARG and not self.arg:
            raise ValueError(f"check {self.type!r} needs an 'arg'")
        if self.type in _COUNTS and (isinstance(self.value, bool) or not isinstance(self.value, int)):
            raise ValueError(f"check {self.type!r} needs an integer 'value', got {self.value!r}")
        if self.type == "tool_call_count" and self.value < 0:
            raise ValueError(f"check 'tool_call_count' needs a 'value' >= 0, got {self.value!r}")
        if self.type == "tool_calls_include":
            _check_call_value(self.value)
        if self.flags is not None and set(self.flags) - REGEX_FLAGS.keys():
            raise ValueError(f"unknown regex flags {self.flags!r} (allowed: i, m, s, x, u, g)")
        if self.type in _REGEX:
            try:
                re.compile(str(self.value))
            except re.error as exc:
                raise ValueError(f"bad regex {self.value!r}: {exc}") from None
        return self


def _check_call_value(value: Any) -> None:
    """A `tool_calls_include` value: {"name": TOOL} or {"name": TOOL, "arguments": {ARG: VALUE}}."""
    shape = '{"name": TOOL, "arguments": {ARG: VALUE, ...}} (arguments optional)'
    if not isinstance(value, dict):
        raise ValueError(f"check 'tool_calls_include' needs a 'value' object {shape}, got {value!r}")
    unknown = sorted(value.keys() - _CALL_KEYS)
    if unknown:
        raise ValueError(f"check 'tool_calls_include': unknown key {unknown[0]!r} in 'value' (expected {shape})")
    if not isinstance(value.get("name"), str) or not value["name"]:
        raise ValueError(f"check 'tool_calls_include' needs a tool 'name' in its 'value' {shape}")
    if not isinstance(value.get("arguments", {}), dict):
        raise ValueError(f"check 'tool_calls_include': 'arguments' must be an object, got {value['arguments']!r}")


class Step(_Strict):
    prompt: str | None = None
    tool_result: str | None = Field(default=None, alias="toolResult")
    checks: list[Check] = Field(min_length=1)  # a step without checks would score 0 whatever the answer

    @model_validator(mode="after")
    def _has_input(self) -> Step:
        if self.prompt is None and self.tool_result is None:
            raise ValueError("a step needs a 'prompt' or a 'toolResult'")
        return self


class BenchTest(_Strict):
    name: str = Field(min_length=1)
    description: str | None = None
    category: Category
    weight: float = Field(default=1, gt=0, allow_inf_nan=False)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    prompt: str | None = None
    checks: list[Check] | None = Field(default=None, min_length=1)
    steps: list[Step] | None = Field(default=None, min_length=1)
    # The longest answer one step needs (tokens); absent: its category's ANSWER_TOKENS.
    max_tokens: int | None = Field(default=None, alias="maxTokens", ge=1, le=1_000_000)
    # The drawn values of a randomised test's variables (empty for a fixed test).
    _bindings: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def bindings(self) -> dict[str, Any]:
        return self._bindings

    @model_validator(mode="after")
    def _one_form(self) -> BenchTest:
        if self.steps is not None:
            if self.prompt is not None or self.checks is not None:
                raise ValueError("use either 'prompt'+'checks' or 'steps', not both")
            if not self.steps:
                raise ValueError("'steps' is empty")
            if self.steps[0].prompt is None:
                raise ValueError("the first step needs a 'prompt'")
            if self.steps[0].tool_result is not None:
                raise ValueError("the first step cannot carry a 'toolResult': no tool was called yet")
        elif self.prompt is None:
            raise ValueError("missing 'prompt' (or 'steps')")
        elif self.checks is None:
            raise ValueError("missing 'checks'")
        for i, tool in enumerate(self.tools):
            function = tool.get("function") if tool.get("type") == "function" else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(name, str) or not name:
                raise ValueError(f"tools[{i}] is not an OpenAI function tool with a name")
        return self

    @property
    def answer_tokens(self) -> int:
        """The longest answer a step of this test needs: what a benchmark call of it may spend."""
        return self.max_tokens if self.max_tokens is not None else ANSWER_TOKENS[self.category]

    @property
    def all_steps(self) -> list[Step]:
        """The test as a list of steps (the short form is one step)."""
        if self.steps is not None:
            return self.steps
        return [Step(prompt=self.prompt, checks=self.checks or [])]


@dataclass(frozen=True)
class Suite:
    """The loaded suite. `tests` holds fixed tests as written and randomised ones as drawn with
    `PREVIEW_SEED` (for listing and validation); a measurement draws its own with `instance`."""

    tests: tuple[BenchTest, ...]
    hash: str
    version: int = BENCHMARK_VERSION
    templates: dict[str, Template] = field(default_factory=dict)  # test name -> template

    @property
    def randomised(self) -> bool:
        return bool(self.templates)

    def by_category(self, category: str) -> list[BenchTest]:
        return [t for t in self.tests if t.category == category]

    def instance(self, seed: int, sample: int = 0) -> tuple[BenchTest, ...]:
        """The tests of one measurement sample: randomised tests drawn from (seed, sample, test
        name), so a recorded `instanceSeed` replays every sample exactly; fixed tests as written."""
        if not self.templates:
            return self.tests
        return tuple(
            instantiate(self.templates[t.name], t.name, f"{seed}/{sample}/{t.name}") if t.name in self.templates else t
            for t in self.tests
        )


# The draw used for `Suite.tests` and for validating a randomised file at load.
PREVIEW_SEED = "preview"


def instantiate(template: Template, where: str, seed: str) -> BenchTest:
    """One concrete test of a template; SuiteError (naming `where`) if the rendering is invalid."""
    return render_test(template, where, template.draw(seed))


def render_test(template: Template, where: str, values: dict[str, Any]) -> BenchTest:
    """The template rendered with these variable values, validated like any suite file."""
    try:
        test = BenchTest.model_validate(template.render(values), by_alias=True, by_name=False)
    except TemplateError as exc:
        raise SuiteError(f"{where}: {exc}") from None
    except ValidationError as exc:
        drawn = ", ".join(f"{k}={v!r}" for k, v in values.items())
        raise SuiteError(f"{where}: with vars {drawn}: {_describe(exc)}") from None
    test._bindings = dict(values)
    return test


def suite_files(directory: Path) -> list[Path]:
    return sorted((p for p in Path(directory).glob("*.json") if p.is_file()), key=lambda p: p.name)


def suite_hash(directory: str | Path) -> str:
    """First 8 hex chars of MD5 over each *.json file (sorted by name): its name, then its bytes."""
    digest = hashlib.md5()
    for path in suite_files(Path(directory)):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:8]


def load_test(path: Path) -> tuple[BenchTest, Template | None]:
    """A test file -> its test (for a randomised file, the preview draw) and its template if any."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SuiteError(f"{path}: malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: expected a JSON object, got {type(data).__name__}")
    if "vars" in data:
        try:
            template = Template.parse(data)
        except TemplateError as exc:
            raise SuiteError(f"{path}: {exc}") from None
        # A second draw catches more values that break a check (a choice that is no valid regex ...).
        instantiate(template, str(path), f"{PREVIEW_SEED}-2")
        return instantiate(template, str(path), PREVIEW_SEED), template
    try:
        # Files must use the DSL's key names (`toolResult`), not the Python field names (`tool_result`).
        return BenchTest.model_validate(data, by_alias=True, by_name=False), None
    except ValidationError as exc:
        raise SuiteError(f"{path}: {_describe(exc)}") from None


def load_suite(directory: str | Path) -> Suite:
    """Load and validate every test file; raise SuiteError("FILE: what is wrong") on the first bad one."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SuiteError(f"{directory}: not a directory")
    files = suite_files(directory)
    if not files:
        raise SuiteError(f"{directory}: no *.json test files")
    tests: list[BenchTest] = []
    templates: dict[str, Template] = {}
    seen: dict[str, Path] = {}
    for path in files:
        test, template = load_test(path)
        if test.name in seen:
            raise SuiteError(f"{path}: test name {test.name!r} already used by {seen[test.name].name}")
        seen[test.name] = path
        tests.append(test)
        if template is not None:
            templates[test.name] = template
    return Suite(tests=tuple(tests), hash=suite_hash(directory), templates=templates)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "literal_error":
            msg = f"{msg}, got {err['input']!r}"
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)
