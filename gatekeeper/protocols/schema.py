"""The language of the gate's allowlists (each protocol's `fields.py` writes its tables in it), and
the check that reads them.

A field a codec forwards is one its protocol's table lists, as one of:
  * FORWARD: relayed as sent (it cannot carry a tool or redirect the request);
  * GATED: read by the codec, which gates the tools in it (or decides the tier with it);
  * Refused(why): known, and refused with a 400 that says why (it could bring what the gate
    cannot see: a stored prompt's tools, substitute models, ...).
Anything else is unknown: refused with a 400 naming it (`upstream.unknown_fields: refuse`, the
default) or dropped and logged (`drop`). The same holds inside a tool, a tool choice, an input
item (Responses `input`, chat `messages`, Messages content blocks) and the other objects listed
below, each table keyed by the object's `type` (or role).

The lists follow the published request types (openai-python `types/chat/completion_create_params.py`,
`types/responses/response_create_params.py`, anthropic-python `types/beta/message_create_params.py`
and the tool, choice and item types they use); tests/protocols/test_fields.py compares them with
the installed SDKs, so a field the SDKs grow shows up as a failing test, not as a hole. A few
fields real OpenAI-compatible servers take (vLLM, llama.cpp) are listed where noted. To support a
new field: add it to its protocol's table with how it is treated, and, if GATED, gate it in the codec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.errors import RequestInvalid
from gatekeeper.observe import logs

FORWARD = "forward"
GATED = "gated"


@dataclass(frozen=True)
class Refused:
    why: str


# The objects a codec forwards as they are have their own tables, checked recursively by `check`
# with the same refuse/drop rule and path naming (`messages[0].content[1].foo`). A shape applies
# to an object value and to each element of an array value (content "a string or an array of
# parts"); a plain value (string, number, boolean, null) has no keys to check.


@dataclass(frozen=True)
class Obj:
    """An object with fields of its own."""

    fields: Fields
    how: str = FORWARD  # GATED when the codec also reads it (the effort in `reasoning`, ...)


@dataclass(frozen=True)
class Typed:
    """Objects told apart by their `type`, each checked against its type's table. A type not in
    `tables` is refused whatever the mode: dropping the object would change what it means."""

    tables: Mapping[str, Fields]
    default: str | None = None  # the type of an object that has none
    how: str = FORWARD


@dataclass(frozen=True)
class Map:
    """An object whose keys are the client's own (metadata, headers): each value checked as `values`."""

    values: How


@dataclass(frozen=True)
class Opaque:
    """A value the protocol defines as free-form, forwarded unread: `why` says why that is safe.
    Every one is on the list under "free-form values" below."""

    why: str


@dataclass(frozen=True)
class OneOf:
    """A string from a closed set, alone or in an array (`include`); an unknown one is refused
    (`refuse`) or removed from its array and logged (`drop`)."""

    values: frozenset[str]


# FORWARD alone means a plain value or an array of them (an object there is refused: the
# tables name the fields of every object gatekeeper forwards); GATED alone, that the codec
# checks and gates the value itself.
How = str | Refused | Obj | Typed | Map | Opaque | OneOf
Fields = Mapping[str, How]


def how_of(entry: How) -> str | Refused:
    """FORWARD, GATED or Refused: what is done with a field, whatever its shape."""
    if isinstance(entry, (str, Refused)):
        return entry
    return entry.how if isinstance(entry, (Obj, Typed)) else FORWARD


STORED_PROMPT = Refused("a stored prompt template may bring tools gatekeeper cannot see")
OTHER_MODELS = Refused("it names substitute models the tier was not decided for")
PROGRAMS = Refused("access programs may grant capabilities gatekeeper cannot see")

# -- free-form values, forwarded unread ---------------------------------------------------------
# The only values no table describes. Each is data the model reads, or the client's own keys;
# none can offer a tool, name a model or change the effort, and no server acts on what is inside.

