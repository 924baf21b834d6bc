"""ToolRegistry: the in-process front end. Register tools once; each model sees only its tier's tools.

    registry = ToolRegistry(gk)

    @registry.tool(required_tier="medium")
    def write_file(path: str, content: str) -> str:
        '''Write a text file.

        Args:
            path: Where to write, relative to the workspace.
            content: The text to write.
        '''

    tools = registry.list_for_llm("some-model", effort="low")        # OpenAI tool schemas
    result = registry.call("some-model", "write_file", call.function.arguments)

Tier resolution and the config's tool rules come from the `Gatekeeper` core. This module adds
the registry, the OpenAI schema derived from a typed function, and checking a call's arguments
against a tool's schema before its handler runs.
"""

from __future__ import annotations

import asyncio
import copy
import enum
import inspect
import json
import re
import threading
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Literal, Union, get_args, get_origin, get_type_hints

import structlog

from gatekeeper.core import Gatekeeper, Resolution
from gatekeeper.errors import GatekeeperError, ToolArgumentsInvalid, ToolNotAllowed
from gatekeeper.gating import tool_name
from gatekeeper.tiers import Tier

log = structlog.get_logger("gatekeeper.registry")

Handler = Callable[..., Any]


@dataclass(frozen=True)
class RegisteredTool:
    """One tool: its OpenAI schema, the tier it requires, and what runs it (if anything)."""

    name: str
    schema: dict
    required_tier: Tier
    handler: Handler | None = None

    @property
    def parameters(self) -> dict:
        return self.schema["function"].get("parameters") or {"type": "object", "properties": {}}


