"""A tool's JSON schema and the check of a call's arguments against it, from one source.

A typed function's schema is derived by pydantic (as pydantic-ai does): the model sees that
schema, and the same pydantic model converts the checked arguments into the handler's types.
Every schema, derived or written by hand, is enforced with `jsonschema` exactly as advertised:
the check is a security gate, so a constraint it cannot enforce (an unknown `format`, a `$ref`
that does not resolve inside the schema) is refused when the tool is registered, not skipped.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, get_type_hints

import docstring_parser
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match, relevance
from jsonschema.protocols import Validator
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic import ValidationError as PydanticValidationError
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import CoreSchema
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import specification_with

from gatekeeper.errors import ToolArgumentsInvalid

Handler = Callable[..., Any]

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI accepts as a function name
_MAX_MESSAGE = 300  # an error message often goes back to the model: never echo a huge argument whole


# -- schema from a typed function ----------------------------------------------------------


class _ToolJsonSchema(GenerateJsonSchema):
    """pydantic's JSON schema without the per-field titles: the model reads names and descriptions."""

    def field_title_should_be_set(self, schema: CoreSchema) -> bool:
        return False


@dataclass(frozen=True)
class FunctionTool:
    """A typed function as a tool: its OpenAI schema and the pydantic model of its arguments."""

    schema: dict[str, Any]
    arguments: type[BaseModel]
    # pydantic field name -> the function's parameter name (fields are `p0`, `p1`, ... so that a
    # parameter may be called `json`, `copy` or `_x` without clashing with BaseModel).
    parameters: dict[str, str]

    def to_kwargs(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The handler's keyword arguments, converted to its annotations (an Enum, a model ...).

        Only the arguments the call gave are passed: the function's own defaults fill the rest.
        """
        try:
            model = self.arguments.model_validate(arguments)
        except PydanticValidationError as exc:  # a validator pydantic runs beyond the schema
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise ToolArgumentsInvalid(_clip(f"tool {tool!r}: argument {where!r}: {error['msg']}")) from None
        return {self.parameters[field]: getattr(model, field) for field in model.model_fields_set}


def function_tool(fn: Handler, *, name: str | None = None, description: str | None = None) -> FunctionTool:
    """Derive a tool from a typed function.

    Each parameter becomes a property of the schema, with pydantic's JSON schema of its
    annotation (str, int, float, bool, lists, dicts, Optional, Literal, Enum, pydantic models,
    `Annotated[int, Field(ge=1)]` ...); a parameter with a default is optional. The docstring's
    first paragraph is the description; its `Args:` (Google, NumPy or reST style) describe the
    parameters.
    """
    func_name = str(name or getattr(fn, "__name__", ""))
    if not _TOOL_NAME.match(func_name):
        raise TypeError(f"{fn!r}: tool name {func_name!r} is not 1-64 letters, digits, '_' or '-'; pass name=")
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:  # noqa: BLE001 - an unresolvable annotation: say which function
        raise TypeError(f"tool {func_name!r}: cannot resolve type hints: {exc}") from None
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    arg_docs = {p.arg_name: " ".join(p.description.split()) for p in doc.params if p.description}
    fields: dict[str, Any] = {}
    parameters: dict[str, str] = {}
    for index, param in enumerate(inspect.signature(fn).parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(
                f"tool {func_name!r}: parameter {param.name!r} must be passable by keyword "
                "(no *args, **kwargs or positional-only parameters)"
            )
        annotation = hints.get(param.name, Any)
        try:
            TypeAdapter(annotation).json_schema()
        except Exception as exc:  # noqa: BLE001 - pydantic names the type it cannot describe
            raise TypeError(
                f"tool {func_name!r}, parameter {param.name!r}: unsupported annotation {annotation!r} "
                f"(pydantic: {str(exc).splitlines()[0]})"
            ) from None
        default = ... if param.default is param.empty else param.default
        field = f"p{index}"
        fields[field] = (annotation, Field(default, alias=param.name, description=arg_docs.get(param.name)))
        parameters[field] = param.name
    model: type[BaseModel] = create_model(
        func_name, __config__=ConfigDict(extra="forbid", populate_by_name=False), **fields
    )
    schema = model.model_json_schema(by_alias=True, schema_generator=_ToolJsonSchema)
    schema.pop("title", None)
    schema.setdefault("properties", {})
    function: dict[str, Any] = {"name": func_name}
    summary = _summary(doc)
    if description or summary:
        function["description"] = description or summary
    function["parameters"] = schema
    return FunctionTool({"type": "function", "function": function}, model, parameters)


def _summary(doc: docstring_parser.Docstring) -> str:
    """The docstring's first paragraph as one line (it may wrap past the short description)."""
    text = doc.short_description or ""
    if doc.long_description and not doc.blank_after_short_description:
        text += "\n" + doc.long_description.split("\n\n")[0]
    return " ".join(text.split())


# -- compiling a schema --------------------------------------------------------------------


def _strict_integers(cls: type[Validator]) -> type[Validator]:
    """`cls` with JSON Schema's integer made strict: `3.0` is a number, not an integer.

    (Booleans are already refused as integers and numbers by jsonschema.)
    """

    def is_integer(checker: object, instance: object) -> bool:
        return isinstance(instance, int) and not isinstance(instance, bool)

    type_checker = cls.TYPE_CHECKER.redefine("integer", is_integer)
    strict: type[Validator] = validators.extend(cls, type_checker=type_checker)  # type: ignore[no-untyped-call]
    return strict


def compile_schema(tool: str, parameters: dict[str, Any]) -> Validator:
    """A validator for a tool's `parameters`; raises ValueError naming what cannot be enforced."""
    cls = validators.validator_for(parameters, default=Draft202012Validator)
    try:
        cls.check_schema(parameters)
    except SchemaError as exc:
        raise ValueError(
            _clip(f"tool {tool!r}: function.parameters is not a valid JSON schema: {exc.message}")
        ) from None
    for keyword, value in _keywords(parameters):
        if keyword == "format" and isinstance(value, str) and value not in cls.FORMAT_CHECKER.checkers:
            raise ValueError(f"tool {tool!r}: format {value!r} cannot be checked here, so it is refused")
    resource = specification_with(cls.META_SCHEMA["$schema"]).create_resource(parameters)
    resolver = Registry().with_resource("urn:gatekeeper:tool", resource).resolver("urn:gatekeeper:tool")
    for keyword, value in _keywords(parameters):
        if keyword in ("$ref", "$dynamicRef") and isinstance(value, str):
            try:
                resolver.lookup(value)
            except Unresolvable:
                raise ValueError(f"tool {tool!r}: {keyword} {value!r} does not resolve within the schema") from None
    return _strict_integers(cls)(parameters, format_checker=cls.FORMAT_CHECKER)


def _keywords(schema: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in a schema, at any depth."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key, value
            yield from _keywords(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _keywords(item)


# -- checking a call -----------------------------------------------------------------------


def check_arguments(tool: str, validator: Validator, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    """Parse a call's arguments (JSON text or a dict) and check them against the tool's schema.

    Raises `ToolArgumentsInvalid` naming the argument and what is wrong with it.
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
    errors = list(validator.iter_errors(arguments))
    if errors:
        raise ToolArgumentsInvalid(_clip(f"tool {tool!r}: {_explain(max(errors, key=relevance))}"))
    return arguments


def _explain(error: ValidationError) -> str:
    """One error in the caller's terms: which argument, what was expected, what came."""
    where = _path(error.absolute_path)
    label = f"argument {where!r}" if where else "arguments"
    instance = error.instance
    expected: Any = error.validator_value  # the keyword's value in the schema
    schema: Any = error.schema
    if error.validator in ("anyOf", "oneOf") and error.context:
        kinds: list[Any] = [e.validator_value for e in error.context if e.validator == "type" and not e.relative_path]
        if len(kinds) == len(error.context):  # every alternative is just another type
            names = [str(k) for kind in kinds for k in (kind if isinstance(kind, list) else [kind])]
            return f"{label}: expected {' or '.join(names)}, got {_describe(instance)}"
        return _explain(best_match([error]))
    if error.validator == "type":
        kinds = expected if isinstance(expected, list) else [expected]
        return f"{label}: expected {' or '.join(kinds)}, got {_describe(instance)}"
    if error.validator == "enum":
        return f"{label}: {json.dumps(instance)} is not one of {json.dumps(expected)}"
    if error.validator == "required" and isinstance(instance, dict):
        missing = next(name for name in expected if name not in instance)
        return f"missing required argument {_path([*error.absolute_path, missing])!r}"
    if error.validator == "additionalProperties" and expected is False and isinstance(instance, dict):
        known = schema.get("properties") or {}
        patterns = schema.get("patternProperties") or {}
        extra = next(key for key in instance if key not in known and not any(re.search(p, key) for p in patterns))
        return f"unknown argument {_path([*error.absolute_path, extra])!r} (expected: {', '.join(known) or 'none'})"
    return f"{label}: {error.message}"


def _path(parts: Any) -> str:
    """`["address", "zip"]` -> `address.zip`; `["ranges", 1]` -> `ranges[1]`."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


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


def _clip(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 3] + "..."