# A JSON schema (a tool's `parameters`/`input_schema`/`output_schema`, `json_schema.schema`, an
# output format's `schema`): the shape of arguments or of an answer, read by the model and the
# server's constrained decoding; its keywords are JSON Schema's, open by design.
SCHEMA = Opaque("a JSON schema: it describes arguments or an answer, it offers nothing")
# The input of an earlier call (Messages `tool_use.input`, `server_tool_use.input`, ...; Responses
# `tool_search_call.arguments`): history the model reads; gatekeeper gates offers, not history.
CALL_INPUT = Opaque("an earlier call's arguments: history, not an offer of a tool")
# Examples of a Messages tool's input (`input_examples`): arguments the model reads as examples.
INPUT_EXAMPLES = Opaque("examples of a tool's arguments, read by the model")
# Data an earlier answer carried, sent back as it came (an MCP tool's error `content`, a Messages
# `fallback` block's `trigger`): the SDKs type it as any JSON value.
ANSWER_DATA = Opaque("an earlier answer's data, sent back as it came")
# Responses `file_search.filters`: comparisons on the attributes of files (`{"type": "and",
# "filters": [...]}`, nested without bound; the SDK types the inner ones as any object).
FILE_FILTERS = Opaque("comparisons on file attributes: they select files, they offer nothing")
# Maps whose keys are the client's own: `metadata` (chat, Responses), `logit_bias` (token id ->
# bias), an MCP server's `headers`, a local shell's `env`, a file's `attributes`. Their values
# must be plain (a string, number or boolean).
PLAIN_MAP = Map(FORWARD)
OPAQUE_VALUES: tuple[Opaque | Map, ...] = (SCHEMA, CALL_INPUT, INPUT_EXAMPLES, ANSWER_DATA, FILE_FILTERS, PLAIN_MAP)

TYPE_ONLY: Fields = {"type": FORWARD}  # {"type": "json_object"}, {"type": "wait"}, ...
CACHE_CONTROL = Typed({"ephemeral": {"type": FORWARD, "ttl": FORWARD}})  # Anthropic prompt caching
MODERATION = Obj({"model": FORWARD, "policy": Obj({"input": Obj({"mode": FORWARD}), "output": Obj({"mode": FORWARD})})})


# A user's approximate location (chat `web_search_options`, Responses and Messages web search).
APPROXIMATE: Fields = {"city": FORWARD, "country": FORWARD, "region": FORWARD, "timezone": FORWARD}
USER_LOCATION = Typed({"approximate": {"type": FORWARD, **APPROXIMATE}})

# -- the check ---------------------------------------------------------------------------------

_log = logs.get_logger(__name__)
_SHOWN = 64  # characters of a client's field name shown in an error or log line


def shown(key: str) -> str:
    """A client's key as errors and logs show it (capped)."""
    return key if len(key) <= _SHOWN else key[:_SHOWN] + "..."


_PLAIN = frozenset({str, int, float, bool, type(None)})
_CONTAINERS = (dict, list, tuple)  # tuples: in-process callers pass them where JSON has arrays


def check(obj: dict[str, Any], fields: Fields, where: str, unknown: str) -> None:
    """Refuse what `fields` refuses; refuse (`unknown == "refuse"`) or drop in place (`"drop"`,
    logged) every key of `obj` it does not list, and check the objects inside it by their own
    tables (`Obj`, `Typed`, `Map`, `OneOf`; see above). `where` is the object's path ("" at the
    top, else e.g. "tools[2]"), used to name the field in errors."""
    # Set operations first, and a plain value costs one type lookup: this runs on every
    # message, content part, tool and item of every request.
    if not obj.keys() <= fields.keys():
        _unknown(obj, fields, where, unknown)
    hit = _REFUSABLE.get(id(fields))  # inline: this runs for every object of every request
    if hit is None or hit[0] is not fields:
        hit = _remember(_REFUSABLE, fields, _refusable)
    if not hit[1].isdisjoint(obj):
        _refused(obj, fields, hit[1], where)
    plain = _PLAIN
    for key, value in obj.items():
        if type(value) in plain or not isinstance(value, _CONTAINERS):
            continue
        entry = fields[key]
        if entry != GATED:  # a GATED value is checked by the codec that reads it
            _value(value, entry, f"{where}.{key}" if where else key, unknown)