class ToolRegistry:
    """The tools an application offers, gated per model by a `Gatekeeper`.

    A tool's required tier is the one given to `register`/`tool`, else the config's rule
    (`tools.required_tier`, then `tools.default_tier`). Lists returned by `list_for_llm` share
    the registered schema dicts: treat them as read-only.
    """

    def __init__(self, gk: Gatekeeper) -> None:
        self.gk = gk
        self._tools: dict[str, RegisteredTool] = {}
        self._lock = threading.Lock()
        # The visible list per tier, rebuilt lazily after each register (see _visible_for).
        self._visible: dict[Tier, list[dict]] = {}

    # -- registering -----------------------------------------------------------------------

    def register(self, schema: dict, required_tier: Tier | str | None = None,
                 handler: Handler | None = None) -> RegisteredTool:
        """Add an OpenAI tool schema (`{"type": "function", "function": {...}}`).

        `required_tier` overrides the config's rule for this tool. `handler(**arguments)` is what
        `call`/`acall` run; without one the tool can be listed but not called through the registry.
        """
        name = tool_name(schema, "tool schema")
        parameters = schema["function"].get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise ValueError(f"tool {name!r}: function.parameters must be a JSON schema object")
        required = Tier(required_tier) if required_tier is not None else self.gk.policy.required_tier(name)
        tool = RegisteredTool(name, copy.deepcopy(schema), required, handler)
        with self._lock:
            if name in self._tools:
                raise ValueError(f"tool {name!r} is already registered")
            self._tools[name] = tool
            self._visible = {}  # after the tool is in: a reader that sees the new dict sees the tool
        return tool

    def tool(self, fn: Handler | None = None, *, required_tier: Tier | str | None = None, name: str | None = None,
             description: str | None = None) -> Any:
        """Decorator: register a typed function as a tool, its schema derived by `function_schema`.

        Use as `@registry.tool` or `@registry.tool(required_tier="medium")`; the function is
        returned unchanged.
        """
        def decorate(func: Handler) -> Handler:
            self.register(function_schema(func, name=name, description=description), required_tier, func)
            return func

        if fn is not None and not callable(fn):
            raise TypeError(f"@registry.tool got {fn!r}: write @registry.tool(required_tier={fn!r})")
        return decorate(fn) if fn is not None else decorate

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)

    # -- listing ---------------------------------------------------------------------------

    def list_for_llm(self, model: str, effort: str | None = None) -> list[dict]:
        """The OpenAI tool schemas `model` may see at `effort`, in registration order.

        Follows the core's `unknown_models` policy: under `fail_closed` (the default) an unmeasured
        model gets `unknown_tier` at once while it is measured in the background; `wait` blocks up to
        `wait_timeout_s` (use `alist_for_llm` in async code); `reject` raises `NotMeasured`.
        """
        return self.tools_for_tier(self.gk.resolve(model, effort).tier)

    async def alist_for_llm(self, model: str, effort: str | None = None) -> list[dict]:
        """`list_for_llm` for async code: never blocks the event loop."""
        return self.tools_for_tier((await self.gk.aresolve(model, effort)).tier)

    def tools_for_tier(self, tier: Tier) -> list[dict]:
        """The schemas a model at `tier` may see (a new list each call)."""
        visible = self._visible  # read the dict before the tools: see register
        tools = visible.get(tier)
        if tools is None:
            tools = [t.schema for t in list(self._tools.values()) if tier.allows(t.required_tier)]
            visible[tier] = tools
        return list(tools)

    # -- calling ---------------------------------------------------------------------------

    def call(self, model: str, name: str, arguments: str | dict | None = None, effort: str | None = None) -> Any:
        """Run tool `name` for `model` if its tier allows the tool and the arguments fit the schema.

        `arguments` is the model's JSON string (or a dict). Raises `ToolNotAllowed` for a tool the
        model may not see (or that is not registered) and `ToolArgumentsInvalid` naming the argument.
        An async handler is run to completion here when no event loop is running.
        """
        tool = self._callable(name)
        self._authorize(tool, self.gk.resolve(model, effort))
        kwargs = check_arguments(tool.name, tool.parameters, arguments)
        handler = tool.handler
        if not _is_async(handler):
            return handler(**kwargs)  # type: ignore[misc]
        if _loop_running():
            raise GatekeeperError(f"tool {name!r} has an async handler: use `await registry.acall(...)` here")
        return asyncio.run(handler(**kwargs))  # type: ignore[misc]

    async def acall(self, model: str, name: str, arguments: str | dict | None = None,
                    effort: str | None = None) -> Any:
        """`call` for async code. Async handlers are awaited; sync handlers run in a worker thread."""
        tool = self._callable(name)
        self._authorize(tool, await self.gk.aresolve(model, effort))
        kwargs = check_arguments(tool.name, tool.parameters, arguments)
        handler = tool.handler
        if _is_async(handler):
            return await handler(**kwargs)  # type: ignore[misc]
        result = await asyncio.to_thread(handler, **kwargs)  # type: ignore[arg-type]
        return await result if inspect.isawaitable(result) else result

    def _callable(self, name: str) -> RegisteredTool:
        tool = self._tools.get(name)
        if tool is None:
            # The registered names are not listed: the message often goes back to the model.
            raise ToolNotAllowed(f"unknown tool {name!r}: no tool of that name is registered")
        if tool.handler is None:
            raise GatekeeperError(f"tool {name!r} was registered without a handler; nothing to run")
        return tool

    def _authorize(self, tool: RegisteredTool, resolution: Resolution) -> None:
        if resolution.tier.allows(tool.required_tier):
            return
        log.warning("tool_call_refused", tool=tool.name, required_tier=tool.required_tier.value, key=resolution.key,
                    tier=resolution.tier.value, source=resolution.source)
        raise ToolNotAllowed(
            f"tool {tool.name!r} requires tier {tool.required_tier.value!r}; model {resolution.key!r} has tier "
            f"{resolution.tier.value!r} ({resolution.source}), so the tool was hidden from it and is not run"
        )


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