def _unknown(obj: dict[str, Any], fields: Fields, where: str, unknown: str) -> None:
    for key in [k for k in obj if k not in fields]:
        path = f"{where}.{shown(key)}" if where else f"'{shown(key)}'"
        if unknown == "drop":
            del obj[key]
            _log.warning("request_field_dropped", field=path.strip("'"))
            continue
        raise RequestInvalid(
            f"{path} is not a field gatekeeper knows here, so it is refused "
            "(upstream.unknown_fields: refuse); see its protocol's fields.py in gatekeeper/protocols/"
        )


def _refused(obj: dict[str, Any], fields: Fields, refusable: frozenset[str], where: str) -> None:
    for key in obj.keys() & refusable:
        how = fields.get(key)
        if isinstance(how, Refused) and obj[key] is not None:
            path = f"{where}.{key}" if where else f"'{key}'"
            raise RequestInvalid(f"{path} is refused: {how.why}")


def _value(value: Any, entry: How, where: str, unknown: str) -> None:
    """Check a field's object or array value against its entry."""
    if isinstance(entry, str):  # FORWARD: a plain value or an array of them
        _plain(value, where)
    elif isinstance(entry, OneOf):
        _one_of(value, entry, where, unknown)
    elif isinstance(entry, (Obj, Typed, Map)):
        if isinstance(value, dict):
            _object(value, entry, where, unknown)
            return
        for i, item in enumerate(value):
            if isinstance(item, dict):
                _object(item, entry, f"{where}[{i}]", unknown)
            elif isinstance(item, (list, tuple)):
                raise RequestInvalid(f"{where}[{i}] must be an object, got an array")
    # Opaque: free-form by the protocol (see the list below); Refused: refused above when set.


def _object(obj: dict[str, Any], entry: Obj | Typed | Map, where: str, unknown: str) -> None:
    if isinstance(entry, Obj):
        check(obj, entry.fields, where, unknown)
    elif isinstance(entry, Typed):
        kind = obj.get("type", entry.default)
        table = entry.tables.get(kind) if isinstance(kind, str) else None
        if table is None:
            check_typed(obj, entry.tables, where, unknown, entry.default)  # refuses it, saying why
        else:
            check(obj, table, where, unknown)
    else:
        for key, value in obj.items():
            if type(value) not in _PLAIN and isinstance(value, _CONTAINERS):
                _value(value, entry.values, f"{where}.{shown(str(key))}", unknown)


def _plain(value: Any, where: str) -> None:
    if isinstance(value, dict):
        raise RequestInvalid(
            f"{where} is an object where gatekeeper knows only plain values (a string, a number, a "
            "boolean or an array of them), so it is refused; see its protocol's fields.py in gatekeeper/protocols/"
        )
    for i, item in enumerate(value):
        if isinstance(item, dict) or (
            isinstance(item, (list, tuple)) and any(isinstance(x, _CONTAINERS) for x in item)
        ):  # arrays of arrays of plain values are token ids (completions, embeddings)
            raise RequestInvalid(f"{where}[{i}] must be a plain value or an array of plain values")


def _one_of(value: Any, entry: OneOf, where: str, unknown: str) -> None:
    if not isinstance(value, list):
        raise RequestInvalid(f"{where} must be an array of strings")
    unknowns = [i for i, item in enumerate(value) if not isinstance(item, str) or item not in entry.values]
    for i in unknowns:
        named = shown(value[i]) if isinstance(value[i], str) else value[i]
        if unknown != "drop":
            raise RequestInvalid(
                f"{where}[{i}] {named!r} is not a value gatekeeper knows here, so it is refused "
                f"(upstream.unknown_fields: refuse; expected one of {sorted(entry.values)})"
            )
        _log.warning("request_value_dropped", field=f"{where}[{i}]", value=named)
    if unknowns:
        value[:] = [item for i, item in enumerate(value) if i not in set(unknowns)]