# -- schema from a typed function ----------------------------------------------------------

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_ARRAYS = (list, tuple, set, frozenset)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI accepts as a function name
_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters|Params)\s*:\s*$")
_SECTION_HEADER = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def function_schema(fn: Handler, *, name: str | None = None, description: str | None = None) -> dict:
    """The OpenAI tool schema of a typed function.

    Parameter types: str, int, float, bool, list[...]/tuple[X, ...]/set[...], dict[str, ...],
    Optional/`X | None` (adds "null"), Literal[...] and Enum (an `enum`), unions, Any. A parameter
    with a default is optional (and its JSON-compatible default is shown). The docstring's first
    paragraph is the description; Google-style `Args:` lines describe the parameters.
    """
    func_name = name or getattr(fn, "__name__", "")
    if not _TOOL_NAME.match(func_name):
        raise TypeError(f"{fn!r}: tool name {func_name!r} is not 1-64 letters, digits, '_' or '-'; pass name=")
    signature = inspect.signature(fn)
    try:
        hints = get_type_hints(fn)
    except Exception as exc:  # noqa: BLE001 - unresolvable annotation: say which function
        raise TypeError(f"tool {func_name!r}: cannot resolve type hints: {exc}") from None
    summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
    properties: dict[str, dict] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"tool {func_name!r}: parameter {param.name!r} must be passable by keyword "
                            "(no *args, **kwargs or positional-only parameters)")
        where = f"tool {func_name!r}, parameter {param.name!r}"
        prop = type_schema(hints.get(param.name, Any), where)
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif _json_compatible(param.default):
            prop["default"] = param.default.value if isinstance(param.default, enum.Enum) else param.default
        properties[param.name] = prop
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    parameters["additionalProperties"] = False
    function: dict[str, Any] = {"name": func_name}
    if description or summary:
        function["description"] = description or summary
    function["parameters"] = parameters
    return {"type": "function", "function": function}


def type_schema(tp: Any, where: str = "type") -> dict:
    """The JSON schema of one Python annotation (see `function_schema` for what is supported)."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any or tp is inspect.Parameter.empty:
        return {}
    if origin is typing.Annotated:
        return type_schema(args[0], where)
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if origin in (Union, types.UnionType):
        return _union_schema(args, where)
    if origin is Literal:
        return _enum_schema(list(args), where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema([member.value for member in tp], where)
    if tp in _ARRAYS or origin in _ARRAYS:
        schema: dict[str, Any] = {"type": "array"}
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return schema  # a fixed-shape tuple: items vary by position
        items = type_schema(args[0], where) if args else {}
        if items:
            schema["items"] = items
        return schema
    if tp is dict or origin is dict:
        schema = {"type": "object"}
        values = type_schema(args[1], where) if len(args) == 2 else {}
        if values:
            schema["additionalProperties"] = values
        return schema
    raise TypeError(f"{where}: unsupported annotation {tp!r} (use str, int, float, bool, list, dict, "
                    "Optional, Literal, an Enum or a union of these)")


def _union_schema(args: tuple, where: str) -> dict:
    members = [type_schema(a, where) for a in args if a is not type(None)]
    nullable = len(members) < len(args)
    if any(m == {} for m in members):
        return {}
    if len(members) == 1:
        schema = members[0]
    elif all(set(m) == {"type"} and isinstance(m["type"], str) for m in members):
        schema = {"type": [m["type"] for m in members]}
    else:
        schema = {"anyOf": members}
    if not nullable:
        return schema
    if "anyOf" in schema:
        return {"anyOf": [*schema["anyOf"], {"type": "null"}]}
    types_ = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    schema["type"] = [*types_, "null"]
    if "enum" in schema:
        schema["enum"] = [*schema["enum"], None]
    return schema


def _enum_schema(values: list, where: str) -> dict:
    kinds: list[str] = []
    for value in values:
        if type(value) not in _SCALARS:
            raise TypeError(f"{where}: enum value {value!r} is not a JSON scalar")
        if _SCALARS[type(value)] not in kinds:
            kinds.append(_SCALARS[type(value)])
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _json_compatible(value: Any) -> bool:
    if isinstance(value, enum.Enum):
        return _json_compatible(value.value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_compatible(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_compatible(v) for k, v in value.items())
    return False


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph as one line, {parameter: description} from a Google-style `Args:` section)."""
    lines = doc.expandtabs().splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION_HEADER.match(line.strip()):
            break
        summary.append(line.strip())
    arg_docs: dict[str, str] = {}
    header_indent: int | None = None
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if header_indent is None:
            if _ARGS_HEADER.match(text):
                header_indent = indent
            continue
        if not text:
            continue
        if indent <= header_indent:
            break  # the next section
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE.match(text) if indent == entry_indent else None
        if match:
            current = match.group(1)
            arg_docs[current] = match.group(2).strip()
        elif current is not None and indent > entry_indent:
            arg_docs[current] = f"{arg_docs[current]} {text}".strip()
    return " ".join(summary), arg_docs


# -- argument validation -------------------------------------------------------------------

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, (list, tuple)),
    "object": lambda v: isinstance(v, dict),
}


def check_arguments(tool: str, parameters: dict, arguments: str | dict | None) -> dict:
    """Parse a call's arguments (JSON text or dict) and check them against the tool's parameters.

    Checks `type` (a name or a list), `enum`, `const`, `properties`, `required`,
    `additionalProperties` (false or a schema), `items` and `anyOf`/`oneOf`; other keywords are
    not checked. Integers must be JSON integers: `true`, `3.0` and `"3"` are refused.
    """
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = {}
    elif isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise ToolArgumentsInvalid(f"tool {tool!r}: arguments are not valid JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise ToolArgumentsInvalid(f"tool {tool!r}: arguments must be a JSON object, got {_describe(arguments)}")
    problem = _problem(arguments, parameters, "")
    if problem:
        raise ToolArgumentsInvalid(f"tool {tool!r}: {problem}")
    return arguments


def _problem(value: Any, schema: dict, where: str) -> str | None:
    """What is wrong with `value` under `schema` (None when it fits). `where` names the argument."""
    if not isinstance(schema, dict):
        return None
    label = f"argument {where!r}" if where else "arguments"
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_JSON_TYPES.get(n, lambda v: True)(value) for n in names):
            return f"{label}: expected {' or '.join(names)}, got {_describe(value)}"
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        return f"{label}: {json.dumps(value)} is not one of {json.dumps(schema['enum'])}"
    if "const" in schema and not _same(value, schema["const"]):
        return f"{label}: must be {json.dumps(schema['const'])}, got {json.dumps(value)}"
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if alternatives and all(_problem(value, option, where) for option in alternatives):
        return f"{label}: {_describe(value)} matches none of the allowed forms " \
               f"({_problem(value, alternatives[0], where)})"
    if isinstance(value, dict):
        return _object_problem(value, schema, where)
    if isinstance(value, (list, tuple)) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = _problem(item, schema["items"], f"{where}[{i}]")
            if problem:
                return problem
    return None


def _object_problem(value: dict, schema: dict, where: str) -> str | None:
    properties = schema.get("properties") or {}
    prefix = f"{where}." if where else ""
    for name in schema.get("required") or []:
        if name not in value:
            return f"missing required argument {prefix + name!r}"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            problem = _problem(item, properties[name], prefix + name)
        elif extra is False:
            allowed = ", ".join(properties) or "none"
            return f"unknown argument {prefix + name!r} (expected: {allowed})"
        else:
            problem = _problem(item, extra, prefix + name) if isinstance(extra, dict) else None
        if problem:
            return problem
    return None


def _same(value: Any, option: Any) -> bool:
    """JSON equality: `true` is not `1`, `1` is `1.0`."""
    if isinstance(value, bool) or isinstance(option, bool):
        return type(value) is type(option) and value == option
    return value == option


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"{'integer' if isinstance(value, int) else 'number'} {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"string {json.dumps(shown)}"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