def check_typed(obj: Any, tables: Mapping[str, Fields], where: str, unknown: str, default: str | None = None) -> str:
    """`check` an object against the table of its `type` (`default` when it has none); returns
    the type. An object of a type not in `tables` is refused whatever the mode: dropping it
    would change what the request means."""
    if not isinstance(obj, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(obj).__name__}")
    kind = obj.get("type", default)
    if not isinstance(kind, str) or kind not in tables:
        named = shown(kind) if isinstance(kind, str) else kind
        raise RequestInvalid(
            f"{where}.type {named!r} is not a type gatekeeper knows here (expected one of {sorted(tables)})"
        )
    check(obj, tables[kind], where, unknown)
    return kind


def check_extra_body(extra: Any, fields: Fields, unknown: str) -> None:
    """An SDK's `extra_body` (merged into the request on the wire by the SDK, and by
    SDK-style upstreams such as LiteLLM): only fields relayed as is may ride in it; a field the
    codec gates must be passed as itself, and an unknown one is refused (or dropped)."""
    if extra is None:
        return
    if not isinstance(extra, dict):
        raise RequestInvalid(f"'extra_body' must be an object, got {type(extra).__name__}")
    for key in list(extra):
        how = fields.get(key)
        if how is not None and how_of(how) != FORWARD:
            raise RequestInvalid(
                f"'extra_body.{shown(key)}' cannot be gated there: pass it as a request field of its own"
            )
    check(extra, _derived(_FORWARDED, fields, _forwarded), "extra_body", unknown)


def _refusable(fields: Fields) -> frozenset[str]:
    return frozenset(k for k, how in fields.items() if isinstance(how, Refused))


def _forwarded(fields: Fields) -> Fields:
    return {k: e for k, e in fields.items() if how_of(e) == FORWARD}


# What `check` derives from a table, per table: the fields it refuses (a fast pre-filter) and, for
# `extra_body`, its FORWARD fields. Keyed by id, holding the table itself so that an id is never
# another table's (a table built per call would otherwise reuse a dead one's id); cleared whole
# past a bound, should a caller build tables per call.
_REFUSABLE: dict[int, tuple[Fields, frozenset[str]]] = {}
_FORWARDED: dict[int, tuple[Fields, Fields]] = {}
_TABLES_KEPT = 4096


def _derived(cache: dict[int, tuple[Fields, Any]], fields: Fields, derive: Callable[[Fields], Any]) -> Any:
    hit = cache.get(id(fields))
    return hit[1] if hit is not None and hit[0] is fields else _remember(cache, fields, derive)[1]


def _remember(
    cache: dict[int, tuple[Fields, Any]], fields: Fields, derive: Callable[[Fields], Any]
) -> tuple[Fields, Any]:
    if len(cache) >= _TABLES_KEPT:
        cache.clear()
    hit = cache[id(fields)] = (fields, derive(fields))
    return hit


def read_only(fields: Fields, read: frozenset[str], why: str) -> Fields:
    """`fields` as a codec that reads only `read` of them must take them: every other GATED field
    (one another codec reads and gates: a Messages toolset's `configs`) is Refused(why), so it is
    never forwarded unread. Build such tables once (as constants): `check` keeps what it derives
    per table."""
    return {k: Refused(why) if how_of(e) == GATED and k not in read else e for k, e in fields.items()}


def offered_in(body: dict[str, Any], carriers: frozenset[str]) -> list[str]:
    """The fields of `body` among a protocol's top-level tool carriers that are set, and
    `extra_body` (which SDK-style upstreams such as LiteLLM merge into the request) when it
    holds anything."""
    return [k for k, v in body.items() if (k in carriers and v is not None) or (k == "extra_body" and v)]
